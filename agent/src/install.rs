//! `tern-agent install`: the DaemonSet's init step (issue 5).
//!
//! Order: (1) render and validate the conflist (reading the node's `spec.podCIDRs` when the
//! template needs them), check that every plugin in `--plugins` is a regular file in
//! `--src-bin-dir` and read it; (2) mint the first CNI token (TokenRequest), kept in memory;
//! (3) copy the plugins; (4) write the kubeconfig; (5) write the conflist, last.
//!
//! Invariants: nothing on the host changes unless the rendered conflist is valid JSON whose
//! `tern-tuning`/`tuning` sysctl entries all pass the same key, value and allowlist checks as
//! tern-tuning (`tern_net::sysctl`), every listed plugin is present, and the TokenRequest
//! succeeded; only the listed plugins (by default `tern`, `tern-tuning`, `tern-ipam`) are copied,
//! never anything else in the source directory; every file is replaced atomically (temp file in
//! the same directory, fsync, rename), so a running plugin never sees a half-written binary and the
//! runtime never sees a half-written conflist; the kubeconfig (0600) is written before the
//! conflist (0644), so the runtime never sees a network without credentials; a refusal leaves the
//! previous conflist in place.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use serde_json::Value;
use tern_kube::write_atomic;
use tern_net::sysctl::{Allowlist, SysctlKey, SysctlValue};
use tracing::info;

use crate::config::{
    api_server_from, help_text, namespace_from, parse_bool, parse_flags, FlagSpec, RunConfig,
    CREDENTIAL_FLAGS, DEFAULT_CNI_SA, DEFAULT_SA_DIR,
};
use crate::run::{in_cluster_client, mint_kubeconfig};
use crate::schedule::parse_duration;

/// Placeholder replaced by the kubeconfig path as the host sees it (a JSON string body).
pub const KUBECONFIG_PLACEHOLDER: &str = "__KUBECONFIG_FILEPATH__";
/// Placeholder replaced by the node name (a JSON string body).
pub const NODE_NAME_PLACEHOLDER: &str = "__NODE_NAME__";
/// Placeholder replaced by host-local `ranges` built from the node's `spec.podCIDRs` (a JSON value).
pub const RANGES_PLACEHOLDER: &str = "__POD_CIDR_RANGES__";

/// The CNI plugins tern ships, and `tern-lookup` (the helper that makes their API calls), copied
/// by default (`--plugins`).
pub const DEFAULT_PLUGINS: &[&str] = &["tern", "tern-tuning", "tern-ipam", "tern-lookup"];

/// The conflist template used when none is given.
pub const DEFAULT_TEMPLATE: &str = r#"{
  "cniVersion": "1.0.0",
  "name": "tern",
  "plugins": [
    {
      "type": "tern",
      "mtu": 1500,
      "kubernetes": { "kubeconfig": "__KUBECONFIG_FILEPATH__" },
      "ipam": { "type": "host-local", "ranges": __POD_CIDR_RANGES__ }
    },
    {
      "type": "tern-tuning",
      "sysctl": {
        "net.ipv4.tcp_keepalive_time": "600",
        "net.ipv4.tcp_keepalive_intvl": "60",
        "net.ipv4.tcp_keepalive_probes": "5"
      }
    }
  ]
}
"#;

/// Everything `install` needs.
#[derive(Debug, Clone)]
pub struct InstallConfig {
    /// Where the binaries come from (in the image).
    pub src_bin_dir: PathBuf,
    /// File names of the plugins to copy from `src_bin_dir` (default [`DEFAULT_PLUGINS`]); each
    /// must exist there. Nothing else is copied.
    pub plugins: Vec<String>,
    /// The host CNI bin dir as mounted in the container.
    pub cni_bin_dir: PathBuf,
    /// The host CNI conf dir as mounted in the container.
    pub cni_conf_dir: PathBuf,
    /// The CNI conf dir as the host (the runtime and the plugin) sees it.
    pub host_conf_dir: PathBuf,
    /// File name of the conflist.
    pub conflist_name: String,
    /// File name of the kubeconfig.
    pub kubeconfig_name: String,
    /// The conflist template text.
    pub template: String,
    /// The node's name (`NODE_NAME` from the downward API).
    pub node_name: String,
    /// Read `spec.podCIDRs` from the node and fill [`RANGES_PLACEHOLDER`] (from the command line:
    /// `--pod-cidrs-from-node`, default whether the template uses the placeholder).
    pub pod_cidrs_from_node: bool,
    /// The tuning allowlist as mounted in the container (absent: tern-tuning's built-in list).
    pub allowlist: PathBuf,
    /// In-cluster settings for the TokenRequest and the node read (kubeconfig path is set from
    /// the fields above).
    pub kube: RunConfig,
}

/// What `install` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Binaries copied (file names).
    pub binaries: Vec<String>,
    /// Kubeconfig path written.
    pub kubeconfig: PathBuf,
    /// Conflist path written.
    pub conflist: PathBuf,
}

impl InstallConfig {
    /// Builds the configuration from `args` (after `install`) and `env`.
    ///
    /// # Errors
    /// A bad flag or value, or no template/node name where needed.
    pub fn from_args(
        args: &[String],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Self> {
        let f = parse_flags(args, &install_flags())?;
        let get = |k: &str, d: &str| f.get(k).cloned().unwrap_or_else(|| d.to_owned());
        let api_server = api_server_from(f.get("api-server"), env)?;
        let sa_dir = PathBuf::from(get("sa-dir", DEFAULT_SA_DIR));
        let namespace = namespace_from(f.get("namespace"), env, &sa_dir);
        let mut kube = RunConfig::with_defaults(api_server, namespace);
        kube.sa_dir = sa_dir;
        kube.cni_service_account = f
            .get("service-account")
            .cloned()
            .or_else(|| env("TERN_CNI_SERVICE_ACCOUNT"))
            .unwrap_or_else(|| DEFAULT_CNI_SA.into());
        if let Some(l) = f.get("token-lifetime") {
            kube.token_lifetime =
                parse_duration(l).map_err(|e| anyhow::anyhow!("--token-lifetime: {e}"))?;
        }
        kube.validate(false)?;
        let template = match (
            f.get("template"),
            env("TERN_CONFLIST_TEMPLATE").filter(|t| !t.trim().is_empty()),
        ) {
            (Some(path), _) => {
                std::fs::read_to_string(path).with_context(|| format!("read template {path}"))?
            }
            (None, Some(t)) => t,
            (None, None) => DEFAULT_TEMPLATE.to_owned(),
        };
        let node_name = f
            .get("node-name")
            .cloned()
            .or_else(|| env("NODE_NAME"))
            .unwrap_or_default();
        let pod_cidrs_from_node = match f.get("pod-cidrs-from-node") {
            Some(v) => parse_bool("pod-cidrs-from-node", v)?,
            None => template.contains(RANGES_PLACEHOLDER),
        };
        let plugins = match f.get("plugins") {
            Some(list) => parse_plugins(list)?,
            None => DEFAULT_PLUGINS.iter().map(|p| (*p).to_owned()).collect(),
        };
        Ok(InstallConfig {
            src_bin_dir: get("src-bin-dir", "/opt/tern/bin").into(),
            plugins,
            cni_bin_dir: get("cni-bin-dir", "/host/opt/cni/bin").into(),
            cni_conf_dir: get("cni-conf-dir", "/host/etc/cni/net.d").into(),
            host_conf_dir: get("host-conf-dir", "/etc/cni/net.d").into(),
            conflist_name: get("conflist-name", "10-tern.conflist"),
            kubeconfig_name: get("kubeconfig-name", "tern-kubeconfig"),
            template,
            node_name,
            pod_cidrs_from_node,
            allowlist: get("allowlist", "/host/etc/cni/tuning/allowlist.conf").into(),
            kube,
        })
    }
}

/// `tern-agent install` flags: the credential flags of `run`, then the install's own.
pub fn install_flags() -> Vec<FlagSpec> {
    let own = [
        FlagSpec {
            name: "src-bin-dir",
            value: "DIR",
            default: "/opt/tern/bin",
            env: "",
            help: "where the plugins are (in the image)",
        },
        FlagSpec {
            name: "plugins",
            value: "LIST",
            default: "tern,tern-tuning,tern-ipam,tern-lookup",
            env: "",
            help:
                "comma-separated plugin file names to copy; each must exist, nothing else is copied",
        },
        FlagSpec {
            name: "cni-bin-dir",
            value: "DIR",
            default: "/host/opt/cni/bin",
            env: "",
            help: "the host's CNI bin dir as mounted here",
        },
        FlagSpec {
            name: "cni-conf-dir",
            value: "DIR",
            default: "/host/etc/cni/net.d",
            env: "",
            help: "the host's CNI conf dir as mounted here",
        },
        FlagSpec {
            name: "host-conf-dir",
            value: "DIR",
            default: "/etc/cni/net.d",
            env: "",
            help: "the CNI conf dir as the host sees it (fills __KUBECONFIG_FILEPATH__)",
        },
        FlagSpec {
            name: "conflist-name",
            value: "NAME",
            default: "10-tern.conflist",
            env: "",
            help: "file name of the conflist",
        },
        FlagSpec {
            name: "kubeconfig-name",
            value: "NAME",
            default: "tern-kubeconfig",
            env: "",
            help: "file name of the kubeconfig",
        },
        FlagSpec {
            name: "template",
            value: "FILE",
            default: "$TERN_CONFLIST_TEMPLATE (the text), else the built-in template",
            env: "TERN_CONFLIST_TEMPLATE",
            help: "conflist template file",
        },
        FlagSpec {
            name: "node-name",
            value: "NAME",
            default: "",
            env: "NODE_NAME",
            help: "this node (fills __NODE_NAME__; needed to read spec.podCIDRs)",
        },
        FlagSpec {
            name: "pod-cidrs-from-node",
            value: "BOOL",
            default: "true if the template uses __POD_CIDR_RANGES__ (the built-in one does)",
            env: "",
            help: "fill __POD_CIDR_RANGES__ from the node's spec.podCIDRs (one GET)",
        },
        FlagSpec {
            name: "allowlist",
            value: "FILE",
            default: "/host/etc/cni/tuning/allowlist.conf (absent: tern-tuning's built-in list)",
            env: "",
            help: "sysctl allowlist the tuning entries must pass",
        },
    ];
    CREDENTIAL_FLAGS.iter().copied().chain(own).collect()
}

/// The `tern-agent install --help` text.
pub fn help() -> String {
    help_text(
        "usage: tern-agent install [flags]

Renders and checks the conflist, checks the plugins, mints the first CNI token, then copies the
plugins, writes the kubeconfig and writes the conflist last. A refusal changes nothing on the host.",
        &install_flags(),
        "environment: TERN_LOG (debug, info, warn)",
    )
}

/// Parses `--plugins`: comma-separated plain file names, no duplicates.
///
/// # Errors
/// An empty list or entry, a name with `/` or that is `.`/`..`, or a name given twice.
pub fn parse_plugins(list: &str) -> anyhow::Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for p in list.split(',').map(str::trim) {
        if p.is_empty() || p == "." || p == ".." || p.contains('/') || p.contains('\0') {
            bail!("--plugins {list:?}: each entry must be a plain file name such as tern-tuning");
        }
        if out.iter().any(|o| o == p) {
            bail!("--plugins {list:?}: {p} listed twice");
        }
        out.push(p.to_owned());
    }
    Ok(out)
}

/// Reads every plugin in `cfg.plugins` from `cfg.src_bin_dir`: (name, bytes).
///
/// # Errors
/// A plugin is missing or not a regular file (named, with the directory and the flag to change).
fn read_plugins(cfg: &InstallConfig) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    if cfg.plugins.is_empty() {
        bail!("no plugins to install (--plugins is empty)");
    }
    let mut missing = Vec::new();
    let mut out = Vec::new();
    for name in &cfg.plugins {
        let path = cfg.src_bin_dir.join(name);
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => {
                let bytes =
                    std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
                out.push((name.clone(), bytes));
            }
            _ => missing.push(name.as_str()),
        }
    }
    if !missing.is_empty() {
        bail!(
            "plugin {} not found in {} (a regular file is needed; --src-bin-dir sets the directory, --plugins the list, now {})",
            missing.join(", "),
            cfg.src_bin_dir.display(),
            cfg.plugins.join(",")
        );
    }
    Ok(out)
}

/// A conflist whose plugins call the API (`kubernetes.kubeconfig` on a plugin, or on its `ipam`)
/// needs `tern-lookup` installed beside them: without it every such ADD fails (code 7).
///
/// # Errors
/// When the conflist needs it and `plugins` does not list it.
pub fn require_lookup_helper(conflist: &Value, plugins: &[String]) -> anyhow::Result<()> {
    let calls_api = |v: &Value| v.pointer("/kubernetes/kubeconfig").is_some();
    let needs = conflist["plugins"]
        .as_array()
        .is_some_and(|ps| ps.iter().any(|p| calls_api(p) || calls_api(&p["ipam"])));
    if needs && !plugins.iter().any(|p| p == "tern-lookup") {
        bail!("the conflist sets kubernetes.kubeconfig, so its plugins call the API through tern-lookup: add tern-lookup to --plugins (now {})", plugins.join(","));
    }
    Ok(())
}

/// host-local `ranges` for `cidrs`: one range set per CIDR (one per family).
pub fn ranges_for(cidrs: &[String]) -> Value {
    Value::Array(
        cidrs
            .iter()
            .map(|c| serde_json::json!([{ "subnet": c }]))
            .collect(),
    )
}

/// Fills the template's placeholders. `ranges` is needed only when the template uses
/// [`RANGES_PLACEHOLDER`].
///
/// # Errors
/// A placeholder has no value, or the result is not a JSON object with a non-empty `plugins` list.
pub fn render(
    template: &str,
    kubeconfig: &Path,
    node_name: &str,
    ranges: Option<&Value>,
) -> anyhow::Result<Value> {
    let js = |s: &str| {
        let q = Value::String(s.to_owned()).to_string();
        q[1..q.len() - 1].to_owned()
    };
    let mut text = template.replace(KUBECONFIG_PLACEHOLDER, &js(&kubeconfig.to_string_lossy()));
    if text.contains(NODE_NAME_PLACEHOLDER) {
        if node_name.is_empty() {
            bail!("the conflist template uses {NODE_NAME_PLACEHOLDER} but no node name is set (NODE_NAME or --node-name)");
        }
        text = text.replace(NODE_NAME_PLACEHOLDER, &js(node_name));
    }
    if text.contains(RANGES_PLACEHOLDER) {
        let Some(r) = ranges else {
            bail!("the conflist template uses {RANGES_PLACEHOLDER}; pass --pod-cidrs-from-node true to fill it from the node's spec.podCIDRs");
        };
        text = text.replace(RANGES_PLACEHOLDER, &r.to_string());
    }
    let v: Value =
        serde_json::from_str(&text).context("the rendered conflist is not valid JSON")?;
    match v.get("plugins").and_then(Value::as_array) {
        Some(p) if !p.is_empty() => Ok(v),
        _ => bail!("the rendered conflist has no \"plugins\" list"),
    }
}

/// Checks every sysctl of every `tern-tuning` (or reference `tuning`) entry: key rules, value
/// rules and the allowlist, exactly as tern-tuning does on ADD.
///
/// # Errors
/// One message naming every refused key and the allowlist's source.
pub fn validate_tuning(conflist: &Value, allowlist: &Allowlist) -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for (i, p) in conflist
        .get("plugins")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let ty = p.get("type").and_then(Value::as_str).unwrap_or("");
        if ty != "tern-tuning" && ty != "tuning" {
            continue;
        }
        let Some(sysctl) = p.get("sysctl") else {
            continue;
        };
        let Some(map) = sysctl.as_object() else {
            problems.push(format!(
                "plugins[{i}] ({ty}): \"sysctl\" must be an object of key: value strings"
            ));
            continue;
        };
        for (k, v) in map {
            let Some(v) = v.as_str() else {
                problems.push(format!(
                    "plugins[{i}] ({ty}): sysctl {k}: value must be a string"
                ));
                continue;
            };
            if let Err(e) = SysctlKey::parse(k, "eth0") {
                problems.push(format!("plugins[{i}] ({ty}): {e}"));
            } else if let Err(e) = SysctlValue::parse(k, v) {
                problems.push(format!("plugins[{i}] ({ty}): {e}"));
            } else if let Err(e) = allowlist.check(k) {
                problems.push(format!("plugins[{i}] ({ty}): {e}"));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        bail!("refusing the conflist: {}", problems.join("; "))
    }
}

/// Runs the install in the order of the module docs.
///
/// # Errors
/// Any step failed. A failure up to and including the TokenRequest changes nothing on the host;
/// after it, what was already replaced stays replaced (plugins, kubeconfig), and the conflist is
/// written only when everything before it succeeded.
pub fn install(cfg: &InstallConfig) -> anyhow::Result<Report> {
    let host_kubeconfig = cfg.host_conf_dir.join(&cfg.kubeconfig_name);
    // 1. Render and validate, and read the plugins, before touching anything.
    let ranges = if cfg.pod_cidrs_from_node {
        if cfg.node_name.is_empty() {
            bail!("reading the node's spec.podCIDRs (for {RANGES_PLACEHOLDER}) needs the node name: set NODE_NAME or pass --node-name (or --pod-cidrs-from-node false with a template that does not use {RANGES_PLACEHOLDER})");
        }
        let (client, _) = in_cluster_client(&cfg.kube).context("in-cluster credentials")?;
        let node = client
            .get_node(&cfg.node_name, Duration::from_secs(10))
            .with_context(|| format!("read node {}", cfg.node_name))?;
        if node.pod_cidrs.is_empty() {
            bail!("node {} has no spec.podCIDRs yet; retry once the controller manager has assigned them", cfg.node_name);
        }
        Some(ranges_for(&node.pod_cidrs))
    } else {
        None
    };
    let conflist = render(
        &cfg.template,
        &host_kubeconfig,
        &cfg.node_name,
        ranges.as_ref(),
    )?;
    let allowlist = Allowlist::load(&cfg.allowlist)?;
    validate_tuning(&conflist, &allowlist)?;
    require_lookup_helper(&conflist, &cfg.plugins)?;
    let conflist_text = serde_json::to_string_pretty(&conflist)? + "\n";
    let plugins = read_plugins(cfg)?;

    // 2. The first token, before the host changes: a failing TokenRequest leaves it untouched.
    let mut kube = cfg.kube.clone();
    kube.kubeconfig = cfg.cni_conf_dir.join(&cfg.kubeconfig_name);
    let minted = mint_kubeconfig(&kube).context("mint the first CNI token")?;

    // 3. The plugins (only those listed), each replaced atomically.
    std::fs::create_dir_all(&cfg.cni_bin_dir)
        .with_context(|| format!("create {}", cfg.cni_bin_dir.display()))?;
    let mut binaries = Vec::new();
    for (name, bytes) in plugins {
        write_atomic(&cfg.cni_bin_dir.join(&name), &bytes, 0o755)?;
        info!(binary = %name, dir = %cfg.cni_bin_dir.display(), "installed binary");
        binaries.push(name);
    }

    // 4. The kubeconfig, before the conflist.
    std::fs::create_dir_all(&cfg.cni_conf_dir)
        .with_context(|| format!("create {}", cfg.cni_conf_dir.display()))?;
    minted.write(&kube.kubeconfig)?;
    info!(kubeconfig = %kube.kubeconfig.display(), expires_at = %tern_kube::time::format_rfc3339(minted.status.expiration_timestamp), "wrote kubeconfig");

    // 5. The conflist, last.
    let conflist_path = cfg.cni_conf_dir.join(&cfg.conflist_name);
    write_atomic(&conflist_path, conflist_text.as_bytes(), 0o644)?;
    info!(conflist = %conflist_path.display(), "wrote conflist");
    Ok(Report {
        binaries,
        kubeconfig: kube.kubeconfig,
        conflist: conflist_path,
    })
}

/// Entry point for `tern-agent install <args>`.
///
/// # Errors
/// As [`InstallConfig::from_args`] and [`install`].
pub fn main(args: &[String]) -> anyhow::Result<()> {
    let cfg = InstallConfig::from_args(args, &|k| std::env::var(k).ok())?;
    let r = install(&cfg)?;
    info!(binaries = ?r.binaries, "install done");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conflist_that_calls_the_api_needs_tern_lookup() {
        let plugins = |l: &str| l.split(',').map(str::to_owned).collect::<Vec<_>>();
        let c = render(
            DEFAULT_TEMPLATE,
            Path::new("/k"),
            "n1",
            Some(&ranges_for(&["10.0.0.0/24".into()])),
        )
        .unwrap();
        let e = require_lookup_helper(&c, &plugins("tern,tern-tuning")).unwrap_err();
        assert!(e.to_string().contains("add tern-lookup"), "{e}");
        require_lookup_helper(&c, &plugins("tern,tern-tuning,tern-lookup")).unwrap();
        let plain =
            serde_json::json!({"plugins": [{"type": "tern", "ipam": {"type": "host-local"}}]});
        require_lookup_helper(&plain, &plugins("tern")).unwrap();
    }

    #[test]
    fn renders_placeholders_as_json() {
        let v = render(
            DEFAULT_TEMPLATE,
            Path::new("/etc/cni/net.d/tern-kubeconfig"),
            "n1",
            Some(&ranges_for(&["10.1.0.0/24".into(), "fd00::/64".into()])),
        )
        .unwrap();
        assert_eq!(
            v["plugins"][0]["kubernetes"]["kubeconfig"],
            "/etc/cni/net.d/tern-kubeconfig"
        );
        assert_eq!(
            v["plugins"][0]["ipam"]["ranges"][1][0]["subnet"],
            "fd00::/64"
        );
        let e = render(DEFAULT_TEMPLATE, Path::new("/k"), "n1", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--pod-cidrs-from-node"), "{e}");
        let e = render(
            "{\"name\":\"__NODE_NAME__\",\"plugins\":[{}]}",
            Path::new("/k"),
            "",
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("NODE_NAME"));
        assert!(render("{\"plugins\":[]}", Path::new("/k"), "", None).is_err());
        // A path with a quote cannot break out of the JSON string.
        let v = render(
            "{\"k\":\"__KUBECONFIG_FILEPATH__\",\"plugins\":[{}]}",
            Path::new("/a\"b"),
            "",
            None,
        )
        .unwrap();
        assert_eq!(v["k"], "/a\"b");
    }

    #[test]
    fn tuning_entries_use_the_allowlist() {
        let ok: Value =
            serde_json::from_str(DEFAULT_TEMPLATE.replace(RANGES_PLACEHOLDER, "[]").as_str())
                .unwrap();
        validate_tuning(&ok, &Allowlist::builtin()).unwrap();
        let bad = serde_json::json!({"plugins": [{"type": "tern-tuning", "sysctl": {"net.ipv4.ip_forward": "1", "net.ipv4.tcp_keepalive_time": "600"}}]});
        let e = validate_tuning(&bad, &Allowlist::builtin())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("net.ipv4.ip_forward") && !e.contains("tcp_keepalive_time\" is"),
            "{e}"
        );
        let escape = serde_json::json!({"plugins": [{"type": "tuning", "sysctl": {"kernel.hostname": "x"}}]});
        let strict = Allowlist::from_patterns(&["net.*", "kernel.*"], "test").unwrap();
        assert!(
            validate_tuning(&escape, &strict).is_err(),
            "outside /proc/sys/net is refused even if listed"
        );
        let badval = serde_json::json!({"plugins": [{"type": "tern-tuning", "sysctl": {"net.ipv4.tcp_keepalive_time": "6\n0"}}]});
        assert!(validate_tuning(&badval, &Allowlist::builtin()).is_err());
    }
}

//! `tern-agent install` settings: its flags (the credential flags of `run`, then its own), their
//! defaults and environment, and `--plugins` parsing.

use std::path::PathBuf;

use anyhow::{bail, Context as _};

use super::conflist::{DEFAULT_TEMPLATE, RANGES_PLACEHOLDER};
use crate::config::{
    api_server_from, help_text, namespace_from, parse_bool, parse_flags, FlagSpec, RunConfig,
    CREDENTIAL_FLAGS, DEFAULT_CNI_SA, DEFAULT_SA_DIR,
};
use crate::schedule::parse_duration;

/// The CNI plugins tern ships, and `tern-lookup` (the helper that makes their API calls), copied
/// by default (`--plugins`).
pub const DEFAULT_PLUGINS: &[&str] = &["tern", "tern-tuning", "tern-ipam", "tern-lookup"];

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

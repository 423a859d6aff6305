//! The conflist `install` writes: the template and its placeholders, rendering, the checks a
//! rendered conflist must pass before anything on the host changes (tuning sysctls against the
//! allowlist, `tern-lookup` present when its plugins call the API), and the rewrite that makes
//! its pod ranges follow new podCIDRs ([`with_pod_ranges`], which `node_cidrs.rs` applies while
//! the agent runs).
//!
//! Invariant: pure (JSON in, JSON out) and a leaf: `install` and the podCIDR follower both use it,
//! and it uses neither, so the two render and rewrite the same shape.

use std::path::Path;

use anyhow::{bail, Context as _};
use serde_json::Value;
use tern_net::sysctl::{Allowlist, SysctlKey, SysctlValue};

/// Placeholder replaced by the kubeconfig path as the host sees it (a JSON string body).
pub const KUBECONFIG_PLACEHOLDER: &str = "__KUBECONFIG_FILEPATH__";
/// Placeholder replaced by the node name (a JSON string body).
pub const NODE_NAME_PLACEHOLDER: &str = "__NODE_NAME__";
/// Placeholder replaced by host-local `ranges` built from the node's `spec.podCIDRs` (a JSON value).
pub const RANGES_PLACEHOLDER: &str = "__POD_CIDR_RANGES__";

/// The conflist template used when none is given.
pub const DEFAULT_TEMPLATE: &str = r#"{
  "cniVersion": "1.1.0",
  "name": "tern",
  "plugins": [
    {
      "type": "tern",
      "mtu": 1500,
      "kubernetes": { "kubeconfig": "__KUBECONFIG_FILEPATH__" },
      "ipam": { "type": "tern-ipam", "ranges": __POD_CIDR_RANGES__ }
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

/// Whether `ranges` has the shape [`ranges_for`] renders: one range set per CIDR, each holding
/// one range with a `subnet` and nothing else.
fn is_rendered_ranges(ranges: &Value) -> bool {
    ranges.as_array().is_some_and(|sets| {
        !sets.is_empty()
            && sets.iter().all(|set| {
                set.as_array().is_some_and(|rs| {
                    rs.len() == 1
                        && rs[0]
                            .as_object()
                            // get, not Index: a Map's Index panics on a missing key (a range
                            // such as `{"gateway": ...}` would kill the follower's thread).
                            .is_some_and(|r| {
                                r.len() == 1 && r.get("subnet").is_some_and(Value::is_string)
                            })
                })
            })
    })
}

/// `conflist` with its pod ranges following new podCIDRs: the `ranges` of every plugin's `ipam`
/// of type `tern-ipam` or `host-local` that has the shape [`RANGES_PLACEHOLDER`] renders to (one
/// range set per CIDR, each `[{"subnet": CIDR}]`) set to [`ranges_for`]`(cidrs)`, as `install`
/// would render it now. `None` when nothing changes (every such `ranges` already matches, or
/// there is none). Ranges of any other shape (an operator's own, with `rangeStart` or two ranges
/// in a set) are left as they are.
pub fn with_pod_ranges(conflist: &Value, cidrs: &[String]) -> Option<Value> {
    let want = ranges_for(cidrs);
    let mut out = conflist.clone();
    let mut changed = false;
    for plugin in out.get_mut("plugins")?.as_array_mut()?.iter_mut() {
        // get_mut, not IndexMut: indexing would add `"ipam": null` to a plugin without one.
        let Some(ipam) = plugin.get_mut("ipam").and_then(Value::as_object_mut) else {
            continue;
        };
        let follows = ipam
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| t == "tern-ipam" || t == "host-local");
        let Some(ranges) = ipam.get_mut("ranges") else {
            continue;
        };
        if follows && is_rendered_ranges(ranges) && *ranges != want {
            *ranges = want.clone();
            changed = true;
        }
    }
    changed.then_some(out)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    #[test]
    fn pod_ranges_follow_only_what_install_renders() {
        let installed = render(
            DEFAULT_TEMPLATE,
            Path::new("/k"),
            "n1",
            Some(&ranges_for(&["10.1.0.0/24".into(), "fd00:1::/64".into()])),
        )
        .unwrap();
        let cidrs = ["10.1.0.0/24".to_owned(), "fd00:9::/64".to_owned()];
        let moved = with_pod_ranges(&installed, &cidrs).expect("the IPv6 range changed");
        assert_eq!(moved["plugins"][0]["ipam"]["ranges"], ranges_for(&cidrs));
        // Everything else as it was: only the ranges differ.
        let mut back = moved.clone();
        back["plugins"][0]["ipam"]["ranges"] = installed["plugins"][0]["ipam"]["ranges"].clone();
        assert_eq!(back, installed);
        assert!(moved["plugins"][1].get("ipam").is_none(), "no ipam added");
        assert_eq!(with_pod_ranges(&moved, &cidrs), None, "already following");
        // An operator's own ranges (rangeStart; two ranges in a set), another IPAM type, and
        // documents that are not conflists are left alone.
        let own = json!({"plugins": [
            {"type": "tern", "ipam": {"type": "tern-ipam", "ranges": [[{"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.10"}]]}},
            {"type": "tern", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/25"}, {"subnet": "10.1.0.128/25"}]]}},
            {"type": "tern", "ipam": {"type": "dhcp", "ranges": [[{"subnet": "10.1.0.0/24"}]]}},
            "not a plugin"
        ]});
        assert_eq!(with_pod_ranges(&own, &cidrs), None);
        assert_eq!(with_pod_ranges(&json!([1]), &cidrs), None);
        assert_eq!(with_pod_ranges(&json!({"plugins": 3}), &cidrs), None);
        // A one-key range that is not a subnet (a typo, a gateway alone) is not install's: left
        // alone, without a panic.
        let typo = json!({"plugins": [
            {"type": "tern", "ipam": {"type": "tern-ipam", "ranges": [[{"subnett": "10.1.0.0/24"}]]}},
            {"type": "tern", "ipam": {"type": "host-local", "ranges": [[{"gateway": "10.1.0.1"}]]}}
        ]});
        assert_eq!(with_pod_ranges(&typo, &cidrs), None);
        let host_local = json!({"plugins": [{"type": "bridge", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}]]}}]});
        let moved = with_pod_ranges(&host_local, &cidrs).unwrap();
        assert_eq!(moved["plugins"][0]["ipam"]["ranges"], ranges_for(&cidrs));
    }
}

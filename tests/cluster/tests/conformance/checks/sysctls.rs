//! `sysctl_precedence`: which value a pod sees when its securityContext sets a sysctl that
//! deploy/'s tern-tuning also sets (net.ipv4.tcp_keepalive_time): the pod's own, and
//! tern-tuning's for the keys the pod leaves alone. Pod `tuned` sets tcp_keepalive_time 300 (a
//! safe sysctl, allowed by every kubelet), pod `plain` sets nothing; each reads the values back
//! from its own netns.

use crate::images::AGNHOST;
use serde_json::Value;
use tern_cluster::{fail, Node, Res};

use super::{captured, cleaning};

/// The value pod `tuned` sets.
const OWN: &str = "300";

/// The check; both pods removed however it ends.
pub fn sysctl_precedence(node: &Node) -> Res {
    let conf = node.cni_net.join("10-tern.conflist");
    let text =
        std::fs::read_to_string(&conf).map_err(|e| format!("read {}: {e}", conf.display()))?;
    let (Some(time), Some(intvl)) = (
        tuning_sysctl(&text, "net.ipv4.tcp_keepalive_time"),
        tuning_sysctl(&text, "net.ipv4.tcp_keepalive_intvl"),
    ) else {
        return fail(format!(
            "{}: tern-tuning sets no tcp_keepalive_time/intvl",
            conf.display()
        ));
    };
    node.note(&format!(
        "tern-tuning's conflist: tcp_keepalive_time {time}, tcp_keepalive_intvl {intvl} (runtime {})",
        node.runtime
    ));
    let manifests = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: tuned, namespace: default}}\nspec:\n  \
         securityContext:\n    sysctls: [{{name: net.ipv4.tcp_keepalive_time, value: \"{OWN}\"}}]\n  \
         containers: [{{name: main, image: {AGNHOST}, args: [pause]}}]\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {{name: plain, namespace: default}}\nspec:\n  \
         containers: [{{name: main, image: {AGNHOST}, args: [pause]}}]\n"
    );
    cleaning(
        node,
        || {
            node.kubectl_in(&["apply", "-f", "-"], &manifests)?;
            values_seen(node, &time, &intvl)
        },
        &["delete pod tuned plain --ignore-not-found --wait=true --timeout=60s"],
    )
}

/// What each pod reads back against what it should: every mismatch named.
fn values_seen(node: &Node, time: &str, intvl: &str) -> Res {
    node.wait_ready(&["tuned", "plain"], 120)?;
    let read = |pod: &str, key: &str| -> Res<String> {
        let path = format!("/proc/sys/net/ipv4/{key}");
        Ok(captured(&node.in_pod(pod, &["cat", &path])?).to_owned())
    };
    // (pod, key, what it should read, whose value that is)
    let own = format!("the pod's own {OWN}: tern-tuning's {time} overwrote it");
    let tuning = |v: &str| format!("tern-tuning's {v}");
    let expected = [
        ("plain", "tcp_keepalive_time", time, tuning(time)),
        ("plain", "tcp_keepalive_intvl", intvl, tuning(intvl)),
        ("tuned", "tcp_keepalive_time", OWN, own),
        ("tuned", "tcp_keepalive_intvl", intvl, tuning(intvl)),
    ];
    let mut wrong = Vec::new();
    for (pod, key, want, whose) in expected {
        let got = read(pod, key)?;
        node.note(&format!("pod {pod}: {key} {got} (expected {want})"));
        if got != want {
            wrong.push(format!("pod {pod}: {key} {got}, expected {whose}"));
        }
    }
    if wrong.is_empty() {
        return Ok(());
    }
    fail(wrong.join("\n"))
}

/// The value tern-tuning's entry of conflist `text` sets for sysctl `key`, as `jq -r` prints it.
fn tuning_sysctl(text: &str, key: &str) -> Option<String> {
    let conflist: Value = serde_json::from_str(text).ok()?;
    let plugins = conflist.get("plugins")?.as_array()?;
    let tuning = plugins.iter().find(|p| p["type"] == "tern-tuning")?;
    match tuning.get("sysctl")?.get(key)? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

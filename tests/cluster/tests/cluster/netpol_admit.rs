//! `network_policy_new_pod`: a pod created while a deny-all policy selects it is isolated from
//! its first packet. tern's ADD waits for tern-agent's admission (the conflist's
//! `networkPolicy`), so the pod's containers start only once its rules are in the kernel
//! (docs/DESIGN.md, "NetworkPolicy in the agent").

use std::net::IpAddr;
use std::time::Instant;

use tern_cluster::{fail, Node, Res};

/// Whether a TCP connection from `from` to `ip`:`port` is set up within 2 s (busybox nc).
fn connects(node: &Node, from: &str, ip: IpAddr, port: u16) -> bool {
    node.in_pod(from, &["nc", "-w", "2", &ip.to_string(), &port.to_string()])
        .is_ok()
}

/// Deny-all both ways for `role: pol-early` pods, in place before any such pod exists.
const DENY_EARLY: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
metadata: {name: pol-deny-early, namespace: default}\n\
spec: {podSelector: {matchLabels: {role: pol-early}}, policyTypes: [Ingress, Egress]}\n";

/// A pod whose container's first act is a TCP connection to `server`:80 (logged as
/// `first=open` or `first=blocked`), then it serves HTTP on 80; labelled `role: ROLE`.
fn first_connect_pod(node: &Node, name: &str, role: &str, server: IpAddr) -> String {
    let image = node.var("PAUSE_IMAGE");
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, labels: {{app: tern-test, role: {role}}}}}\n\
         spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: {image}\n    \
         imagePullPolicy: Never\n    command: [sh, -c, 'if nc -w 2 {server} 80 </dev/null; then echo first=open; \
         else echo first=blocked; fi; httpd -p 80 -h /; sleep 3600']\n"
    )
}

/// What the pod's first connection did (`open`, `blocked`), once it logged it.
fn first_connect(node: &Node, pod: &str) -> Res<String> {
    let mut seen = String::new();
    node.wait_for(30, &format!("{pod}'s first connection logged"), || {
        seen = node
            .kubectl(&["logs", pod, "-c", "main"])
            .unwrap_or_default();
        seen.contains("first=")
    })?;
    Ok(seen
        .lines()
        .find_map(|l| l.strip_prefix("first="))
        .unwrap_or_default()
        .to_owned())
}

/// A deny-all policy in place, then a new pod it selects: its own first packet is dropped, and
/// the first connection to it, started as it turns Running, fails; an unselected twin is open.
pub fn network_policy_new_pod(node: &Node) -> Res {
    let pods = ["pol-target", "pol-client"];
    node.create_pods(&pods)?;
    node.wait_ready(&pods, 90)?;
    node.in_pod("pol-target", &["httpd", "-p", "80", "-h", "/"])?;
    let target = node.pod_ip("pol-target")?;
    node.kubectl_in(&["apply", "-f", "-"], DENY_EARLY)?;

    // The twin no policy selects: the check sees an open path when there is one.
    node.kubectl_in(
        &["apply", "-f", "-"],
        &first_connect_pod(node, "pol-open", "pol-open", target),
    )?;
    let t = Instant::now();
    node.kubectl_in(
        &["apply", "-f", "-"],
        &first_connect_pod(node, "pol-early", "pol-early", target),
    )?;
    let mut ip = None;
    node.wait_for(90, "pol-early Running with an IP", || {
        let phase = node
            .kubectl(&["get", "pod", "pol-early", "-o", "jsonpath={.status.phase}"])
            .unwrap_or_default();
        ip = (phase.trim() == "Running")
            .then(|| node.pod_ip("pol-early").ok())
            .flatten();
        ip.is_some()
    })?;
    let Some(ip) = ip else {
        return fail("pol-early has no IP");
    };
    // Started the moment the pod is Running: the agent must already isolate it.
    if connects(node, "pol-client", ip, 80) {
        return fail(format!(
            "pol-client -> pol-early ({ip}):80 connected as the pod turned Running"
        ));
    }
    node.note(&format!(
        "pol-early created to Running in {:?}; first inbound connection blocked",
        t.elapsed()
    ));
    let early = first_connect(node, "pol-early")?;
    if early != "blocked" {
        return fail(format!(
            "pol-early's own first connection to {target}:80 was {early:?}, not blocked"
        ));
    }
    let open = first_connect(node, "pol-open")?;
    if open != "open" {
        return fail(format!(
            "pol-open (no policy) could not connect to {target}:80 ({open:?}): the check proves nothing"
        ));
    }
    node.kubectl(&["delete", "networkpolicy", "pol-deny-early"])?;
    node.wait_for(30, "pol-early reachable once the policy is gone", || {
        connects(node, "pol-client", ip, 80)
    })?;
    node.delete_pods(&["pol-target", "pol-client", "pol-open", "pol-early"])
}

//! ClusterNetworkPolicy around NetworkPolicy, as deploy/README.md turns it on: the CRD and RBAC
//! of deploy/cluster-network-policy/ applied, the agent's --cluster-network-policy on (its
//! environment variable TERN_CLUSTER_NETWORK_POLICY, set on the DaemonSet and removed after).
//! One server pod, one client, three cases of the API's tier semantics
//! (sigs.k8s.io/network-policy-api v0.3.0, apis/v1alpha2): an Admin `Deny` that a NetworkPolicy
//! allowing everything cannot open; an Admin `Pass` of higher precedence that hands the same
//! traffic to NetworkPolicy (open while it allows, closed once it allows only another port); a
//! Baseline `Deny` that applies while no NetworkPolicy isolates the pod and that one opens; a
//! priority change that puts a `Deny` before an `Accept`: new connections refused, one already
//! open keeps flowing (the API decides connections and says nothing of open ones; tern accepts
//! established traffic first, as for NetworkPolicy: DESIGN, "ClusterNetworkPolicy").
//! `tern-agent trace` in the agent's pod names the Admin `Deny` rule, and the node's table
//! agrees with it. The same rollout turns on the denied-flow log (TERN_NETWORK_POLICY_LOG_DENIED)
//! for `denied_log.rs`'s checks, run here on the same pods before the priority change.

use std::net::IpAddr;

use tern_cluster::{fail, Node, Res};

use crate::day2::rollout_status;
use crate::denied_log::denied_flows;
use crate::netpol::{connects, open_stream, streamed};
use crate::trace::agreed;

/// An Admin policy `name` at `priority` on cnp-server's ingress: `action` from every pod on TCP
/// port 80.
fn admin(name: &str, priority: u16, action: &str) -> String {
    format!(
        "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\n\
         metadata: {{name: {name}}}\n\
         spec:\n  tier: Admin\n  priority: {priority}\n  subject: {SUBJECT}\n  ingress:\n  \
         - {{action: {action}, from: [{{namespaces: {{}}}}], protocols: [{{tcp: {{destinationPort: {{number: 80}}}}}}]}}\n"
    )
}

/// cnp-server, by its label and namespace.
const SUBJECT: &str =
    "{pods: {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: default}}, \
podSelector: {matchLabels: {role: cnp-server}}}}";

/// An Admin policy `name` at `priority` on cnp-server's ingress: `action` on everything from
/// every pod.
fn admin_all(name: &str, priority: u16, action: &str) -> String {
    format!(
        "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\n\
         metadata: {{name: {name}}}\n\
         spec:\n  tier: Admin\n  priority: {priority}\n  subject: {SUBJECT}\n  ingress:\n  \
         - {{action: {action}, from: [{{namespaces: {{}}}}]}}\n"
    )
}

const BASELINE_DENY: &str =
    "apiVersion: policy.networking.k8s.io/v1alpha2\nkind: ClusterNetworkPolicy\n\
metadata: {name: cnp-baseline-deny}\n\
spec:\n  tier: Baseline\n  priority: 10\n  subject: {pods: {namespaceSelector: {matchLabels: \
{kubernetes.io/metadata.name: default}}, podSelector: {matchLabels: {role: cnp-server}}}}\n  \
ingress: [{action: Deny, from: [{namespaces: {}}]}]\n";

/// A NetworkPolicy of cnp-server allowing every ingress (`port` None) or TCP `port` only.
fn np(port: Option<u16>) -> String {
    let rule = port.map_or_else(
        || "{}".to_owned(),
        |p| format!("{{ports: [{{protocol: TCP, port: {p}}}]}}"),
    );
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
         metadata: {{name: cnp-np, namespace: default}}\n\
         spec: {{podSelector: {{matchLabels: {{role: cnp-server}}}}, ingress: [{rule}]}}\n"
    )
}

/// Waits (30 s) until cnp-client reaches cnp-server's `port` as `want` at every address.
fn until(node: &Node, ips: &[IpAddr], port: u16, want: bool, what: &str) -> Res {
    node.wait_for(30, what, || {
        ips.iter()
            .all(|ip| connects(node, "cnp-client", *ip, port) == want)
    })?;
    node.note(&format!(
        "{what}: port {port} {}",
        if want { "open" } else { "closed" }
    ));
    Ok(())
}

/// The flag on, with the CRD and RBAC of deploy/cluster-network-policy/.
fn turn_on(node: &Node) -> Res {
    let dir = node.root.join("deploy/cluster-network-policy");
    node.kubectl(&["apply", "--server-side", "-f", &dir.to_string_lossy()])?;
    node.kubectl(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        "crd/clusternetworkpolicies.policy.networking.k8s.io",
    ])?;
    node.kubectl(&[
        "-n",
        "tern",
        "set",
        "env",
        "daemonset/tern-agent",
        "-c",
        "agent",
        "TERN_CLUSTER_NETWORK_POLICY=true",
        "TERN_NETWORK_POLICY_LOG_DENIED=true",
    ])?;
    rollout_status(node)
}

/// The flag off, the CRD (and with it every ClusterNetworkPolicy) and RBAC deleted.
fn turn_off(node: &Node) -> Res {
    node.kubectl(&[
        "-n",
        "tern",
        "set",
        "env",
        "daemonset/tern-agent",
        "-c",
        "agent",
        "TERN_CLUSTER_NETWORK_POLICY-",
        "TERN_NETWORK_POLICY_LOG_DENIED-",
    ])?;
    rollout_status(node)?;
    let dir = node.root.join("deploy/cluster-network-policy");
    node.kubectl(&["delete", "--wait=true", "-f", &dir.to_string_lossy()])
        .map(drop)
}

/// Admin Deny over NetworkPolicy, Admin Pass to NetworkPolicy, Baseline Deny under it.
pub fn cluster_network_policy(node: &Node) -> Res {
    turn_on(node)?;
    let pods = ["cnp-server", "cnp-client"];
    node.create_pods(&pods)?;
    node.wait_ready(&pods, 90)?;
    node.kubectl(&["label", "pod", "cnp-server", "role=cnp-server"])?;
    for port in ["80", "81"] {
        node.in_pod("cnp-server", &["httpd", "-p", port, "-h", "/"])?;
    }
    let ips = node.pod_ips("cnp-server")?;
    until(node, &ips, 80, true, "no policy")?;

    // Admin Deny: a NetworkPolicy allowing everything does not open it.
    node.kubectl_in(&["apply", "-f", "-"], &np(None))?;
    node.kubectl_in(&["apply", "-f", "-"], &admin("cnp-admin-deny", 20, "Deny"))?;
    until(
        node,
        &ips,
        80,
        false,
        "Admin Deny beside an allow-all NetworkPolicy",
    )?;
    until(node, &ips, 81, true, "Admin Deny names port 80 only")?;
    let said = agreed(node, "default/cnp-client", "default/cnp-server", 80, false)?;
    let rule =
        "denied by ClusterNetworkPolicy cnp-admin-deny (Admin tier, priority 20) ingress[0] Deny";
    if !said.contains(rule) {
        return fail(format!(
            "tern-agent trace does not name the Admin rule `{rule}`: {said}"
        ));
    }

    // Admin Pass at a lower priority number (judged first): NetworkPolicy decides port 80.
    node.kubectl_in(&["apply", "-f", "-"], &admin("cnp-admin-pass", 10, "Pass"))?;
    until(
        node,
        &ips,
        80,
        true,
        "Admin Pass before the Deny, NetworkPolicy allowing all",
    )?;
    node.kubectl_in(&["apply", "-f", "-"], &np(Some(81)))?;
    until(
        node,
        &ips,
        80,
        false,
        "Admin Pass, NetworkPolicy allowing 81 only",
    )?;
    until(node, &ips, 81, true, "NetworkPolicy allowing 81")?;

    // Baseline Deny: in force while no NetworkPolicy isolates the pod; one that does opens it.
    node.kubectl(&[
        "delete",
        "clusternetworkpolicy",
        "cnp-admin-deny",
        "cnp-admin-pass",
    ])?;
    node.kubectl(&["delete", "networkpolicy", "cnp-np"])?;
    until(node, &ips, 80, true, "no policy again")?;
    node.kubectl_in(&["apply", "-f", "-"], BASELINE_DENY)?;
    until(node, &ips, 80, false, "Baseline Deny, no NetworkPolicy")?;
    until(node, &ips, 81, false, "Baseline Deny, no NetworkPolicy")?;
    node.kubectl_in(&["apply", "-f", "-"], &np(Some(80)))?;
    until(
        node,
        &ips,
        80,
        true,
        "Baseline Deny, a NetworkPolicy allowing 80",
    )?;
    until(node, &ips, 81, false, "the NetworkPolicy isolates the rest")?;

    let metrics = node.run(
        &mut Node::cmd("curl", &["-sf", "http://127.0.0.1:9413/metrics"]),
        None,
    )?;
    let want = "tern_agent_cluster_network_policy_policies{tier=\"Baseline\"} 1";
    if !metrics.lines().any(|l| l == want) {
        return fail(format!("/metrics has no `{want}`"));
    }

    node.kubectl(&["delete", "networkpolicy", "cnp-np"])?;
    node.kubectl(&["delete", "clusternetworkpolicy", "cnp-baseline-deny"])?;
    denied_flows(node, &ips)?;
    priority_change(node, &ips)?;
    node.delete_pods(&pods)?;
    turn_off(node)
}

/// An Admin `Accept` at priority 20 and a `Deny` at 30, a connection opened to port 82, then the
/// `Deny` moved to 10: new connections are refused, the open one keeps flowing.
fn priority_change(node: &Node, ips: &[IpAddr]) -> Res {
    node.kubectl_in(
        &["apply", "-f", "-"],
        &admin_all("cnp-prio-accept", 20, "Accept"),
    )?;
    node.kubectl_in(
        &["apply", "-f", "-"],
        &admin_all("cnp-prio-deny", 30, "Deny"),
    )?;
    until(node, ips, 80, true, "Admin Accept (20) before a Deny (30)")?;
    open_stream(node, "cnp-client", "cnp-server", ips[0])?;
    node.kubectl(&[
        "patch",
        "clusternetworkpolicy",
        "cnp-prio-deny",
        "--type=merge",
        "-p",
        "{\"spec\": {\"priority\": 10}}",
    ])?;
    until(
        node,
        ips,
        80,
        false,
        "the Deny moved to 10, before the Accept",
    )?;
    let before = streamed(node, "cnp-server")?;
    std::thread::sleep(std::time::Duration::from_secs(2));
    let after = streamed(node, "cnp-server")?;
    if after <= before {
        return fail(format!(
            "the connection open before the priority change stopped: {before} then {after} bytes"
        ));
    }
    node.note(&format!(
        "connection open before the priority change: {before} -> {after} bytes in 2 s after it"
    ));
    node.kubectl(&[
        "delete",
        "clusternetworkpolicy",
        "cnp-prio-accept",
        "cnp-prio-deny",
    ])
    .map(drop)
}

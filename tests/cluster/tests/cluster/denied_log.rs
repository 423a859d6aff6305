//! Denied flows named, on the tier's node (`--network-policy-log-denied`, turned on by the
//! `cluster_network_policy` case with TERN_NETWORK_POLICY_LOG_DENIED beside its own flag: one
//! rollout on and one off serve both). cnp-server isolated by a deny-all and an allow of TCP 81
//! from the tier's pods (cnp-client among them); a blocked connect to port 80 from cnp-client must be logged by the agent as
//! one line naming both pods, the port, the direction and the deny-all, and counted in
//! `tern_agent_network_policy_denied_total` for that namespace and policy; an allowed connect to
//! port 81 must log nothing.

use std::net::IpAddr;

use tern_cluster::{fail, Node, Res};

use crate::netpol::connects;

const POLICIES: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
metadata: {name: cnp-deny-all, namespace: default}\n\
spec: {podSelector: {matchLabels: {role: cnp-server}}, policyTypes: [Ingress]}\n\
---\n\
apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
metadata: {name: cnp-allow-81, namespace: default}\n\
spec: {podSelector: {matchLabels: {role: cnp-server}}, ingress: [{from: [{podSelector: \
{matchLabels: {app: tern-test}}}], ports: [{protocol: TCP, port: 81}]}]}\n";

/// `tern_agent_network_policy_denied_total` of the deny-all's ingress (0 before its first).
fn denied_total(node: &Node) -> Res<f64> {
    let metrics = node.run(
        &mut Node::cmd("curl", &["-sf", "http://127.0.0.1:9413/metrics"]),
        None,
    )?;
    let labels = [
        "namespace=\"default\"",
        "policy=\"cnp-deny-all\"",
        "direction=\"ingress\"",
    ];
    Ok(metrics
        .lines()
        .filter(|l| l.starts_with("tern_agent_network_policy_denied_total{"))
        .filter(|l| labels.iter().all(|k| l.contains(k)))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum())
}

/// The agent's log lines of denied flows.
fn denied_lines(node: &Node) -> Res<Vec<String>> {
    let agent = node.agent_pod()?;
    let log = node.kubectl(&["-n", "tern", "logs", &agent, "-c", "agent"])?;
    Ok(log
        .lines()
        .filter(|l| l.contains("network policy: denied"))
        .map(str::to_owned)
        .collect())
}

/// The deny-all's flow logged and counted; the allowed one not logged.
pub fn denied_flows(node: &Node, ips: &[IpAddr]) -> Res {
    let Some(&ip) = ips.first() else {
        return fail("cnp-server has no address");
    };
    let before = denied_total(node)?;
    // Lines before these policies (the earlier steps of the case deny flows of their own).
    let earlier = denied_lines(node)?.len();
    node.kubectl_in(&["apply", "-f", "-"], POLICIES)?;
    node.wait_for(30, "the deny-all blocks port 80", || {
        !connects(node, "cnp-client", ip, 80)
    })?;
    let want = [
        "from=default/cnp-client",
        "to=default/cnp-server",
        "protocol=TCP",
        "port=80",
        "direction=ingress",
        "default/cnp-deny-all",
    ];
    node.wait_for(10, "the agent logs the blocked connect", || {
        denied_lines(node).is_ok_and(|lines| {
            lines
                .iter()
                .skip(earlier)
                .any(|l| want.iter().all(|w| l.contains(w)))
        })
    })?;
    node.wait_for(10, "the deny-all's denied counter goes up", || {
        denied_total(node).is_ok_and(|n| n > before)
    })?;
    node.note(&format!(
        "denied flow logged; tern_agent_network_policy_denied_total{{policy=\"cnp-deny-all\"}}: {before} -> {}",
        denied_total(node)?
    ));
    let before_allowed = denied_lines(node)?.len();
    if !connects(node, "cnp-client", ip, 81) {
        return fail("cnp-client -> cnp-server:81 blocked though cnp-allow-81 allows it");
    }
    // The agent reads each logged packet as it comes: a second is plenty for a line to show.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let after = denied_lines(node)?;
    if let Some(l) = after
        .iter()
        .skip(before_allowed)
        .find(|l| l.contains("port=81"))
    {
        return fail(format!("an allowed connect was logged as denied: {l}"));
    }
    node.kubectl(&["delete", "networkpolicy", "cnp-deny-all", "cnp-allow-81"])
        .map(drop)
}

//! A change the churn never makes, to time how soon the agent brings one to the kernel around a
//! fault: a policy that isolates `probe-deny`'s ingress (no probed verdict changes: `probe-deny`
//! only sends), seen in the kernel of its node as its address in the ingress map (that node's
//! `nft`).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use tern_cluster::node2::Host;
use tern_cluster::{fail, Node, Res};

/// The marker policy.
const MARKER: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
    metadata: {name: fault-marker, namespace: default}\n\
    spec:\n  podSelector: {matchLabels: {probe: deny}}\n  policyTypes: [Ingress]\n";

/// The marker as a change only `nft` carries: the same isolation, and `probe-deny`'s egress
/// (denied at `probe-srv` already) open only to the namespace's pods on the named port `http`,
/// whose endpoint sets the agent makes through `nft` (decision 0022: every other change goes
/// over its own netlink).
const MARKER_THROUGH_NFT: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
    metadata: {name: fault-marker, namespace: default}\n\
    spec:\n  podSelector: {matchLabels: {probe: deny}}\n  policyTypes: [Ingress, Egress]\n\
    \x20 egress: [{to: [{podSelector: {}}], ports: [{port: http}]}]\n";

/// How long [`wait_in_kernel`] waits at most.
const WAIT: Duration = Duration::from_secs(30);

/// Creates the marker policy.
pub fn create(node: &Node) -> Res {
    node.kubectl_in(&["apply", "-f", "-"], MARKER).map(drop)
}

/// Creates the marker policy as a change only `nft` carries ([`MARKER_THROUGH_NFT`]).
pub fn create_through_nft(node: &Node) -> Res {
    node.kubectl_in(&["apply", "-f", "-"], MARKER_THROUGH_NFT)
        .map(drop)
}

/// Deletes it (absent is fine).
pub fn delete(node: &Node) -> Res {
    node.kubectl(&[
        "delete",
        "networkpolicy",
        "fault-marker",
        "--ignore-not-found",
    ])
    .map(drop)
}

/// Whether the ingress map of `host`'s kernel sends `ip` to a policy chain.
pub fn isolated_in_kernel(node: &Node, host: &Host, ip: IpAddr) -> bool {
    let map = if ip.is_ipv4() { "ingress4" } else { "ingress6" };
    node.run(
        &mut host.cmd("nft", &["list", "map", "inet", "tern_netpol", map]),
        None,
    )
    .is_ok_and(|out| out.contains(&format!("{ip} :")))
}

/// Polls every 50 ms until `ip` is isolated in `host`'s kernel; returns how long it took.
pub fn wait_in_kernel(node: &Node, host: &Host, ip: IpAddr) -> Res<Duration> {
    let t0 = Instant::now();
    while !isolated_in_kernel(node, host, ip) {
        if t0.elapsed() > WAIT {
            return fail(format!(
                "the marker policy is not in the kernel {WAIT:?} after it was due"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(t0.elapsed())
}

/// After a fault, with the churn paused: the marker created and timed into the kernel (the
/// agent's watches and syncer back), then the churn resumed; returns the time.
pub fn time_a_change(node: &Node, churn: &super::churn::Control) -> Res<Duration> {
    let ip = node.pod_ips("probe-deny")?[0];
    // the kernel of the node the pod is on (node 2 with two nodes)
    let host = node.host_of("probe-deny")?;
    churn.pause();
    create(node)?;
    let took = wait_in_kernel(node, &host, ip);
    churn.resume();
    let took = took?;
    let msg = format!(
        "a policy created after the fault was in the kernel after {} ms",
        took.as_millis()
    );
    node.note(&msg);
    eprintln!("[cluster] {msg}");
    Ok(took)
}

/// [`time_a_change`], at most `bound` (decision 0044).
pub fn a_change_within(node: &Node, churn: &super::churn::Control, bound: Duration) -> Res {
    let took = time_a_change(node, churn)?;
    if took > bound {
        return fail(format!(
            "a policy created after the fault took {took:?} to reach the kernel, beyond {bound:?}"
        ));
    }
    Ok(())
}

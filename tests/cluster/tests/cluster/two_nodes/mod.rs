//! The two-node cases (`cluster-2node::NAME`, TERN_CLUSTER_NODES=2): node 2 a privileged podman
//! container with its own containerd and kubelet (tests/cluster/container.sh), on a subnet of its own
//! behind a router netns with VXLAN node routes (TERN_CLUSTER_NODE_ROUTES=vxlan, the default
//! here) or on node 1's bridge with host-gw ones. tern from deploy/ as scripts/conformance
//! installs it (tests/conformance/lib.sh install_tern). The guard (inet tern_kt_guard) on both
//! nodes keeps the pods' traffic on the machine. What used to be scripts/two-nodes' checks; the
//! faults that cross nodes are faults/'s fixture on these nodes.

pub mod reregister;
mod routes;
pub mod teardown;

use std::net::IpAddr;

use tern_cluster::node2::Host;
use tern_cluster::{fail, Node, Res};

/// `install`: deploy/ applied (install_tern: the egress NAT's ranges, the VXLAN steps of
/// deploy/README.md with vxlan); then both Nodes Ready with a tern-agent Running on each, and
/// node 2's images pulled through the tier's registry (none was imported there).
pub fn install(node: &Node) -> Res {
    node.sh(&["install_tern"], &[])?;
    let node2 = node.var("NODE2");
    node.wait_for(180, "node 2 Ready", || node.ready_of(node2))?;
    for name in [node.name.as_str(), node2] {
        if !node.ready_of(name) {
            return fail(format!("node {name} is not Ready"));
        }
        let agent = node.agent_pod_of(name)?;
        node.wait_for(60, &format!("{agent} Running"), || {
            node.kubectl(&[
                "-n",
                "tern",
                "get",
                "pod",
                &agent,
                "-o",
                "jsonpath={.status.phase}",
            ])
            .is_ok_and(|p| p.trim() == "Running")
        })?;
    }
    let images = node.crictl_on(&node.node2()?, &["images"])?;
    let tern = node.var("TERN_IMAGE");
    let repo = tern.rsplit_once(':').map_or(tern, |(r, _)| r);
    if !images.contains(repo) {
        return fail(format!("node 2 has no {repo} image: {images}"));
    }
    // node 2's conflist holds its own podCIDRs
    let host = node.node2()?;
    let conflist = host.path(&format!("{}/10-tern.conflist", node.cni_net.display()));
    let text = std::fs::read_to_string(&conflist)
        .map_err(|e| format!("read {}: {e}", conflist.display()))?;
    for c in node.pod_cidrs_of(node2)? {
        if !text.contains(&format!("\"{c}\"")) {
            return fail(format!("node 2's conflist lacks its podCIDR {c}: {text}"));
        }
    }
    Ok(())
}

/// Pod `pod-n1` on node 1 and `pod-n2` on node 2, Ready.
pub fn pods_on_both(node: &Node) -> Res {
    let docs = [
        node.pod_manifest_on("pod-n1", &node.name),
        node.pod_manifest_on("pod-n2", node.var("NODE2")),
    ];
    node.kubectl_in(&["apply", "-f", "-"], &docs.join("---\n"))?;
    node.wait_ready(&["pod-n1", "pod-n2"], 180)
}

/// FROM pings TO's addresses (each family, or the first alone) 3 times, all answered.
pub fn ping_across(node: &Node, from: &str, to: &str, all_families: bool) -> Res {
    let ips = node.pod_ips(to)?;
    let n = if all_families { ips.len() } else { 1 };
    for ip in ips.iter().take(n) {
        let out = node.in_pod(from, &["ping", "-c", "3", "-W", "2", &ip.to_string()])?;
        if !out.contains(" 0% packet loss") {
            return fail(format!("{from} -> {to} ({ip}): {out}"));
        }
    }
    Ok(())
}

/// `pods_across`: a pod on each node, each pinging the other's addresses, both families on the
/// dual-stack cluster; each node's routes to the other's podCIDRs ([`routes`]); the pods' MTU
/// (1450 with VXLAN); then the pods deleted, their leases and state gone on both nodes.
pub fn pods_across(node: &Node) -> Res {
    pods_on_both(node)?;
    let ips = node.pod_ips("pod-n1")?;
    if node.var("IP_FAMILY") == "dual" && ips.len() != 2 {
        return fail(format!(
            "pod-n1's addresses {ips:?}: want one of each family"
        ));
    }
    ping_across(node, "pod-n1", "pod-n2", true)?;
    ping_across(node, "pod-n2", "pod-n1", true)?;
    routes::each_node_reaches_the_other(node)?;
    if node.var("NODE_ROUTES") == "vxlan" {
        for pod in ["pod-n1", "pod-n2"] {
            let mtu = node.in_pod(pod, &["cat", "/sys/class/net/eth0/mtu"])?;
            if mtu.trim() != "1450" {
                return fail(format!("{pod}'s MTU {}, want 1450 (VXLAN)", mtu.trim()));
            }
        }
    }
    let n2 = node.pod_ips("pod-n2")?;
    node.delete_pods(&["pod-n1", "pod-n2"])?;
    node.wait_for(60, "the sandboxes of pod-n1 and pod-n2 removed", || {
        node.crictl(&["pods", "--name", "^pod-n1$", "-q"])
            .is_ok_and(|o| o.trim().is_empty())
    })?;
    for ip in ips {
        node.nothing_left(ip)?;
    }
    let host = node.node2()?;
    node.wait_for(60, "pod-n2's leases gone on node 2", || {
        n2.iter().all(|ip| !lease(&host, *ip).exists())
    })
}

/// Node `host`'s lease file of `ip` (host-local's, tern's network).
fn lease(host: &Host, ip: IpAddr) -> std::path::PathBuf {
    host.path(&format!("/var/lib/cni/networks/tern/{ip}"))
}

/// `guard`: a node-2 pod's packet to an address off the machine (TEST-NET-1) is not answered
/// and node 2's guard counts it rejected: test traffic never leaves through node 2.
pub fn guard(node: &Node) -> Res {
    let host = node.node2()?;
    let doc = node.pod_manifest_on("pod-g2", &host.name);
    node.kubectl_in(&["apply", "-f", "-"], &doc)?;
    node.wait_ready(&["pod-g2"], 180)?;
    let before = node.guard_rejected(&host)?;
    let reached = node
        .in_pod("pod-g2", &["ping", "-c", "1", "-W", "3", "192.0.2.1"])
        .is_ok();
    let after = node.guard_rejected(&host)?;
    node.note(&format!(
        "node 2's guard rejected {before} -> {after} packets"
    ));
    node.delete_pods(&["pod-g2"])?;
    if reached {
        return fail("pod-g2 on node 2 reached 192.0.2.1");
    }
    if after <= before {
        return fail(format!(
            "node 2's guard did not count pod-g2's packet ({before} -> {after})"
        ));
    }
    Ok(())
}

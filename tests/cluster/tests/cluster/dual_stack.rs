//! `dual_stack` (the default cluster, `TERN_CLUSTER_IP_FAMILY` unset or `dual`): the Node has a
//! podCIDR and an InternalIP of each family, a pod gets an IPv4 and an IPv6 address from them
//! (tern-ipam, one range set per podCIDR), two pods ping each other over IPv6, each IPv6 address
//! has its /128 host route through a tern veth, and after DEL nothing of either address is left.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use tern_cluster::{fail, Node, Res};

/// The node's IPv6 podCIDR and the pod's addresses, checked: one per family, each inside the
/// node's podCIDR of its family. Returns (IPv4, IPv6).
fn pod_addresses(node: &Node, pod: &str, cidrs: &[IpNetwork]) -> Res<(IpAddr, IpAddr)> {
    let ips = node.pod_ips(pod)?;
    let (v4, v6): (Vec<IpAddr>, Vec<IpAddr>) = ips.iter().partition(|ip| ip.is_ipv4());
    let ([a4], [a6]) = (v4.as_slice(), v6.as_slice()) else {
        return fail(format!(
            "{pod} podIPs {ips:?}: want one IPv4 and one IPv6 address"
        ));
    };
    for ip in [a4, a6] {
        if !cidrs.iter().any(|c| c.contains(*ip)) {
            return fail(format!(
                "{pod} IP {ip} is in none of the node's podCIDRs {cidrs:?}"
            ));
        }
    }
    Ok((*a4, *a6))
}

pub fn dual_stack(node: &Node) -> Res {
    let cidrs = node.pod_cidrs()?;
    let want6: IpNetwork = node
        .var("CLUSTER_CIDR6")
        .parse()
        .map_err(|e| format!("CLUSTER_CIDR6 {:?}: {e}", node.var("CLUSTER_CIDR6")))?;
    match cidrs.as_slice() {
        [IpNetwork::V4(_), IpNetwork::V6(c6)] if want6.contains(IpAddr::V6(c6.network())) => {}
        _ => {
            return fail(format!(
                "node podCIDRs {cidrs:?}: want an IPv4 one, then an IPv6 one inside {want6}"
            ))
        }
    }
    let internal = node.internal_ips()?;
    let want: Vec<IpAddr> = [node.var("NODE_IP"), node.var("NODE_IP6")]
        .iter()
        .map(|s| s.parse().map_err(|_| format!("node address {s:?}")))
        .collect::<Res<_>>()?;
    if internal != want {
        return fail(format!("node InternalIPs {internal:?}, want {want:?}"));
    }
    // The conflist's IPAM has a range set per podCIDR (tern-agent install, from the Node).
    let conflist = node.cni_net.join("10-tern.conflist");
    let text = std::fs::read_to_string(&conflist).map_err(|e| format!("read conflist: {e}"))?;
    for c in &cidrs {
        if !text.contains(&format!("\"{c}\"")) {
            return fail(format!("conflist lacks the node's podCIDR {c}: {text}"));
        }
    }

    node.create_pods(&["pod-6a", "pod-6b"])?;
    node.wait_ready(&["pod-6a", "pod-6b"], 90)?;
    let (a4, a6) = pod_addresses(node, "pod-6a", &cidrs)?;
    let (b4, b6) = pod_addresses(node, "pod-6b", &cidrs)?;
    node.note(&format!(
        "pod-6a {a4} {a6}, pod-6b {b4} {b6} (node podCIDRs {cidrs:?})"
    ));
    // The IPv6 address is on the pod's interface, as the API reports it.
    let addrs = node.in_pod(
        "pod-6a",
        &["ip", "-6", "-o", "addr", "show", "scope", "global"],
    )?;
    if !addrs.contains(&format!(" {a6}/")) {
        return fail(format!("pod-6a has no {a6} on an interface: {addrs}"));
    }
    node.ping_from("pod-6a", &b6.to_string())?;
    node.ping_from("pod-6b", &a6.to_string())?;
    // and the node's own IPv6 address, through the pod's gateway on the host side
    node.ping_from("pod-6a", node.var("NODE_IP6"))?;
    let routes = node.run(&mut Node::cmd("ip", &["-6", "route", "show"]), None)?;
    for ip in [a6, b6] {
        // iproute2 prints a /128 host route as the bare address
        if !routes
            .lines()
            .any(|l| l.starts_with(&format!("{ip} dev tern")))
        {
            return fail(format!(
                "no /128 host route to {ip} through a tern veth: {routes}"
            ));
        }
    }
    for ip in [a4, a6, b4, b6] {
        node.wired(ip)?;
    }
    node.delete_pods(&["pod-6a", "pod-6b"])?;
    node.wait_for(60, "sandboxes of pod-6a and pod-6b removed", || {
        node.crictl(&["pods", "--name", "pod-6[ab]", "-q"])
            .is_ok_and(|o| o.trim().is_empty())
    })?;
    for ip in [a4, a6, b4, b6] {
        node.nothing_left(ip)?;
    }
    Ok(())
}

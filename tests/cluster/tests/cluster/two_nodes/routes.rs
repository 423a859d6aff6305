//! Each node's node routes to the other's podCIDRs. VXLAN: the `tern.vxlan` device (VNI 1, port
//! 4789, local the node's InternalIP, MTU 1450) and, for the other node, a route to each of its
//! podCIDRs via the podCIDR's network address, a permanent neighbour entry for that address with
//! the MAC of the other node's `tern.io/vtep-mac` annotation (its device's own), and an FDB entry
//! to the other node's InternalIP; node 1 reaches node 2 through the router. host-gw: a route to
//! each podCIDR via the other node's address of that family. tern's routes are protocol 116.

use tern_cluster::node2::Host;
use tern_cluster::{fail, Node, Res};

/// Node routes both ways (module docs).
pub fn each_node_reaches_the_other(node: &Node) -> Res {
    let (one, two) = (node.node1(), node.node2()?);
    let (ip1, ip2) = (node.var("NODE_IP"), node.var("NODE2_IP"));
    if node.var("NODE_ROUTES") == "vxlan" {
        // no L2 segment between the nodes: node 1 reaches node 2 through the router
        let via = node.run(&mut Node::cmd("ip", &["route", "get", ip2]), None)?;
        let router = format!("via {} ", node.var("ROUTER_IP1"));
        if !via.contains(&router) {
            return fail(format!("node 1 reaches {ip2} not {router}: {via}"));
        }
        vxlan(node, &one, &two, ip1, ip2)?;
        return vxlan(node, &two, &one, ip2, ip1);
    }
    let (ip1_6, ip2_6) = (node.var("NODE_IP6"), node.var("NODE2_IP6"));
    host_gw(node, &one, &two, ip2, ip2_6)?;
    host_gw(node, &two, &one, ip1, ip1_6)
}

/// `host`'s route to `cidr`: `ip route show CIDR` there.
fn route(node: &Node, host: &Host, cidr: &str) -> Res<String> {
    let fam = if cidr.contains(':') { "-6" } else { "-4" };
    node.run(&mut host.cmd("ip", &[fam, "route", "show", cidr]), None)
}

/// `host` routes each of `other`'s podCIDRs via `other_ip` (IPv4) or `other_ip6`.
fn host_gw(node: &Node, host: &Host, other: &Host, other_ip: &str, other_ip6: &str) -> Res {
    for c in node.pod_cidrs_of(&other.name)? {
        let c = c.to_string();
        let gw = if c.contains(':') { other_ip6 } else { other_ip };
        let r = route(node, host, &c)?;
        if !(r.contains(&format!("via {gw} ")) && r.contains("proto 116")) {
            return fail(format!(
                "{}'s route to {c}: {r:?}, want via {gw} proto 116",
                host.name
            ));
        }
    }
    Ok(())
}

/// `host`'s VXLAN device and its entries for `other` (module docs).
fn vxlan(node: &Node, host: &Host, other: &Host, own_ip: &str, other_ip: &str) -> Res {
    let dev = node.run(
        &mut host.cmd("ip", &["-d", "link", "show", "tern.vxlan"]),
        None,
    )?;
    let local = format!("vxlan id 1 local {own_ip} ");
    if !(dev.contains("mtu 1450 ") && dev.contains(&local) && dev.contains("dstport 4789")) {
        return fail(format!("{}'s tern.vxlan: {dev}", host.name));
    }
    let mac = node.kubectl(&[
        "get",
        "node",
        &other.name,
        "-o",
        "jsonpath={.metadata.annotations.tern\\.io/vtep-mac}",
    ])?;
    let mac = mac.trim();
    if mac.is_empty() {
        return fail(format!("{} has no tern.io/vtep-mac annotation", other.name));
    }
    let theirs = node.run(&mut other.cmd("ip", &["link", "show", "tern.vxlan"]), None)?;
    if !theirs.contains(&format!("link/ether {mac} ")) {
        return fail(format!(
            "{}'s annotation {mac} is not its device's: {theirs}",
            other.name
        ));
    }
    for c in node.pod_cidrs_of(&other.name)? {
        let net = c.network().to_string();
        let r = route(node, host, &c.to_string())?;
        if !(r.contains(&format!("via {net} dev tern.vxlan")) && r.contains("proto 116")) {
            return fail(format!("{}'s route to {c}: {r:?}", host.name));
        }
        let neigh = ["neigh", "show", &net, "dev", "tern.vxlan"];
        let n = node.run(&mut host.cmd("ip", &neigh), None)?;
        if !n.contains(&format!("lladdr {mac} PERMANENT")) {
            return fail(format!(
                "{}'s neighbour {net}: {n:?}, want {mac} PERMANENT",
                host.name
            ));
        }
    }
    let fdb = node.run(
        &mut host.cmd("bridge", &["fdb", "show", "dev", "tern.vxlan"]),
        None,
    )?;
    let entry = fdb.lines().find(|l| l.starts_with(&format!("{mac} ")));
    if !entry.is_some_and(|l| l.contains(&format!("dst {other_ip} "))) {
        return fail(format!(
            "{}'s FDB has no {mac} dst {other_ip}: {fdb}",
            host.name
        ));
    }
    Ok(())
}

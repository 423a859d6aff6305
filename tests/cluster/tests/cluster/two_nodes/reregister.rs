//! Node 2's Node object changing under the agents: deleted and registered again by its
//! restarted kubelet (`node2_reregistered`), and its InternalIP changed (`node2_readdressed`).
//! Node 1's agent must follow each: its routes to node 2's podCIDRs go with the Node and come
//! back with it, and its route (host-gw) or FDB entry (VXLAN) moves to the new address.

use std::time::Instant;

use tern_cluster::{fail, Node, Res};

use super::{ping_across, pods_on_both};
use crate::day2::rollout_status;

/// Node 1's tern routes (protocol 116) to `cidrs`, one line each; empty when none.
fn node1_routes_to(node: &Node, cidrs: &[String]) -> Res<String> {
    let mut all = String::new();
    for c in cidrs {
        let fam = if c.contains(':') { "-6" } else { "-4" };
        let args = [fam, "route", "show", c.as_str(), "proto", "116"];
        all.push_str(&node.run(&mut Node::cmd("ip", &args), None)?);
    }
    Ok(all)
}

fn cidrs_of(node: &Node, name: &str) -> Res<Vec<String>> {
    Ok(node
        .pod_cidrs_of(name)?
        .iter()
        .map(ToString::to_string)
        .collect())
}

/// Node 2's conflist's IPAM range subnets, in order.
fn node2_conflist_ranges(node: &Node) -> Res<Vec<String>> {
    let host = node.node2()?;
    let path = host.path(&format!("{}/10-tern.conflist", node.cni_net.display()));
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let ranges = v["plugins"][0]["ipam"]["ranges"].as_array().cloned();
    Ok(ranges
        .unwrap_or_default()
        .iter()
        .flat_map(|set| set.as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["subnet"].as_str().map(str::to_owned))
        .collect())
}

/// `node2_reregistered`: Node tern-node2 deleted (node 1's routes to its podCIDRs go), then
/// registered again by its restarted kubelet (routes to its new podCIDRs back, node 2's conflist
/// follows them), and pods across ping again, both families.
pub fn node2_reregistered(node: &Node) -> Res {
    let node2 = node.var("NODE2");
    let cidrs = cidrs_of(node, node2)?;
    if node1_routes_to(node, &cidrs)?.lines().count() != cidrs.len() {
        return fail(format!(
            "node 1 lacks a route to one of {cidrs:?} before the delete"
        ));
    }
    let t0 = Instant::now();
    node.kubectl(&["delete", "node", node2, "--wait=true", "--timeout=60s"])?;
    node.wait_for(60, "node 1's routes to node 2's podCIDRs gone", || {
        node1_routes_to(node, &cidrs).is_ok_and(|r| r.trim().is_empty())
    })?;
    let gone = t0.elapsed();
    let t0 = Instant::now();
    node.sh(&["kubelet_restart", "2"], &[])?;
    node.wait_for(120, "node 2 registered again with podCIDRs", || {
        cidrs_of(node, node2).is_ok_and(|c| !c.is_empty())
    })?;
    let new = cidrs_of(node, node2)?;
    node.wait_for(60, "node 1's routes to node 2's new podCIDRs", || {
        node1_routes_to(node, &new).is_ok_and(|r| r.lines().count() == new.len())
    })?;
    let back = t0.elapsed();
    node.wait_for(120, "node 2 Ready again", || node.ready_of(node2))?;
    node.wait_for(60, "node 2's conflist ranges = its podCIDRs", || {
        node2_conflist_ranges(node).is_ok_and(|r| r == new)
    })?;
    rollout_status(node)?;
    let msg = format!(
        "node 1's routes to {cidrs:?} gone {} ms after the delete; to {new:?} back {} ms after \
         the kubelet's restart",
        gone.as_millis(),
        back.as_millis()
    );
    node.note(&msg);
    eprintln!("[cluster] {msg}");
    pods_on_both(node)?;
    let r = ping_across(node, "pod-n1", "pod-n2", true)
        .and_then(|()| ping_across(node, "pod-n2", "pod-n1", true));
    node.delete_pods(&["pod-n1", "pod-n2"])?;
    r
}

/// Whether node 1 reaches node 2's IPv4 podCIDR through `ip`: host-gw's route via it, or VXLAN's
/// FDB entry to it.
fn node1_follows(node: &Node, ip: &str) -> bool {
    if node.var("NODE_ROUTES") == "vxlan" {
        let mut fdb = Node::cmd("bridge", &["fdb", "show", "dev", "tern.vxlan"]);
        return node
            .run(&mut fdb, None)
            .is_ok_and(|o| o.contains(&format!(" dst {ip} ")));
    }
    node.run(
        &mut Node::cmd("ip", &["route", "show", "proto", "116"]),
        None,
    )
    .is_ok_and(|o| o.contains(&format!("via {ip} ")))
}

/// `node2_readdressed`: node 2's InternalIP changed (a second address on its eth0, its kubelet
/// started again with it as --node-ip): node 1's route or FDB entry follows, and a pod on node 1
/// pings one on node 2 again (one way: node 2's kubelet still serves on its first address, so
/// the API server cannot exec in node 2's pods now). The last case before teardown.
pub fn node2_readdressed(node: &Node) -> Res {
    let (host, next) = (node.node2()?, node.var("NODE2_IP_NEXT"));
    let t0 = Instant::now();
    node.run(
        &mut host.cmd("ip", &["addr", "add", &format!("{next}/24"), "dev", "eth0"]),
        None,
    )?;
    let ip6 = node.var("NODE2_IP6");
    let ips = if ip6.is_empty() {
        next.to_owned()
    } else {
        format!("{next},{ip6}")
    };
    node.sh(&["kubelet_restart", "2", &ips], &[])?;
    let node2 = node.var("NODE2");
    node.wait_for(60, "node 2's InternalIP the new address", || {
        node.kubectl(&["get", "node", node2, "-o", "jsonpath={.status.addresses}"])
            .is_ok_and(|a| a.contains(&format!("\"{next}\"")))
    })?;
    node.wait_for(60, "node 1 through node 2's new address", || {
        node1_follows(node, next)
    })?;
    let msg = format!(
        "node 1 follows node 2's new address {next} in {} ms",
        t0.elapsed().as_millis()
    );
    node.note(&msg);
    eprintln!("[cluster] {msg}");
    node.wait_for(120, "node 2 Ready", || node.ready_of(node2))?;
    pods_on_both(node)?;
    let r = ping_across(node, "pod-n1", "pod-n2", false);
    node.delete_pods(&["pod-n1", "pod-n2"])?;
    r
}

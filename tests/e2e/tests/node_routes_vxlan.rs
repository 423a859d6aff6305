//! Pods across nodes on different subnets with `tern-agent run --node-routes=vxlan`: two nodes
//! (network namespaces) on two networks with a router namespace between them (which also hosts
//! the API server stand-in), each running the real agent binary and wiring a pod with the real
//! tern plugin through libcni. Asserts that host-gw cannot reach the other node's pods (its
//! InternalIP is off-link: reported, not routed), that VXLAN can, both families both ways, over
//! an IPv4 and over an IPv6 underlay; the device (VNI, port, MTU lowered by the overhead), the
//! published VTEP MACs, one route, neighbour and FDB entry per other node; pod-to-pod traffic
//! not masqueraded with the egress NAT on while traffic leaving the cluster is; a watch cut, a
//! 410 re-list and an agent restart writing nothing; a deleted node's entries gone; and the
//! drain's release removing the device.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod vxlan_nodes;

use std::time::Duration;

use common::{wait_for, NodeNs};
use tern_net::netns::NetNs;
use vxlan_nodes::*;

fn vxlan_across_subnets(tag: &str, underlay_v6: bool) {
    let (router, guard, mut nodes, api_ip) = cluster(tag, underlay_v6);
    let api = guard.api();
    let addrs: Vec<[String; 2]> = (1..=2u8)
        .map(|i| nodes[usize::from(i) - 1].add_pod(i))
        .collect();

    // host-gw: the other node's InternalIP is on no network of this node's: reported, no route,
    // no pod traffic.
    for n in &mut nodes {
        n.start_agent(api, &api_ip, "host-gw");
    }
    for n in &nodes {
        assert_eq!(
            n.metric("tern_agent_node_routes_unrouted{reason=\"not_connected\"}"),
            2,
            "{}",
            n.log()
        );
        assert!(n.routes().is_empty());
    }
    let fails = pods_reach_each_other(&nodes, &addrs);
    assert_eq!(fails.len(), 4, "host-gw must not cross subnets: {fails:?}");

    // VXLAN: a device per node, its MAC published, one route per podCIDR through it.
    for n in &mut nodes {
        n.start_agent(api, &api_ip, "vxlan");
    }
    let want = |j: u8| {
        let [c4, c6] = pod_cidrs(j);
        let mut v = vec![
            format!("{c4} via {} dev {DEV} onlink", c4.trim_end_matches("/24")),
            format!(
                "{c6} via {} dev {DEV} metric 1024 onlink pref medium",
                c6.trim_end_matches("/64")
            ),
        ];
        v.sort();
        v
    };
    for (k, n) in nodes.iter().enumerate() {
        let other = if k == 0 { 2 } else { 1 };
        wait_for(&format!("VXLAN routes on {}", n.name), || {
            n.routes() == want(other)
        });
        assert_eq!(
            api.node_annotation(&n.name, "tern.io/vtep-mac").as_deref(),
            Some(n.mac().as_str())
        );
        let link = n.ns.ip(&["-d", "link", "show", DEV]);
        let mtu = if underlay_v6 { "mtu 1430" } else { "mtu 1450" };
        assert!(link.contains(mtu), "{link}");
        assert!(
            link.contains("vxlan id 1 ") && link.contains("dstport 4789"),
            "{link}"
        );
        assert!(link.contains("nolearning"), "{link}");
        let [o4, o6] = node_ips(other);
        let under = if underlay_v6 { o6 } else { o4 };
        let peer_mac = nodes[usize::from(other) - 1].mac();
        let fdb = n.ns.exec_ok(&["bridge", "fdb", "show", "dev", DEV]);
        assert!(
            fdb.contains(&format!("{peer_mac} dst {under} self permanent")),
            "{fdb}"
        );
        let neigh = n.ns.ip(&["neigh", "show", "dev", DEV, "nud", "permanent"]);
        assert_eq!(neigh.lines().count(), 2, "{neigh}");
        assert!(neigh.lines().all(|l| l.contains(&peer_mac)), "{neigh}");
        assert_eq!(n.metric("tern_agent_node_routes_vxlan_peers"), 1);
    }
    let fails = pods_reach_each_other(&nodes, &addrs);
    assert!(fails.is_empty(), "VXLAN pod to pod failed: {fails:?}");

    // With the egress NAT on: pod to pod keeps the pod's address, pod to the outside does not.
    let pod2 = &nodes[1].pod;
    let pod2 = &pod2.as_ref().unwrap().0;
    for (fam, to) in [(0, &addrs[1][0]), (1, &addrs[1][1])] {
        assert_eq!(
            nodes[0].source_seen(pod2, to),
            Some(addrs[0][fam].parse().unwrap()),
            "pod-to-pod traffic to {to} was masqueraded"
        );
    }
    assert_eq!(
        nodes[0].source_seen(&router, "192.168.82.254"),
        Some(node_ips(1)[0].parse().unwrap()),
        "traffic leaving the cluster is masqueraded"
    );

    // Idempotent: watch cuts, a 410 re-list and an agent restart write nothing.
    let before: Vec<String> = nodes.iter().map(NodeNs::vxlan_state).collect();
    let writes = nodes[1].metric("tern_agent_node_routes_vxlan_writes_total");
    let lists = nodes[1].metric("tern_agent_node_routes_lists_total");
    api.cut_node_watches();
    std::thread::sleep(Duration::from_millis(500));
    api.compact_node_history();
    api.cut_node_watches();
    wait_for("a re-list after 410", || {
        nodes[1].metric("tern_agent_node_routes_lists_total") == lists + 1
    });
    assert_eq!(
        nodes[1].metric("tern_agent_node_routes_vxlan_writes_total"),
        writes
    );
    nodes[0].start_agent(api, &api_ip, "vxlan");
    for series in [
        "tern_agent_node_routes_added_total",
        "tern_agent_node_routes_moved_total",
        "tern_agent_node_routes_removed_total",
        "tern_agent_node_routes_vxlan_writes_total",
        "tern_agent_node_routes_vxlan_published_total",
    ] {
        assert_eq!(nodes[0].metric(series), 0, "{series} after a restart");
    }
    let after: Vec<String> = nodes.iter().map(NodeNs::vxlan_state).collect();
    assert_eq!(before, after, "a restart or re-list changed the kernel");

    // Node 2 deleted: its route, neighbours and FDB entry go from node 1; its pod is unreachable.
    assert!(api.delete_node("node-2"));
    wait_for("node 2's entries gone", || nodes[0].routes().is_empty());
    assert_eq!(
        nodes[0]
            .ns
            .ip(&["neigh", "show", "dev", DEV, "nud", "permanent"])
            .trim(),
        ""
    );
    assert_eq!(
        nodes[0]
            .ns
            .exec_ok(&["bridge", "fdb", "show", "dev", DEV])
            .trim(),
        ""
    );
    assert!(!nodes[0].ping(&addrs[1][0]) && !nodes[0].ping(&addrs[1][1]));
    assert_eq!(nodes[0].metric("tern_agent_node_routes_vxlan_peers"), 0);

    // The drain's release (the last DEL after `tern-agent uninstall`) removes the device.
    nodes[0].stop_agent();
    let h = tern_net::netlink::Handle::in_netns(&NetNs::open(nodes[0].ns.path()).unwrap()).unwrap();
    tern_net::drain::remove_node_routes(&h).unwrap();
    assert!(!nodes[0].ns.has_link(DEV));
}

#[test]
fn vxlan_crosses_subnets_where_host_gw_cannot_over_ipv4() {
    if tern_testkit::root::skip() {
        return;
    }
    vxlan_across_subnets("4", false);
}

#[test]
fn vxlan_crosses_subnets_where_host_gw_cannot_over_ipv6() {
    if tern_testkit::root::skip() {
        return;
    }
    vxlan_across_subnets("6", true);
}

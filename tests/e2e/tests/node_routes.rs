//! Pods across nodes with `tern-agent run --node-routes`: three nodes (network namespaces) on
//! one L2 segment (a bridge in a fourth, which also hosts the API server stand-in), each
//! running the real agent binary and wiring a pod with the real tern plugin through libcni.
//! Asserts routes and pod-to-pod traffic for both families, both ways; start-up reconcile (stale
//! tern routes removed, others' routes kept); a node off the segment reported, not routed; watch cuts and
//! a 410 re-list without a route change; a podCIDR change moving the route; a deleted node's
//! routes gone everywhere; and an API server that is down leaving every route in place.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{wait_for, NodeNs, NsApi};
use serde_json::json;
use tern_apiserver::ApiServer;
use tern_testkit::exec::{conflist, Cnitool};
use tern_testkit::netns::TestNetns;

/// tern's routing protocol number, as `ip route show proto` takes it.
const PROTO: &str = "116";
const HUB_V4: &str = "192.168.77.254";
const HUB_V6: &str = "fd77::fe";

fn v4_cidr(i: u8) -> String {
    format!("10.77.{i}.0/24")
}

fn v6_cidr(i: u8) -> String {
    format!("fd78:{i}::/64")
}

impl NodeNs {
    fn start_agent(&mut self, api: &ApiServer) {
        self.spawn_agent(api, HUB_V4, &["--node-routes"]);
    }

    /// Tern's routes in this node, both families, as `dst via gw` lines, sorted.
    fn routes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for fam in ["-4", "-6"] {
            let text = self.ns.ip(&[fam, "route", "show", "proto", PROTO]);
            for line in text.lines() {
                let w: Vec<&str> = line.split_whitespace().collect();
                out.push(format!("{} via {}", w[0], w[2]));
            }
        }
        out.sort();
        out
    }

    /// A pod wired by tern (host-local on this node's podCIDRs); returns its two addresses.
    fn add_pod(&mut self, i: u8) -> [String; 2] {
        let pod = TestNetns::new(&format!("nr-pod{i}"));
        let mut tool = Cnitool::new().unwrap();
        tool.in_netns(Some(self.ns.name()));
        let scratch = tool.scratch().to_path_buf();
        let plugin = json!({"type": "tern", "stateDir": scratch.join("state"),
            "ipam": {"type": "host-local", "dataDir": scratch.join("ipam"),
                "ranges": [[{"subnet": v4_cidr(i)}], [{"subnet": v6_cidr(i)}]]}});
        tool.write_conflist(&conflist("pods", "1.0.0", vec![plugin]))
            .unwrap();
        common::ok(&tool.add(pod.path()).unwrap(), "ADD");
        self.pod = Some((pod, tool));
        [format!("10.77.{i}.2"), format!("fd78:{i}::2")]
    }
}

/// The routes a node should hold for `others`: (node number, its IPv4 podCIDR if moved).
fn expected(others: &[(u8, Option<&str>)]) -> Vec<String> {
    let mut v: Vec<String> = others
        .iter()
        .flat_map(|(j, cidr4)| {
            [
                format!(
                    "{} via 192.168.77.{j}",
                    cidr4.map_or(v4_cidr(*j), str::to_owned)
                ),
                format!("{} via fd77::{j}", v6_cidr(*j)),
            ]
        })
        .collect();
    v.sort();
    v
}

#[test]
fn pods_on_three_nodes_reach_each_other_through_node_routes() {
    if tern_testkit::root::skip() {
        return;
    }
    let hub = TestNetns::new("nr-hub");
    hub.ip(&["link", "add", "br0", "type", "bridge"]);
    hub.ip(&["link", "set", "br0", "up"]);
    hub.ip(&["addr", "add", &format!("{HUB_V4}/24"), "dev", "br0"]);
    hub.ip(&[
        "-6",
        "addr",
        "add",
        &format!("{HUB_V6}/64"),
        "dev",
        "br0",
        "nodad",
    ]);
    let mut guard = NsApi::start(&hub, format!("{HUB_V4}:0").parse().unwrap());
    let api = guard.api();
    api.add_service_account("tern", "tern-cni");
    api.set_bookmark_interval(Duration::from_millis(200));

    let mut nodes: Vec<NodeNs> = (1..=3u8)
        .map(|i| {
            let ns = TestNetns::new(&format!("nr-node{i}"));
            let port = format!("nr{i}-{}", std::process::id() % 10_000);
            ns.ip(&["link", "add", "eth0", "type", "veth", "peer", "name", &port]);
            ns.ip(&["link", "set", &port, "netns", hub.name()]);
            hub.ip(&["link", "set", &port, "master", "br0", "up"]);
            // The link-local address comes up valid, not tentative: for a forwarded packet the
            // kernel solicits the next hop only from a valid link-local source (ndisc_send_ns),
            // so during the 1-2 s of DAD after link-up a freshly made node forwards no IPv6.
            ns.exec_ok(&["sysctl", "-qw", "net.ipv6.conf.eth0.accept_dad=0"]);
            ns.ip(&["link", "set", "eth0", "up"]);
            ns.ip(&["addr", "add", &format!("192.168.77.{i}/24"), "dev", "eth0"]);
            ns.ip(&[
                "-6",
                "addr",
                "add",
                &format!("fd77::{i}/64"),
                "dev",
                "eth0",
                "nodad",
            ]);
            ns.ip(&["route", "add", "default", "via", HUB_V4]);
            ns.ip(&["-6", "route", "add", "default", "via", HUB_V6]);
            let name = format!("node-{i}");
            api.set_node_with_ips(
                &name,
                &[&v4_cidr(i), &v6_cidr(i)],
                &[&format!("192.168.77.{i}"), &format!("fd77::{i}")],
            );
            NodeNs::new(name, ns)
        })
        .collect();
    // A node whose InternalIP is on no network of theirs: reported, never routed.
    api.set_node_with_ips("far", &["10.77.200.0/24"], &["10.200.0.4"]);

    // Node 1 holds a stale tern route from an earlier life, and someone else's route.
    let n1 = &nodes[0].ns;
    n1.ip(&[
        "route",
        "add",
        "10.77.99.0/24",
        "via",
        "192.168.77.99",
        "proto",
        PROTO,
    ]);
    n1.ip(&[
        "route",
        "add",
        "10.77.98.0/24",
        "via",
        "192.168.77.98",
        "proto",
        "static",
    ]);

    for n in &mut nodes {
        n.start_agent(api);
    }
    for (k, n) in nodes.iter().enumerate() {
        let me = k as u8 + 1;
        let others: Vec<(u8, Option<&str>)> =
            (1..=3u8).filter(|j| *j != me).map(|j| (j, None)).collect();
        let want = expected(&others);
        wait_for(&format!("routes on {}", n.name), || n.routes() == want);
    }
    assert!(
        nodes[0]
            .ns
            .ip(&["route", "show", "10.77.98.0/24"])
            .contains("proto static"),
        "another owner's route must stay"
    );
    assert_eq!(
        nodes[0].metric("tern_agent_node_routes_removed_total"),
        1,
        "the stale route"
    );
    assert_eq!(
        nodes[0].metric("tern_agent_node_routes_unrouted{reason=\"not_connected\"}"),
        1
    );
    assert!(nodes[0]
        .log()
        .contains("not on a directly connected network"));

    let addrs: Vec<[String; 2]> = (1..=3u8)
        .map(|i| nodes[usize::from(i) - 1].add_pod(i))
        .collect();
    // Pod to pod across nodes, both families, both ways.
    for (from, to) in [(0, 1), (0, 2), (1, 0), (2, 0)] {
        for ip in &addrs[to] {
            assert!(
                nodes[from].ping(ip),
                "pod on node {} cannot reach {ip}",
                from + 1
            );
        }
    }

    // Watches cut mid-event resume; history compacted: 410, one re-list; no route changes.
    let before: Vec<(u64, u64, u64)> = nodes.iter().map(churn).collect();
    let lists: Vec<u64> = nodes
        .iter()
        .map(|n| n.metric("tern_agent_node_routes_lists_total"))
        .collect();
    api.cut_node_watches();
    std::thread::sleep(Duration::from_millis(700));
    api.compact_node_history();
    api.cut_node_watches();
    for (k, n) in nodes.iter().enumerate() {
        wait_for("a re-list after 410", || {
            n.metric("tern_agent_node_routes_lists_total") == lists[k] + 1
        });
        assert!(n.metric("tern_agent_node_routes_watch_events_total{type=\"gone\"}") >= 1);
    }
    let after: Vec<(u64, u64, u64)> = nodes.iter().map(churn).collect();
    assert_eq!(
        before, after,
        "a watch cut and a re-list must not touch routes"
    );

    // Node 3's podCIDR changes: its route moves on nodes 1 and 2.
    api.set_node_with_ips(
        "node-3",
        &["10.77.33.0/24", &v6_cidr(3)],
        &["192.168.77.3", "fd77::3"],
    );
    let want = expected(&[(2, None), (3, Some("10.77.33.0/24"))]);
    wait_for("node 3's route moved", || nodes[0].routes() == want);

    // Node 3 deleted: its routes go everywhere, its pod is unreachable.
    assert!(api.delete_node("node-3"));
    wait_for("node 3's routes gone", || {
        nodes[0].routes() == expected(&[(2, None)]) && nodes[1].routes() == expected(&[(1, None)])
    });
    assert!(!nodes[0].ping(&addrs[2][0]) && !nodes[0].ping(&addrs[2][1]));

    // The API server goes away: every route stays, pods keep talking.
    guard.stop();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(nodes[0].routes(), expected(&[(2, None)]));
    assert_eq!(nodes[1].routes(), expected(&[(1, None)]));
    for (from, to) in [(0, 1), (1, 0)] {
        for ip in &addrs[to] {
            assert!(nodes[from].ping(ip), "{ip} unreachable with the API down");
        }
    }
    assert!(
        nodes[0].log().contains("routes unchanged"),
        "{}",
        nodes[0].log()
    );
}

/// Route adds, moves and removals so far on a node.
fn churn(n: &NodeNs) -> (u64, u64, u64) {
    (
        n.metric("tern_agent_node_routes_added_total"),
        n.metric("tern_agent_node_routes_moved_total"),
        n.metric("tern_agent_node_routes_removed_total"),
    )
}

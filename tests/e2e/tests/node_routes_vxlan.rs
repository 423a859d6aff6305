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

use std::net::{IpAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{wait_for, NodeNs, NsApi};
use serde_json::json;
use tern_apiserver::ApiServer;
use tern_net::netns::NetNs;
use tern_testkit::exec::{conflist, Cnitool};
use tern_testkit::netns::TestNetns;

const PROTO: &str = "116";
const DEV: &str = "tern.vxlan";
const CLUSTER: &str = "10.81.0.0/16,fd91::/16";

/// Node `i`'s addresses: IPv4 and IPv6 on its own network `192.168.8i.0/24`, `fd8i::/64`.
fn node_ips(i: u8) -> [String; 2] {
    [format!("192.168.8{i}.{i}"), format!("fd8{i}::{i}")]
}

fn pod_cidrs(i: u8) -> [String; 2] {
    [format!("10.81.{i}.0/24"), format!("fd91:{i}::/64")]
}

impl NodeNs {
    fn start_agent(&mut self, api: &ApiServer, api_ip: &str, mode: &str) {
        let routes = format!("--node-routes={mode}");
        let flags = [
            routes.as_str(),
            "--egress-nat",
            "true",
            "--cluster-cidrs",
            CLUSTER,
        ];
        self.spawn_agent(api, api_ip, &flags);
        wait_for("the agent's metrics", || {
            self.try_metric("tern_agent_node_routes_synced") == Some(1)
        });
    }

    /// tern's routes, both families, as `ip route` prints them (sorted).
    fn routes(&self) -> Vec<String> {
        let mut out: Vec<String> = ["-4", "-6"]
            .iter()
            .flat_map(|fam| {
                self.ns
                    .ip(&[fam, "route", "show", "proto", PROTO])
                    .lines()
                    .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                    .collect::<Vec<_>>()
            })
            .collect();
        out.sort();
        out
    }

    /// Everything VXLAN keeps in the kernel, for before/after comparisons.
    fn vxlan_state(&self) -> String {
        if !self.ns.has_link(DEV) {
            return String::new();
        }
        let neigh = self
            .ns
            .ip(&["neigh", "show", "dev", DEV, "nud", "permanent"]);
        let fdb = self.ns.exec_ok(&["bridge", "fdb", "show", "dev", DEV]);
        let link = self.ns.ip(&["-d", "link", "show", DEV]);
        format!("{}\n{neigh}\n{fdb}\n{link}", self.routes().join("\n"))
    }

    fn mac(&self) -> String {
        let text = self.ns.ip(&["link", "show", DEV]);
        let w: Vec<&str> = text.split_whitespace().collect();
        let at = w.iter().position(|t| *t == "link/ether").unwrap();
        w[at + 1].to_owned()
    }

    /// A pod wired by tern (host-local on this node's podCIDRs); returns its two addresses.
    fn add_pod(&mut self, i: u8) -> [String; 2] {
        let (pod, tool, addrs) = self.wire_pod(i, 1500, 2);
        self.pod = Some((pod, tool));
        addrs
    }

    /// A pod netns wired by tern with `mtu` on its interface and the addresses `start` of node
    /// `i`'s podCIDRs (each call has its own host-local data: the range begins at `start`).
    fn wire_pod(&self, i: u8, mtu: u32, start: u8) -> (TestNetns, Cnitool, [String; 2]) {
        let pod = TestNetns::new(&format!("vx-pod{i}"));
        let mut tool = Cnitool::new().unwrap();
        tool.in_netns(Some(self.ns.name()));
        let scratch = tool.scratch().to_path_buf();
        let [v4, v6] = pod_cidrs(i);
        let plugin = json!({"type": "tern", "stateDir": scratch.join("state"), "mtu": mtu,
            "ipam": {"type": "host-local", "dataDir": scratch.join("ipam"),
                "ranges": [[{"subnet": v4, "rangeStart": format!("10.81.{i}.{start}")}],
                    [{"subnet": v6, "rangeStart": format!("fd91:{i}::{start}")}]]}});
        tool.write_conflist(&conflist("pods", "1.0.0", vec![plugin]))
            .unwrap();
        common::ok(&tool.add(pod.path()).unwrap(), "ADD");
        let addrs = [format!("10.81.{i}.{start}"), format!("fd91:{i}::{start}")];
        (pod, tool, addrs)
    }

    /// Sends one UDP datagram from this node's pod to `to`, where a socket bound in `at`
    /// listens; returns the source address it arrived from (`None`: nothing within 3 s).
    fn source_seen(&self, at: &TestNetns, to: &str) -> Option<IpAddr> {
        let ip: IpAddr = to.parse().unwrap();
        let sock = NetNs::open(at.path())
            .unwrap()
            .run_in(move || UdpSocket::bind((ip, 0)))
            .unwrap()
            .unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let port = sock.local_addr().unwrap().port();
        let out = self
            .pod()
            .exec(&["bash", "-c", &format!("echo hello > /dev/udp/{to}/{port}")]);
        assert!(out.status.success(), "send to {to} failed");
        let mut buf = [0u8; 64];
        sock.recv_from(&mut buf).ok().map(|(_, from)| from.ip())
    }
}

/// Two nodes on `192.168.81.0/24` + `fd81::/64` and `192.168.82.0/24` + `fd82::/64`, a router
/// between them; each node's InternalIPs list the underlay's family first.
fn cluster(tag: &str, underlay_v6: bool) -> (TestNetns, NsApi, Vec<NodeNs>, String) {
    let router = TestNetns::new(&format!("vx{tag}-rtr"));
    router.exec_ok(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    router.exec_ok(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
    // The API server listens on the router's loopback, which outlives the nodes' veths (its
    // shutdown connects to its own address).
    router.ip(&["link", "set", "lo", "up"]);
    router.ip(&["addr", "add", "10.255.81.1/32", "dev", "lo"]);
    router.ip(&["-6", "addr", "add", "fd8f::1/128", "dev", "lo"]);
    let api_ip = if underlay_v6 {
        "fd8f::1"
    } else {
        "10.255.81.1"
    };
    let mut nodes = Vec::new();
    for i in 1..=2u8 {
        let ns = TestNetns::new(&format!("vx{tag}-node{i}"));
        let port = format!("vx{tag}{i}-{}", std::process::id() % 10_000);
        ns.ip(&["link", "add", "eth0", "type", "veth", "peer", "name", &port]);
        ns.ip(&["link", "set", &port, "netns", router.name()]);
        router.exec_ok(&[
            "sysctl",
            "-qw",
            &format!("net.ipv6.conf.{port}.accept_dad=0"),
        ]);
        router.ip(&["link", "set", &port, "up"]);
        router.ip(&["addr", "add", &format!("192.168.8{i}.254/24"), "dev", &port]);
        router.ip(&[
            "-6",
            "addr",
            "add",
            &format!("fd8{i}::fe/64"),
            "dev",
            &port,
            "nodad",
        ]);
        // A valid link-local at once (see node_routes.rs: no forwarded IPv6 during DAD).
        ns.exec_ok(&["sysctl", "-qw", "net.ipv6.conf.eth0.accept_dad=0"]);
        ns.ip(&["link", "set", "eth0", "up"]);
        let [v4, v6] = node_ips(i);
        ns.ip(&["addr", "add", &format!("{v4}/24"), "dev", "eth0"]);
        ns.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{v6}/64"),
            "dev",
            "eth0",
            "nodad",
        ]);
        ns.ip(&[
            "route",
            "add",
            "default",
            "via",
            &format!("192.168.8{i}.254"),
        ]);
        ns.ip(&[
            "-6",
            "route",
            "add",
            "default",
            "via",
            &format!("fd8{i}::fe"),
        ]);
        nodes.push(NodeNs::new(format!("node-{i}"), ns));
    }
    let bind = if underlay_v6 {
        format!("[{api_ip}]:0")
    } else {
        format!("{api_ip}:0")
    };
    let guard = NsApi::start(&router, bind.parse().unwrap());
    let api = guard.api();
    api.add_service_account("tern", "tern-cni");
    api.set_bookmark_interval(Duration::from_millis(200));
    for i in 1..=2u8 {
        let [v4, v6] = node_ips(i);
        let ips = if underlay_v6 { [v6, v4] } else { [v4, v6] };
        let [c4, c6] = pod_cidrs(i);
        api.set_node_with_ips(&format!("node-{i}"), &[&c4, &c6], &[&ips[0], &ips[1]]);
    }
    (router, guard, nodes, api_ip.to_owned())
}

fn pods_reach_each_other(nodes: &[NodeNs], addrs: &[[String; 2]]) -> Vec<String> {
    let mut fails = Vec::new();
    for (from, to) in [(0, 1), (1, 0)] {
        for ip in &addrs[to] {
            if !nodes[from].ping(ip) {
                fails.push(format!("node-{} -> {ip}", from + 1));
            }
        }
    }
    fails
}

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

/// Two nodes on one L2 segment (`192.168.80.0/24`, a bridge in a hub namespace that also hosts
/// the API server stand-in), where host-gw and VXLAN both work: the pair the figures compare.
fn one_segment(tag: &str) -> (TestNetns, NsApi, Vec<NodeNs>, String) {
    let hub = TestNetns::new(&format!("vx{tag}-hub"));
    hub.ip(&["link", "add", "br0", "type", "bridge"]);
    hub.ip(&["link", "set", "br0", "up"]);
    hub.ip(&["addr", "add", "192.168.80.254/24", "dev", "br0"]);
    let mut nodes = Vec::new();
    for i in 1..=2u8 {
        let ns = TestNetns::new(&format!("vx{tag}-node{i}"));
        let port = format!("vx{tag}{i}-{}", std::process::id() % 10_000);
        ns.ip(&["link", "add", "eth0", "type", "veth", "peer", "name", &port]);
        ns.ip(&["link", "set", &port, "netns", hub.name()]);
        hub.ip(&["link", "set", &port, "master", "br0", "up"]);
        ns.ip(&["link", "set", "eth0", "up"]);
        ns.ip(&["addr", "add", &format!("192.168.80.{i}/24"), "dev", "eth0"]);
        // A default route, as every node has: the host veths answer the pods' ARP for their
        // gateway 169.254.1.1 (proxy ARP) only when the node can route to it.
        ns.ip(&["route", "add", "default", "via", "192.168.80.254"]);
        nodes.push(NodeNs::new(format!("node-{i}"), ns));
    }
    let guard = NsApi::start(&hub, "192.168.80.254:0".parse().unwrap());
    let api = guard.api();
    api.add_service_account("tern", "tern-cni");
    for i in 1..=2u8 {
        let [c4, c6] = pod_cidrs(i);
        api.set_node_with_ips(
            &format!("node-{i}"),
            &[&c4, &c6],
            &[&format!("192.168.80.{i}")],
        );
    }
    (hub, guard, nodes, "192.168.80.254".to_owned())
}

/// TCP throughput in Gbit/s (iperf3, `secs` seconds, received side) and ICMP round trip in µs
/// (ping, 200 at 5 ms, average) from pod `from` to `to` (server in pod `at`).
fn measure(from: &TestNetns, at: &TestNetns, to: &str, secs: u32) -> (f64, f64) {
    let mut server = Command::new("ip")
        .args(["netns", "exec", at.name(), "iperf3", "-s", "-1", "-B", to])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let out = from.exec(&["iperf3", "-c", to, "-t", &secs.to_string(), "-J"]);
    // The server may linger after its one test: it is not waited for.
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        out.status.success(),
        "iperf3 to {to}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let gbits = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("no throughput from iperf3: {out}"))
        / 1e9;
    let ping = from.exec_ok(&["ping", "-q", "-c", "200", "-i", "0.005", to]);
    // "rtt min/avg/max/mdev = 0.031/0.045/0.120/0.010 ms"
    let avg_ms: f64 = ping
        .lines()
        .find_map(|l| l.split(" = ").nth(1))
        .and_then(|v| v.split('/').nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    (gbits, avg_ms * 1000.0)
}

/// The median of three runs of [`measure`].
fn median3(from: &TestNetns, at: &TestNetns, to: &str) -> (f64, f64) {
    let mut runs: Vec<(f64, f64)> = (0..3).map(|_| measure(from, at, to, 5)).collect();
    let mut t: Vec<f64> = runs.iter().map(|r| r.0).collect();
    runs.sort_by(|a, b| a.1.total_cmp(&b.1));
    t.sort_by(f64::total_cmp);
    (t[1], runs[1].1)
}

/// docs/BENCHMARKS.md's pod-to-pod figures: `scripts/test -p tern-e2e --test node_routes_vxlan
/// -- --ignored --nocapture dataplane_figures` (needs iperf3). Same node; host-gw; VXLAN with
/// 1500-byte pods (path-MTU discovery) and with 1450-byte pods (the device's MTU); IPv4.
#[test]
#[ignore = "figures for docs/BENCHMARKS.md, about a minute; needs iperf3"]
fn dataplane_figures() {
    if tern_testkit::root::skip() {
        return;
    }
    let (_hub, guard, mut nodes, api_ip) = one_segment("b");
    let api = guard.api();
    let (a, _ta, a_ip) = nodes[0].wire_pod(1, 1500, 2);
    let (c, _tc, c_ip) = nodes[0].wire_pod(1, 1500, 100);
    let (b, _tb, b_ip) = nodes[1].wire_pod(2, 1500, 2);
    let mut rows = Vec::new();
    rows.push(("same node", median3(&a, &c, &c_ip[0])));
    for n in &mut nodes {
        n.start_agent(api, &api_ip, "host-gw");
    }
    wait_for("host-gw routes", || nodes[0].routes().len() == 1);
    rows.push(("host-gw, pods 1500", median3(&a, &b, &b_ip[0])));
    for n in &mut nodes {
        n.start_agent(api, &api_ip, "vxlan");
    }
    wait_for("vxlan routes", || {
        nodes
            .iter()
            .all(|n| n.routes().iter().any(|r| r.contains(DEV)))
    });
    rows.push(("vxlan, pods 1500 (PMTU)", median3(&a, &b, &b_ip[0])));
    let (a2, _ta2, _) = nodes[0].wire_pod(1, 1450, 50);
    let (b2, _tb2, b2_ip) = nodes[1].wire_pod(2, 1450, 50);
    rows.push(("vxlan, pods 1450", median3(&a2, &b2, &b2_ip[0])));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("pod to pod, IPv4, median of 3 (iperf3 -t 5; ping -c 200 -i 0.005); load {load}");
    println!("| path | TCP Gbit/s | RTT µs |");
    for (what, (g, rtt)) in rows {
        println!("| {what} | {g:.2} | {rtt:.0} |");
    }
    let _ = a_ip;
}

//! Figures for docs/BENCHMARKS.md ("pod to pod: host-gw and VXLAN"): two netns nodes on one
//! segment, TCP throughput (iperf3) and round trip (ping) between their pods on host-gw, on VXLAN
//! and on one node; an ignored test, run by hand.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod vxlan_nodes;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{wait_for, NodeNs, NsApi};
use tern_testkit::netns::TestNetns;
use vxlan_nodes::*;

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

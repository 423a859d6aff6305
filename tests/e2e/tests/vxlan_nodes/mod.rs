//! Fixtures of the VXLAN tests (`node_routes_vxlan`, `node_routes_vxlan_figures`; not in `common`,
//! whose `NodeNs` methods `node_routes` defines its own way): two node netns on two subnets with a
//! router between them, each running the real agent, their pods wired through libcni.

// Not every test binary uses every helper.
#![allow(dead_code)]

use std::net::{IpAddr, UdpSocket};

use std::time::Duration;

use serde_json::json;
use tern_apiserver::ApiServer;
use tern_net::netns::NetNs;
use tern_testkit::exec::{conflist, Cnitool};
use tern_testkit::netns::TestNetns;

use crate::common::{wait_for, NodeNs, NsApi};

pub const PROTO: &str = "116";
pub const DEV: &str = "tern.vxlan";
pub const CLUSTER: &str = "10.81.0.0/16,fd91::/16";

/// Node `i`'s addresses: IPv4 and IPv6 on its own network `192.168.8i.0/24`, `fd8i::/64`.
pub fn node_ips(i: u8) -> [String; 2] {
    [format!("192.168.8{i}.{i}"), format!("fd8{i}::{i}")]
}

pub fn pod_cidrs(i: u8) -> [String; 2] {
    [format!("10.81.{i}.0/24"), format!("fd91:{i}::/64")]
}

impl NodeNs {
    pub fn start_agent(&mut self, api: &ApiServer, api_ip: &str, mode: &str) {
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
    pub fn routes(&self) -> Vec<String> {
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
    pub fn vxlan_state(&self) -> String {
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

    pub fn mac(&self) -> String {
        let text = self.ns.ip(&["link", "show", DEV]);
        let w: Vec<&str> = text.split_whitespace().collect();
        let at = w.iter().position(|t| *t == "link/ether").unwrap();
        w[at + 1].to_owned()
    }

    /// A pod wired by tern (host-local on this node's podCIDRs); returns its two addresses.
    pub fn add_pod(&mut self, i: u8) -> [String; 2] {
        let (pod, tool, addrs) = self.wire_pod(i, 1500, 2);
        self.pod = Some((pod, tool));
        addrs
    }

    /// A pod netns wired by tern with `mtu` on its interface and the addresses `start` of node
    /// `i`'s podCIDRs (each call has its own host-local data: the range begins at `start`).
    pub fn wire_pod(&self, i: u8, mtu: u32, start: u8) -> (TestNetns, Cnitool, [String; 2]) {
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
        crate::common::ok(&tool.add(pod.path()).unwrap(), "ADD");
        let addrs = [format!("10.81.{i}.{start}"), format!("fd91:{i}::{start}")];
        (pod, tool, addrs)
    }

    /// Sends one UDP datagram from this node's pod to `to`, where a socket bound in `at`
    /// listens; returns the source address it arrived from (`None`: nothing within 3 s).
    pub fn source_seen(&self, at: &TestNetns, to: &str) -> Option<IpAddr> {
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
pub fn cluster(tag: &str, underlay_v6: bool) -> (TestNetns, NsApi, Vec<NodeNs>, String) {
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

pub fn pods_reach_each_other(nodes: &[NodeNs], addrs: &[[String; 2]]) -> Vec<String> {
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

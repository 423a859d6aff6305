//! The egress fixture: a node netns whose only uplink leads to a "router" netns, which holds
//! addresses outside every pod network and reports the source address of what reaches them
//! (a UDP socket bound in the router; no packet capture needed), and the node's nftables tables
//! as text.

use std::net::{IpAddr, UdpSocket};
use std::time::Duration;

use tern_net::netns::NetNs;
use tern_testkit::netns::TestNetns;

/// The node's address on its uplink.
pub const NODE_V4: &str = "192.0.2.1";
/// The node's IPv6 address on its uplink.
pub const NODE_V6: &str = "2001:db8:1::1";
/// The router's address on the node's link.
pub const ROUTER_V4: &str = "192.0.2.254";
/// The router's IPv6 address on the node's link.
pub const ROUTER_V6: &str = "2001:db8:1::fe";
/// An address beyond the router (on its `lo`): outside the node, the pods and the cluster.
pub const FAR_V4: &str = "198.51.100.7";
/// The same, IPv6.
pub const FAR_V6: &str = "2001:db8:99::7";

/// A node and its router.
pub struct Edge {
    /// The node (tern and the agent run here).
    pub node: TestNetns,
    /// The router.
    pub router: TestNetns,
}

impl Edge {
    /// A node linked to a router; the router routes `pod_subnets` back to the node (so that
    /// un-masqueraded traffic would be answered too) and holds [`FAR_V4`], [`FAR_V6`] and
    /// `extra` (more addresses of its own, e.g. one inside the cluster's ranges).
    pub fn new(tag: &str, pod_subnets: &[&str], extra: &[&str]) -> Edge {
        let node = TestNetns::new(&format!("{tag}-n"));
        let router = TestNetns::new(&format!("{tag}-r"));
        node.ip(&[
            "link",
            "add",
            "up0",
            "type",
            "veth",
            "peer",
            "name",
            "rt0",
            "netns",
            router.name(),
        ]);
        node.ip(&["link", "set", "up0", "up"]);
        router.ip(&["link", "set", "rt0", "up"]);
        node.ip(&["addr", "add", &format!("{NODE_V4}/24"), "dev", "up0"]);
        node.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{NODE_V6}/64"),
            "dev",
            "up0",
            "nodad",
        ]);
        router.ip(&["addr", "add", &format!("{ROUTER_V4}/24"), "dev", "rt0"]);
        router.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{ROUTER_V6}/64"),
            "dev",
            "rt0",
            "nodad",
        ]);
        node.ip(&["route", "add", "default", "via", ROUTER_V4]);
        node.ip(&["-6", "route", "add", "default", "via", ROUTER_V6]);
        for a in [FAR_V4, FAR_V6].iter().chain(extra) {
            let len = if a.contains(':') { "128" } else { "32" };
            router.ip(&["addr", "add", &format!("{a}/{len}"), "dev", "lo", "nodad"]);
        }
        for s in pod_subnets {
            let via = if s.contains(':') { NODE_V6 } else { NODE_V4 };
            router.ip(&["route", "add", s, "via", via]);
        }
        Edge { node, router }
    }

    /// Sends one UDP datagram from `pod` to `to` and returns the source address the router
    /// saw it from; `None` when nothing arrived within 3 s.
    pub fn source_seen(&self, pod: &TestNetns, to: &str) -> Option<IpAddr> {
        let ip: IpAddr = to.parse().unwrap();
        let ns = NetNs::open(self.router.path()).unwrap();
        let sock = ns
            .run_in(move || UdpSocket::bind((ip, 0)))
            .unwrap()
            .unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let port = sock.local_addr().unwrap().port();
        // bash's /dev/udp: one datagram, no tool beyond the shell.
        let out = pod.exec(&["bash", "-c", &format!("echo hello > /dev/udp/{to}/{port}")]);
        assert!(
            out.status.success(),
            "send from the pod to {to} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut buf = [0u8; 64];
        sock.recv_from(&mut buf).ok().map(|(_, from)| from.ip())
    }

    /// `nft -s list table FAMILY NAME` in the node; `None` when the table does not exist.
    pub fn table(&self, family: &str, name: &str) -> Option<String> {
        let out = self
            .node
            .exec(&["nft", "-s", "list", "table", family, name]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Adds a rule with iptables-nft (its own `ip nat` table, as kube-proxy's iptables mode
    /// makes) and returns that table's listing: what tern must never touch.
    pub fn foreign_table(&self) -> String {
        self.node.exec_ok(&[
            "iptables-nft",
            "-t",
            "nat",
            "-A",
            "POSTROUTING",
            "-s",
            "203.0.113.0/24",
            "-j",
            "MASQUERADE",
        ]);
        self.table("ip", "nat")
            .expect("iptables-nft made no ip nat table")
    }
}

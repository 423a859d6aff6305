//! Two "nodes" (network namespaces joined by a veth pair, routing each other's pod ranges
//! 10.0.N.0/24 and fd00:N::/64), pods `web` and `peer` on n1 and `cli` on n2 (namespace x), a
//! table compiled for each node, and a kube-proxy-like Service and hairpin.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde_json::{json, Value};
use tern_netpol::model::Pod;
use tern_netpol::{compile, ruleset, World};
use tern_testkit::netns::TestNetns;

use super::{apply_script, connects, namespace, policies, wire_pod, Placement, PodNs, OPEN, SHUT};

pub const NAMES: [&str; 2] = ["n1", "n2"];

pub struct Cluster {
    pub nodes: [TestNetns; 2],
    pub pods: Vec<PodNs>,
}

fn node_pair(prefix: &str) -> [TestNetns; 2] {
    let n = [
        TestNetns::new(&format!("{prefix}1")),
        TestNetns::new(&format!("{prefix}2")),
    ];
    n[0].ip(&[
        "link",
        "add",
        "nic",
        "type",
        "veth",
        "peer",
        "name",
        "nic",
        "netns",
        n[1].name(),
    ]);
    for (i, node) in n.iter().enumerate() {
        let (me, other) = (i + 1, 2 - i);
        node.set_sysctl("net/ipv4/ip_forward", "1");
        node.set_sysctl("net/ipv6/conf/all/forwarding", "1");
        node.ip(&["link", "set", "nic", "up"]);
        node.ip(&["addr", "add", &format!("192.168.0.{me}/24"), "dev", "nic"]);
        node.ip(&[
            "-6",
            "addr",
            "add",
            &format!("fd99::{me}/64"),
            "dev",
            "nic",
            "nodad",
        ]);
        let (via4, via6) = (format!("192.168.0.{other}"), format!("fd99::{other}"));
        node.ip(&["route", "add", &format!("10.0.{other}.0/24"), "via", &via4]);
        node.ip(&[
            "-6",
            "route",
            "add",
            &format!("fd00:{other}::/64"),
            "via",
            &via6,
        ]);
    }
    n
}

impl Cluster {
    /// web (n1), peer (n1), cli (n2); netns names start with `prefix`.
    pub fn new(prefix: &str) -> Cluster {
        let mut c = Cluster {
            nodes: node_pair(prefix),
            pods: Vec::new(),
        };
        c.add_pod(0, 2, "web");
        c.add_pod(0, 3, "peer");
        c.add_pod(1, 2, "cli");
        // Every pair once, with no table yet: neighbour caches warm, and the wiring is right.
        for (from, to) in [
            ("cli", "web"),
            ("cli", "peer"),
            ("web", "peer"),
            ("peer", "web"),
        ] {
            c.expect(from, to, 80, true);
        }
        c
    }

    /// Pod `name` (label app=name) on node 0 or 1, number `k` there.
    fn add_pod(&mut self, node: usize, k: u8, name: &str) {
        let at = Placement {
            host: &self.nodes[node],
            node_name: NAMES[node],
            host_veth: format!("h{k}"),
            v4: format!("10.0.{}.{k}", node + 1),
            v6: format!("fd00:{}::{k}", node + 1),
        };
        let pod = wire_pod(at, "np", "x", name, json!({"app": name}));
        self.pods.push(pod);
    }

    pub fn pod(&self, name: &str) -> &PodNs {
        self.pods.iter().find(|p| p.pod.name == name).unwrap()
    }

    /// Compiles `policies` (namespace x) for each node and applies its table there; returns
    /// n1's script.
    pub fn apply(&self, specs: &[Value]) -> String {
        let pods: Vec<Pod> = self.pods.iter().map(|p| p.pod.clone()).collect();
        let nss = [namespace("x")];
        let pols = policies("x", specs);
        let mut first = String::new();
        for (node, name) in self.nodes.iter().zip(NAMES) {
            let plan = compile(&World {
                node: name,
                pods: &pods,
                namespaces: &nss,
                policies: &pols,
                ..World::default()
            });
            let (script, _) = ruleset::replace_script(&plan);
            apply_script(node, &script);
            if first.is_empty() {
                first = script;
            }
        }
        first
    }

    /// Whether TCP from pod `from` to `to` on `port` is set up (see [`OPEN`]).
    pub fn connects(&self, from: &str, to: IpAddr, port: u16) -> bool {
        self.connects_within(from, to, port, OPEN)
    }

    pub fn connects_within(&self, from: &str, to: IpAddr, port: u16, limit: Duration) -> bool {
        connects(&self.pod(from).ns, SocketAddr::new(to, port), limit)
    }

    /// Asserts reachability from `from` to pod `to` on `port` over both families.
    pub fn expect(&self, from: &str, to: &str, port: u16, want: bool) {
        for ip in self.pod(to).ips {
            let got = self.connects_within(from, ip, port, if want { OPEN } else { SHUT });
            assert_eq!(got, want, "{from} -> {to} ({ip}) port {port}");
        }
    }

    /// A kube-proxy-like DNAT on both nodes: 10.96.0.10:80 and [fd96::10]:80 to pod `to`'s port 80.
    pub fn service(&self, to: &str) {
        let [v4, v6] = self.pod(to).ips;
        let script = format!(
            "table inet svc {{\n\tchain pre {{\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\
             \t\tip daddr 10.96.0.10 tcp dport 80 dnat ip to {v4}:80\n\
             \t\tip6 daddr fd96::10 tcp dport 80 dnat ip6 to [{v6}]:80\n\t}}\n}}\n"
        );
        for node in &self.nodes {
            apply_script(node, &script);
        }
    }

    /// kube-proxy's hairpin: a pod reaching itself through the Service is masqueraded on its
    /// node (else the reply would come from its own address), after the forward hook judged it.
    pub fn hairpin(&self, pod: &str) {
        let [v4, v6] = self.pod(pod).ips;
        let script = format!(
            "table inet hairpin {{\n\tchain post {{\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n\
             \t\tip saddr {v4} ip daddr {v4} masquerade\n\
             \t\tip6 saddr {v6} ip6 daddr {v6} masquerade\n\t}}\n}}\n"
        );
        apply_script(&self.nodes[0], &script);
    }
}

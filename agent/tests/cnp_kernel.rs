//! ClusterNetworkPolicy in a real kernel: one "node" (a network namespace with forwarding on)
//! and three pods wired as tern wires them (`web` and `peer` in namespace x, `cli` in y), TCP
//! listeners on 80 and 81 in each. The table compiled by `tern_netpol` (NetworkPolicies and
//! ClusterNetworkPolicies) is applied with the nft tool, and real TCP connects over both
//! families say what passes: the Admin tier's Deny over a NetworkPolicy's allow, Pass handing
//! on to NetworkPolicy, the Baseline tier's Deny opened by a NetworkPolicy, priorities, a
//! Baseline Pass, egress to networks per family, a `nodes` Deny of a pod's traffic to its own
//! node; a priority change that puts a Deny first refuses new connections and leaves one already
//! open delivering (the table accepts established traffic first). Needs root and nft.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use serde_json::{json, Value};
use tern_net::netns::NetNs;
use tern_netpol::model::{read_cluster_policy, ClusterPolicyRead, NodeInfo, Pod};
use tern_netpol::{compile, ruleset, World};
use tern_testkit::netns::TestNetns;

mod netpol_fixture;
use netpol_fixture::{
    apply_script, connects, namespace, policies, serve, wire_pod, Placement, PodNs, OPEN, SHUT,
};

struct Node {
    node: TestNetns,
    pods: Vec<PodNs>,
}

impl Node {
    fn new() -> Node {
        let node = TestNetns::new("cnk");
        node.set_sysctl("net/ipv4/ip_forward", "1");
        node.set_sysctl("net/ipv6/conf/all/forwarding", "1");
        let mut n = Node {
            node,
            pods: Vec::new(),
        };
        for (k, (ns, name)) in [("x", "web"), ("x", "peer"), ("y", "cli")]
            .into_iter()
            .enumerate()
        {
            n.add_pod(k + 2, ns, name);
        }
        serve(&n.node, ("0.0.0.0", 8080));
        // Every pair once with no table: neighbour caches warm, the wiring is right.
        for (from, to) in [("cli", "web"), ("web", "peer"), ("peer", "cli")] {
            n.expect(from, to, 80, [true, true]);
        }
        n
    }

    fn add_pod(&mut self, k: usize, namespace: &str, name: &str) {
        let at = Placement {
            host: &self.node,
            node_name: "n1",
            host_veth: format!("h{k}"),
            v4: format!("10.0.1.{k}"),
            v6: format!("fd00:1::{k}"),
        };
        let pod = wire_pod(at, "cnk", namespace, name, json!({"app": name}));
        self.pods.push(pod);
    }

    fn pod(&self, name: &str) -> &PodNs {
        self.pods.iter().find(|p| p.pod.name == name).unwrap()
    }

    /// Compiles NetworkPolicies of namespace x (specs) and ClusterNetworkPolicies (name, spec)
    /// and replaces the node's table with theirs.
    fn apply(&self, policies: &[Value], cluster: &[(&str, Value)]) {
        self.apply_with_nodes(policies, cluster, &[]);
    }

    fn apply_with_nodes(
        &self,
        policies_x: &[Value],
        cluster: &[(&str, Value)],
        nodes: &[NodeInfo],
    ) {
        let pods: Vec<Pod> = self.pods.iter().map(|p| p.pod.clone()).collect();
        let nss = [namespace("x"), namespace("y")];
        let pols = policies("x", policies_x);
        let cnps: Vec<_> = cluster
            .iter()
            .map(|(name, spec)| {
                match read_cluster_policy(&json!({"metadata": {"name": name}, "spec": spec})) {
                    ClusterPolicyRead::Ok(p) => p,
                    other => panic!("{other:?}"),
                }
            })
            .collect();
        let plan = compile(&World {
            node: "n1",
            pods: &pods,
            namespaces: &nss,
            policies: &pols,
            cluster_policies: &cnps,
            nodes,
        });
        let (script, _) = ruleset::replace_script(&plan);
        apply_script(&self.node, &script);
    }

    /// Asserts whether TCP from pod `from` to its node (169.254.1.1, the address every host
    /// veth has) on port 8080 connects: the input hook, not the forward hook.
    fn expect_node(&self, from: &str, want: bool) {
        let to = SocketAddr::new([169, 254, 1, 1].into(), 8080);
        let got = connects(&self.pod(from).ns, to, if want { OPEN } else { SHUT });
        assert_eq!(got, want, "{from} -> its node {to}");
    }

    /// Asserts whether TCP from pod `from` to pod `to` on `port` connects, IPv4 then IPv6.
    fn expect(&self, from: &str, to: &str, port: u16, want: [bool; 2]) {
        for (ip, want) in self.pod(to).ips.into_iter().zip(want) {
            let limit = if want { OPEN } else { SHUT };
            let got = connects(&self.pod(from).ns, SocketAddr::new(ip, port), limit);
            assert_eq!(got, want, "{from} -> {to} ({ip}) port {port}");
        }
    }
}

fn ns_peer(name: &str) -> Value {
    json!({"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": name}}})
}

fn app(name: &str) -> Value {
    json!({"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": name}}}})
}

const BOTH: [bool; 2] = [true, true];
const NEITHER: [bool; 2] = [false, false];

#[test]
fn the_tiers_decide_as_the_api_says() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = Node::new();
    let allow_all_x = json!({"podSelector": {}, "ingress": [{}]});
    let every = json!({"namespaces": {}});

    // Admin Deny from y into web beats x's NetworkPolicy allowing everything.
    n.apply(
        std::slice::from_ref(&allow_all_x),
        &[(
            "deny-y",
            json!({"tier": "Admin", "priority": 1, "subject": app("web"),
            "ingress": [{"action": "Deny", "from": [ns_peer("y")]}]}),
        )],
    );
    n.expect("cli", "web", 80, NEITHER);
    n.expect("peer", "web", 80, BOTH);

    // Pass from y hands on to NetworkPolicy (port 80 from y only), before an Admin Deny of all.
    let from_y_80 = json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector":
        {"matchLabels": {"kubernetes.io/metadata.name": "y"}}}], "ports": [{"port": 80}]}]});
    n.apply(
        &[from_y_80],
        &[
            (
                "pass-y",
                json!({"tier": "Admin", "priority": 1, "subject": every,
                "ingress": [{"action": "Pass", "from": [ns_peer("y")]}]}),
            ),
            (
                "deny-all",
                json!({"tier": "Admin", "priority": 2, "subject": every,
                "ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}]}),
            ),
        ],
    );
    n.expect("cli", "web", 80, BOTH);
    n.expect("cli", "web", 81, NEITHER);
    n.expect("peer", "web", 80, NEITHER);

    // Baseline Deny of every pod's ingress; x's NetworkPolicy opens x from y, nothing else.
    let baseline = (
        "baseline",
        json!({"tier": "Baseline", "priority": 1, "subject": every,
        "ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}]}),
    );
    n.apply(&[], std::slice::from_ref(&baseline));
    n.expect("cli", "web", 80, NEITHER);
    n.expect("web", "cli", 80, NEITHER);
    let from_y = json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector":
        {"matchLabels": {"kubernetes.io/metadata.name": "y"}}}]}]});
    n.apply(&[from_y], &[baseline]);
    n.expect("cli", "web", 81, BOTH);
    n.expect("peer", "web", 80, NEITHER);
    n.expect("web", "cli", 80, NEITHER);

    // Priorities: Accept web's named port (81) from x at 5, Deny from x at 7; then swapped.
    let pair = |accept: u16, deny: u16| {
        [
            (
                "accept-web",
                json!({"tier": "Admin", "priority": accept, "subject": app("cli"),
                "ingress": [{"action": "Accept", "from": [ns_peer("x")],
                             "protocols": [{"destinationNamedPort": "web"}]}]}),
            ),
            (
                "deny-x",
                json!({"tier": "Admin", "priority": deny, "subject": app("cli"),
                "ingress": [{"action": "Deny", "from": [ns_peer("x")]}]}),
            ),
        ]
    };
    n.apply(&[], &pair(5, 7));
    n.expect("web", "cli", 81, BOTH);
    n.expect("web", "cli", 80, NEITHER);
    n.apply(&[], &pair(7, 5));
    n.expect("web", "cli", 81, NEITHER);

    // Baseline Pass: the default (allowed), though a Baseline Deny follows.
    n.apply(
        &[],
        &[(
            "base",
            json!({"tier": "Baseline", "priority": 1, "subject": every,
            "ingress": [{"action": "Pass", "from": [ns_peer("x")]},
                        {"action": "Deny", "from": [{"namespaces": {}}]}]}),
        )],
    );
    n.expect("peer", "web", 80, BOTH);
    n.expect("cli", "web", 80, NEITHER);

    // Egress per family: cli may not reach web's IPv4 address; its IPv6 one it may.
    let web_v4 = format!("{}/32", n.pod("web").ips[0]);
    n.apply(
        &[],
        &[(
            "no-v4",
            json!({"tier": "Admin", "priority": 1, "subject": app("cli"),
            "egress": [{"action": "Deny", "to": [{"networks": [web_v4]}]}]}),
        )],
    );
    n.expect("cli", "web", 80, [false, true]);
    n.expect("cli", "peer", 80, BOTH);

    // A pod's traffic to its own node (the input hook): an Admin Deny to the nodes of zone a
    // applies; a NetworkPolicy denying all egress does not (it never judges the own node).
    n.expect_node("cli", true);
    let zone_a = NodeInfo {
        labels: [("zone".to_owned(), "a".to_owned())].into_iter().collect(),
        addresses: vec!["169.254.1.1".parse().unwrap()],
    };
    let deny_all_out = json!({"podSelector": {}, "policyTypes": ["Egress"]});
    n.apply_with_nodes(
        std::slice::from_ref(&deny_all_out),
        &[(
            "no-node",
            json!({"tier": "Admin", "priority": 1, "subject": app("web"),
            "egress": [{"action": "Deny", "to": [{"nodes": {"matchLabels": {"zone": "a"}}}]}]}),
        )],
        &[zone_a],
    );
    n.expect_node("web", false);
    n.expect_node("peer", true);
    n.expect_node("cli", true);
    n.expect("web", "peer", 80, NEITHER);
}

/// A TCP connection from pod `from` to pod `to` (IPv4, `port`), set up now and kept: (the
/// client's end, the server's end).
fn open(n: &Node, from: &str, to: &str, port: u16) -> (TcpStream, TcpStream) {
    let addr = SocketAddr::new(n.pod(to).ips[0], port);
    let server = NetNs::open(n.pod(to).ns.path()).unwrap();
    let listener = server.run_in(|| TcpListener::bind(addr)).unwrap().unwrap();
    let client = NetNs::open(n.pod(from).ns.path()).unwrap();
    let c = client
        .run_in(|| TcpStream::connect_timeout(&addr, OPEN))
        .unwrap()
        .unwrap();
    let (s, _) = listener.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    (c, s)
}

/// Whether a line written at the client's end arrives at the server's within 2 s.
fn delivers((c, s): &mut (TcpStream, TcpStream)) -> bool {
    let mut line = [0u8; 5];
    c.write_all(b"tick\n").is_ok() && s.read_exact(&mut line).is_ok() && &line == b"tick\n"
}

#[test]
fn a_priority_change_decides_new_connections_and_leaves_open_ones() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = Node::new();
    let admin = |priority: u16, action: &str| {
        json!({"tier": "Admin", "priority": priority, "subject": app("web"),
            "ingress": [{"action": action, "from": [{"namespaces": {}}]}]})
    };
    n.apply(
        &[],
        &[("accept", admin(20, "Accept")), ("deny", admin(30, "Deny"))],
    );
    n.expect("cli", "web", 80, BOTH);
    let mut open_before = open(&n, "cli", "web", 9090);
    assert!(delivers(&mut open_before), "no delivery before the change");
    // The Deny moved before the Accept, as a patch of its priority would.
    n.apply(
        &[],
        &[("accept", admin(20, "Accept")), ("deny", admin(10, "Deny"))],
    );
    n.expect("cli", "web", 80, NEITHER);
    assert!(
        delivers(&mut open_before),
        "the connection open before the priority change stopped"
    );
}

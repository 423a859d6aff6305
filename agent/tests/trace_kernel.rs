//! `tern-agent trace`'s kernel check against a real table: the table the agent compiles for
//! node n1 (every rule form tern writes: peer sets of pods and of ipBlocks with `except`, port
//! lists and ranges over TCP, UDP and SCTP, an egress named port's endpoint set, the
//! ClusterNetworkPolicy tiers' chains, the denied-flow log rule and its limit object) applied in
//! a throwaway network namespace with the nft tool; the check, run in that namespace, must say
//! the kernel agrees for connections that run through each of them, and must name exactly what
//! differs after one element is deleted by hand. Needs root and nft.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr};

use serde_json::{json, Value};
use tern_agent::trace::kernel::NftTable;
use tern_agent::trace::{expected_table, KernelAnswer, Listed};
use tern_net::netns::NetNs;
use tern_net::nft::Nft;
use tern_netpol::model::Protocol;
use tern_netpol::ruleset::{Elements, LogDenied};
use tern_netpol::trace::{Query, Source};
use tern_testkit::netns::TestNetns;

const GROUP: u16 = 4243;

fn pod(ns: &str, name: &str, node: &str, k: u8) -> Value {
    let n = if node == "n1" { 1 } else { 2 };
    json!({"metadata": {"namespace": ns, "name": name, "labels": {"app": name}},
        "spec": {"nodeName": node, "containers": [{"ports": [{"name": "web", "containerPort": 8081}]}]},
        "status": {"phase": "Running", "podIPs": [{"ip": format!("10.0.{n}.{k}")}, {"ip": format!("fd00:{n}::{k}")}]}})
}

fn listed() -> Listed {
    let ns =
        |n: &str| json!({"metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n}}});
    let pol = |name: &str, spec: Value| json!({"metadata": {"namespace": "x", "name": name}, "spec": spec});
    let from_cli = json!({"podSelector": {"matchLabels": {"app": "cli"}},
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "y"}}});
    let mut l = Listed::read(
        &[
            pod("x", "web", "n1", 2),
            pod("x", "peer", "n1", 3),
            pod("y", "cli", "n2", 2),
            pod("y", "far", "n2", 3),
        ],
        &[ns("x"), ns("y")],
        &[
            pol(
                "deny-all",
                json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
            ),
            pol(
                "from-cli",
                json!({"podSelector": {"matchLabels": {"app": "web"}},
                "ingress": [{"from": [from_cli], "ports": [{"port": 80}, {"port": 81}, {"protocol": "UDP", "port": 53},
                    {"protocol": "SCTP", "port": 9000, "endPort": 9010}]}]}),
            ),
            pol(
                "from-block",
                json!({"podSelector": {"matchLabels": {"app": "web"}},
                "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.2.0/24", "except": ["10.0.2.3/32"]}},
                    {"ipBlock": {"cidr": "fd00:2::/64", "except": ["fd00:2::3/128"]}}],
                    "ports": [{"port": "web"}]}]}),
            ),
            pol(
                "to-peer",
                json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"],
                "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "peer"}}}], "ports": [{"port": "web"}]}]}),
            ),
        ],
    );
    let admin = json!({"metadata": {"name": "admin-deny-far"}, "spec": {"tier": "Admin", "priority": 5,
        "subject": {"namespaces": {}},
        "ingress": [{"action": "Deny", "from": [{"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "far"}}}}],
            "protocols": [{"tcp": {"destinationPort": {"number": 8081}}}]}]}});
    l.read_cluster(&[admin], &[]);
    l
}

fn query(from: &str, to: &str, port: u16, protocol: Protocol) -> Query {
    let (namespace, name) = from.split_once('/').unwrap();
    let (to_namespace, to_name) = to.split_once('/').unwrap();
    Query {
        from: Source::Pod {
            namespace: namespace.into(),
            name: name.into(),
        },
        to_namespace: to_namespace.into(),
        to_name: to_name.into(),
        protocol,
        port,
    }
}

/// Traces `q` and compares with the table of `node` as n1's agent would.
fn check(node: &NetNs, l: &Listed, q: &Query) -> (bool, KernelAnswer) {
    let t = l.trace(q).unwrap();
    let nft = Nft::find().unwrap();
    let answer = node
        .run_in(|| tern_agent::trace::compare_on(l, q, &t, "n1", GROUP, &NftTable(nft)))
        .unwrap();
    (t.allowed(), answer)
}

fn differences(a: &KernelAnswer) -> Vec<String> {
    match a {
        KernelAnswer::Differs { lines, .. } => lines.clone(),
        other => panic!("the kernel should differ: {other:?}"),
    }
}

#[test]
fn the_kernel_agrees_then_names_what_was_changed_by_hand() {
    if tern_testkit::root::skip() {
        return;
    }
    let host = TestNetns::new("trk");
    let node = NetNs::open(host.path()).unwrap();
    let l = listed();
    let log = LogDenied {
        group: GROUP,
        rate: 50,
    };
    let table = expected_table(&l, "n1", Some(log));
    let script = table.replace_script();
    let nft = Nft::find().unwrap();
    node.run_in(|| nft.apply(&script))
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}\n{script}"));

    // Every rule form, allowed and denied, both directions of two pods of n1.
    let cases = [
        ("y/cli", "x/web", 80, Protocol::Tcp, true),
        ("y/cli", "x/web", 82, Protocol::Tcp, false),
        ("y/cli", "x/web", 53, Protocol::Udp, true),
        ("y/cli", "x/web", 9005, Protocol::Sctp, true),
        ("y/cli", "x/web", 8081, Protocol::Tcp, true),
        ("y/far", "x/web", 8081, Protocol::Tcp, false),
        ("x/web", "x/peer", 8081, Protocol::Tcp, false),
        ("x/peer", "x/web", 80, Protocol::Tcp, false),
    ];
    for (from, to, port, proto, want) in cases {
        let q = query(from, to, port, proto);
        let (allowed, answer) = check(&node, &l, &q);
        assert_eq!(allowed, want, "{from} -> {to} {port}");
        match &answer {
            KernelAnswer::Agrees { lines, .. } => assert!(!lines.is_empty()),
            other => panic!("{from} -> {to} {port}: {other:?}\n{script}"),
        }
        println!("{from} -> {to} {port}/{proto:?}:\n{}", answer.text());
    }
    // Traffic whose ends are both on n2: nothing to compare.
    let (_, answer) = check(&node, &l, &query("y/cli", "y/far", 80, Protocol::Tcp));
    assert!(
        matches!(answer, KernelAnswer::Skipped(ref w) if w.contains("neither end")),
        "{answer:?}"
    );

    // cli's address out of the peer set of from-cli's rule: the kernel now denies what the
    // model allows, and the check names the set and the address.
    let cli = u128::from(u32::from(Ipv4Addr::new(10, 0, 2, 2)));
    let (set, _) = table
        .sets
        .iter()
        .find(|(n, s)| {
            n.starts_with("p4_") && matches!(&s.elements, Elements::Addrs(r) if r.contains(&cli))
        })
        .expect("a pods-only set holding cli");
    host.exec_ok(&[
        "nft",
        "delete",
        "element",
        "inet",
        "tern_netpol",
        set,
        "{ 10.0.2.2 }",
    ]);
    let q = query("y/cli", "x/web", 80, Protocol::Tcp);
    let (allowed, answer) = check(&node, &l, &q);
    assert!(allowed);
    assert_eq!(
        differences(&answer),
        vec![format!(
            "set {set}: the kernel does not hold 10.0.2.2, the model does"
        )]
    );
    assert!(answer
        .text()
        .starts_with("kernel differs from the model (node n1)"));

    // web's ingress element gone: its ingress is not judged at all in the kernel.
    host.exec_ok(&[
        "nft",
        "delete",
        "element",
        "inet",
        "tern_netpol",
        "ingress6",
        "{ fd00:1::2 }",
    ]);
    let d = differences(&check(&node, &l, &q).1);
    let web_chain = &table.ingress[&"fd00:1::2".parse::<IpAddr>().unwrap()];
    assert!(
        d.contains(&format!(
            "ingress6 fd00:1::2: the kernel has no element (not judged), the model jumps to {web_chain}"
        )),
        "{d:?}"
    );

    // A rule deleted from the chain web's IPv4 address still jumps to.
    let listing = host.exec_ok(&[
        "nft",
        "-a",
        "list",
        "chain",
        "inet",
        "tern_netpol",
        web_chain,
    ]);
    let handle = listing
        .lines()
        .find(|l| l.contains("accept"))
        .and_then(|l| l.rsplit_once("# handle "))
        .map(|(_, h)| h.trim().to_owned())
        .unwrap();
    host.exec_ok(&[
        "nft",
        "delete",
        "rule",
        "inet",
        "tern_netpol",
        web_chain,
        "handle",
        &handle,
    ]);
    let d = differences(&check(&node, &l, &query("y/far", "x/web", 81, Protocol::Tcp)).1);
    assert!(
        d.iter()
            .any(|l| l.starts_with(&format!("chain {web_chain}: rule 1 is "))),
        "{d:?}"
    );
}

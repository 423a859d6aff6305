//! The NetworkPolicy table in a real kernel: two "nodes" (network namespaces joined by a veth
//! pair, routing each other's pod ranges), pods wired as tern wires them (a netns, a veth, a /32
//! and a /128, default via 169.254.1.1 / fe80::1, a host route per pod), TCP listeners on ports
//! 80 and 81 in every pod, and the table compiled by `tern_netpol` for each node applied
//! there with the nft tool. Probes are real TCP connects from one pod netns to another, over
//! both families: pod to pod on one node, across the nodes, and through a "Service" (a DNAT in
//! each node's prerouting, as kube-proxy's) judged at the endpoint. Needs root and nft.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;
use tern_net::netns::NetNs;
use tern_net::nft::Nft;
use tern_netpol::ruleset;

mod netpol_fixture;
use netpol_fixture::two_nodes::Cluster;

#[test]
fn deny_all_ingress_then_allow_one_port_both_families() {
    if tern_testkit::root::skip() {
        return;
    }
    let c = Cluster::new("npa");
    c.apply(&[]);
    c.expect("cli", "web", 80, true);
    c.expect("peer", "web", 81, true);

    c.apply(&[json!({"podSelector": {"matchLabels": {"app": "web"}}})]);
    c.expect("cli", "web", 80, false); // across nodes
    c.expect("peer", "web", 80, false); // same node
    c.expect("web", "cli", 80, true); // egress not isolated; the reply is established
    c.expect("cli", "peer", 80, true); // peer is selected by no policy

    let script = c.apply(&[
        json!({"podSelector": {"matchLabels": {"app": "web"}}}),
        json!({"podSelector": {"matchLabels": {"app": "web"}},
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}], "ports": [{"port": 80}]}]}),
    ]);
    c.expect("cli", "web", 80, true);
    c.expect("cli", "web", 81, false);
    c.expect("peer", "web", 80, false);
    assert!(
        script.lines().any(|l| l.trim().starts_with("ip saddr @p4_")
            && l.ends_with(" meta l4proto tcp th dport { 80 } accept")),
        "{script}"
    );

    // A named port resolves to web's own container port 81.
    c.apply(&[json!({"podSelector": {"matchLabels": {"app": "web"}},
                     "ingress": [{"ports": [{"port": "web"}]}]})]);
    c.expect("peer", "web", 81, true);
    c.expect("peer", "web", 80, false);

    // Both ends isolated on one node: peer's egress and web's ingress must both allow it (an
    // accept in the egress base chain does not skip the ingress one).
    let both = |web_from_peer: bool| {
        let mut p = vec![
            json!({"podSelector": {"matchLabels": {"app": "peer"}}, "policyTypes": ["Egress"],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "web"}}}], "ports": [{"port": 80}]}]}),
        ];
        let from = if web_from_peer { "peer" } else { "cli" };
        p.push(json!({"podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": from}}}]}]}));
        p
    };
    c.apply(&both(true));
    c.expect("peer", "web", 80, true);
    c.expect("peer", "web", 81, false); // peer's egress
    c.apply(&both(false));
    c.expect("peer", "web", 80, false); // web's ingress
    c.expect("cli", "web", 81, true);
}

#[test]
fn ip_block_except_and_egress() {
    if tern_testkit::root::skip() {
        return;
    }
    let c = Cluster::new("npb");
    c.apply(&[json!({"podSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.2.0/24"]}},
                              {"ipBlock": {"cidr": "fd00::/16", "except": ["fd00:2::/64"]}}]}]})]);
    c.expect("peer", "web", 80, true);
    c.expect("cli", "web", 80, false);

    // Egress of web: to cli on 80 only (and DNS-less: nothing else), not to peer on its node.
    c.apply(&[json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"],
        "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "cli"}}}], "ports": [{"port": 80}]}]})]);
    c.expect("web", "cli", 80, true);
    c.expect("web", "cli", 81, false);
    c.expect("web", "peer", 80, false);
    c.expect("peer", "web", 80, true); // ingress of web is not isolated, replies are established
                                       // Egress by named port: the peer's container port "web" (81).
    c.apply(&[
        json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"],
        "egress": [{"to": [{"podSelector": {}}], "ports": [{"port": "web"}]}]}),
    ]);
    c.expect("web", "cli", 81, true);
    c.expect("web", "peer", 81, true);
    c.expect("web", "cli", 80, false);
}

#[test]
fn a_service_is_judged_at_its_endpoint_after_dnat() {
    if tern_testkit::root::skip() {
        return;
    }
    let c = Cluster::new("npc");
    c.service("web");
    let svc = ["10.96.0.10".parse().unwrap(), "fd96::10".parse().unwrap()];
    for ip in svc {
        assert!(
            c.connects("peer", ip, 80) && c.connects("cli", ip, 80),
            "{ip} before any policy"
        );
    }
    c.apply(&[json!({"podSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}], "ports": [{"port": 80}]}]})]);
    for ip in svc {
        assert!(
            c.connects("cli", ip, 80),
            "cli -> service {ip} (another node)"
        );
        assert!(
            !c.connects_within("peer", ip, 80, Duration::from_millis(600)),
            "peer -> service {ip} (same node)"
        );
    }
    // Replacing the table keeps an open connection (conntrack is untouched) and is one transaction.
    let nft = Nft::find().unwrap();
    let n1 = NetNs::open(c.nodes[0].path()).unwrap();
    let listed = n1
        .run_in(|| nft.list_table(ruleset::FAMILY, ruleset::TABLE))
        .unwrap()
        .unwrap();
    assert!(listed.is_some_and(|t| t.contains("hook forward priority filter + 1")));
    // The uninstall's finish removes it (tern_net::drain, as tern's last DEL runs it).
    n1.run_in(tern_net::drain::remove_network_policy)
        .unwrap()
        .unwrap();
    let gone = n1
        .run_in(|| nft.list_table(ruleset::FAMILY, ruleset::TABLE))
        .unwrap()
        .unwrap();
    assert_eq!(gone, None);
    assert!(
        c.connects("peer", svc[0], 80),
        "the table removed: open again"
    );
}

use serde_json::json;

use super::*;
use crate::model::NamedPort;
use std::collections::BTreeSet;

mod fixture;
use fixture::{cluster, ip, peers_in, pod, policy, run};

#[test]
fn unselected_and_remote_pods_are_not_isolated() {
    let (pods, nss) = cluster();
    assert_eq!(run(&pods, &nss, &[]), Plan::default());
    // A policy selecting only pods of node-b, and one of another namespace: nothing here.
    let p1 = policy(
        "x",
        json!({"podSelector": {"matchLabels": {"app": "client"}}}),
    );
    let p2 = policy("y", json!({"podSelector": {}}));
    let plan = run(&pods, &nss, &[p1, p2]);
    assert!(plan.pods.is_empty(), "{plan:?}");
    assert_eq!(plan.policies, 0);
}

#[test]
fn deny_all_ingress_isolates_only_ingress() {
    let (pods, nss) = cluster();
    let plan = run(&pods, &nss, &[policy("x", json!({"podSelector": {}}))]);
    assert_eq!(plan.pods.len(), 2);
    assert_eq!(plan.pods[0].key, "x/db");
    assert_eq!(plan.pods[0].ingress, Some(vec![]));
    assert_eq!(plan.pods[0].egress, None);
    assert_eq!(plan.pods[1].ips, [ip("10.0.1.2"), ip("fd00:1::2")]);
    // Egress only.
    let plan = run(
        &pods,
        &nss,
        &[policy(
            "x",
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"]}),
        )],
    );
    assert_eq!(plan.pods.len(), 1);
    assert_eq!(plan.pods[0].ingress, None);
    assert_eq!(plan.pods[0].egress, Some(vec![]));
}

#[test]
fn pod_and_namespace_selectors() {
    let (pods, nss) = cluster();
    let web = json!({"matchLabels": {"app": "web"}});
    let client = json!({"matchLabels": {"app": "client"}});
    // podSelector alone: the policy's namespace only (x/client, not y/other).
    let plan = run(
        &pods,
        &nss,
        &[policy(
            "x",
            json!({"podSelector": web, "ingress": [{"from": [{"podSelector": client}]}]}),
        )],
    );
    let a = &plan.pods[0].ingress.as_ref().unwrap()[0];
    assert!(
        peers_in(&plan, a).contains(ip("10.0.2.2")) && peers_in(&plan, a).contains(ip("fd00:2::2"))
    );
    assert!(!peers_in(&plan, a).contains(ip("10.0.2.3")));
    assert!(!peers_in(&plan, a).contains(ip("10.0.1.3")));
    // namespaceSelector alone: every pod of the selected namespaces.
    let plan = run(
        &pods,
        &nss,
        &[policy(
            "x",
            json!({"podSelector": web, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "blue"}}}]}]}),
        )],
    );
    let set = peers_in(&plan, &plan.pods[0].ingress.as_ref().unwrap()[0]).clone();
    assert_eq!(
        set.v4,
        [(
            u128::from(u32::from("10.0.2.3".parse::<std::net::Ipv4Addr>().unwrap())),
            u128::from(u32::from("10.0.2.3".parse::<std::net::Ipv4Addr>().unwrap()))
        )]
    );
    assert!(set.v6.is_empty());
    // Both in one peer: pods matching in namespaces matching (an empty namespaceSelector: all).
    let plan = run(
        &pods,
        &nss,
        &[policy(
            "x",
            json!({"podSelector": web, "ingress": [{"from": [{"namespaceSelector": {}, "podSelector": client}]}]}),
        )],
    );
    let set = peers_in(&plan, &plan.pods[0].ingress.as_ref().unwrap()[0]);
    assert!(set.contains(ip("10.0.2.2")) && set.contains(ip("10.0.2.3")));
    assert!(!set.contains(ip("10.0.1.3")) && !set.contains(ip("10.0.1.2")));
    // A namespace the agent has not seen still has its name label.
    let mut more = pods.clone();
    more.push(pod("z", "late", &[], "node-b", &["10.0.2.9"]));
    let plan = run(
        &more,
        &nss,
        &[policy(
            "x",
            json!({"podSelector": web, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "z"}}}]}]}),
        )],
    );
    assert!(peers_in(&plan, &plan.pods[0].ingress.as_ref().unwrap()[0]).contains(ip("10.0.2.9")));
}

#[test]
fn peers_that_match_nothing_allow_nothing() {
    let (pods, nss) = cluster();
    let plan = run(
        &pods,
        &nss,
        &[policy(
            "x",
            json!({"podSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "nobody"}}}]}]}),
        )],
    );
    // An empty set, named: a pod that joins the peers later is one element, not a new rule.
    let allows = plan.pods[0].ingress.as_ref().unwrap();
    assert_eq!(allows.len(), 1);
    assert!(
        peers_in(&plan, &allows[0]).is_empty(),
        "not 'from anywhere'"
    );
    // No peers at all: from anywhere.
    let plan = run(
        &pods,
        &nss,
        &[policy(
            "x",
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{}]}),
        )],
    );
    assert_eq!(
        plan.pods[0].ingress,
        Some(vec![Allow::Match {
            peers: None,
            ports: None
        }])
    );
}

#[test]
fn policy_types_default() {
    let (pods, nss) = cluster();
    let plan = run(
        &pods,
        &nss,
        &[policy(
            "x",
            json!({"podSelector": {"matchLabels": {"app": "web"}},
        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.2.0/24"]}},
                           {"ipBlock": {"cidr": "fd00::/16"}}]}]}),
        )],
    );
    // policyTypes absent: Ingress always, Egress because there are egress rules.
    let p = &plan.pods[0];
    assert_eq!(p.ingress, Some(vec![]));
    assert_eq!(p.egress.as_ref().map(Vec::len), Some(1));
}

#[test]
fn ip_blocks_with_except_in_egress() {
    let (pods, nss) = cluster();
    let plan = run(
        &pods,
        &nss,
        &[policy(
            "x",
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"],
        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.2.0/24"]}},
                           {"ipBlock": {"cidr": "fd00::/16"}}]}]}),
        )],
    );
    let set = peers_in(&plan, &plan.pods[0].egress.as_ref().unwrap()[0]);
    assert!(set.contains(ip("10.0.1.3")) && set.contains(ip("10.0.3.1")));
    assert!(!set.contains(ip("10.0.2.2")), "except");
    assert!(set.contains(ip("fd00:2::2")) && !set.contains(ip("fd01::1")));
}

#[test]
fn ports_ranges_and_named_ports() {
    let (mut pods, nss) = cluster();
    pods[0].ports = vec![
        NamedPort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 8080,
        },
        NamedPort {
            name: "dns".into(),
            protocol: Protocol::Udp,
            port: 5353,
        },
    ]
    .into();
    pods[3].ports = vec![NamedPort {
        name: "http".into(),
        protocol: Protocol::Tcp,
        port: 9090,
    }]
    .into();
    let plan = run(
        &pods,
        &nss,
        &[policy(
            "x",
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"ports": [{"port": "http"}, {"port": "dns", "protocol": "TCP"}, {"port": 80, "endPort": 90, "protocol": "UDP"}, {"protocol": "SCTP"}]},
                    {"ports": [{"port": "missing"}]}],
        "egress": [{"to": [{"namespaceSelector": {}}], "ports": [{"port": "http"}, {"port": 53, "protocol": "UDP"}]}]}),
        )],
    );
    let p = &plan.pods[0];
    assert_eq!(p.key, "x/web");
    // The named port resolved on web itself; "dns" is UDP on the pod, TCP in the rule: no port;
    // a rule whose only port resolves to nothing allows nothing (not every port).
    assert_eq!(
        p.ingress,
        Some(vec![Allow::Match {
            peers: None,
            ports: Some(vec![
                PortRange {
                    protocol: Protocol::Tcp,
                    range: Some((8080, 8080))
                },
                PortRange {
                    protocol: Protocol::Udp,
                    range: Some((80, 90))
                },
                PortRange {
                    protocol: Protocol::Sctp,
                    range: None
                },
            ])
        }])
    );
    // Egress: "http" resolved on the peers that have it (web itself 8080, y/other 9090).
    let eg = p.egress.as_ref().unwrap();
    assert_eq!(eg.len(), 2, "{eg:?}");
    let Allow::Endpoints(id) = &eg[1] else {
        panic!("{eg:?}")
    };
    let eps: BTreeSet<_> = plan.sets[id].1.endpoints.iter().copied().collect();
    let want: BTreeSet<_> = [
        (ip("10.0.1.2"), Protocol::Tcp, 8080),
        (ip("10.0.2.3"), Protocol::Tcp, 9090),
        (ip("fd00:1::2"), Protocol::Tcp, 8080),
    ]
    .into();
    assert_eq!(eps, want);
    assert!(
        matches!(&eg[0], Allow::Match { ports: Some(p), .. } if p == &[PortRange { protocol: Protocol::Udp, range: Some((53, 53)) }])
    );
}

#[test]
fn policies_add_up_and_isolation_per_direction() {
    let (pods, nss) = cluster();
    let a = policy(
        "x",
        json!({"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"ports": [{"port": 80}]}]}),
    );
    let b = policy(
        "x",
        json!({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.9.0.0/16"}}]}], "egress": [{}]}),
    );
    let plan = run(&pods, &nss, &[a, b]);
    assert_eq!(plan.policies, 2);
    let web = plan.pods.iter().find(|p| p.key == "x/web").unwrap();
    assert_eq!(web.ingress.as_ref().unwrap().len(), 2, "{web:?}");
    assert_eq!(
        web.egress,
        Some(vec![Allow::Match {
            peers: None,
            ports: None
        }])
    );
    let db = plan.pods.iter().find(|p| p.key == "x/db").unwrap();
    assert_eq!(db.ingress.as_ref().unwrap().len(), 1);
}

#[test]
fn host_network_and_finished_pods_are_neither_targets_nor_peers() {
    let (mut pods, nss) = cluster();
    pods.push(pod("x", "host", &[("app", "web")], "node-a", &[]));
    let plan = run(
        &pods,
        &nss,
        &[policy(
            "x",
            json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}),
        )],
    );
    assert_eq!(plan.pods.len(), 2);
    let set = peers_in(&plan, &plan.pods[0].ingress.as_ref().unwrap()[0]);
    assert_eq!(
        set.v4.len(),
        2,
        "web and db (adjacent addresses merge) and client: {set:?}"
    );
}

#[test]
fn a_policy_whose_rules_cannot_be_read_isolates_what_it_selects_and_allows_nothing() {
    use crate::model::{read_policy, PolicyRead};
    let (pods, nss) = cluster();
    // An allow-all from 10.0.2.0/24 with one bad CIDR beside it: not "allow all", not "open".
    let v = json!({"metadata": {"namespace": "x", "name": "p"},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.2.0/24"}},
                                  {"ipBlock": {"cidr": "10.0.2.0/99"}}]}],
            "egress": [{}]}});
    let PolicyRead::Closed { policy, .. } = read_policy(&v) else {
        panic!("not closed");
    };
    let plan = run(&pods, &nss, &[(*policy).clone()]);
    assert_eq!(plan.policies, 1);
    assert_eq!(plan.pods.len(), 1, "db is not selected: {plan:?}");
    assert_eq!(plan.pods[0].key, "x/web");
    assert_eq!(plan.pods[0].ingress, Some(vec![]));
    assert_eq!(plan.pods[0].egress, Some(vec![]));
}

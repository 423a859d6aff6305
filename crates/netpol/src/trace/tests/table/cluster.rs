//! ClusterNetworkPolicy truth tables: the tiers' order (Admin, NetworkPolicy, Baseline), each
//! action, priorities, both directions, named ports and a rule failed closed — every verdict of
//! the trace checked against the compiled plans and the table written here by hand.

use super::*;
use crate::model::{read_cluster_policy, Action, ClusterPolicyRead, Tier};

/// A ClusterNetworkPolicy read from its spec; `closed`: it must fail closed.
fn cnp_read(name: &str, spec: serde_json::Value, closed: bool) -> ClusterPolicy {
    match read_cluster_policy(&json!({"metadata": {"name": name}, "spec": spec})) {
        ClusterPolicyRead::Ok(p) if !closed => p,
        ClusterPolicyRead::Closed { policy, .. } if closed => policy,
        other => panic!("{name}: {other:?}"),
    }
}

fn cnp(name: &str, spec: serde_json::Value) -> ClusterPolicy {
    cnp_read(name, spec, false)
}

fn with(mut c: Case, cluster: Vec<ClusterPolicy>) -> Case {
    c.cluster = cluster;
    c
}

fn from_ns(ns: &str) -> serde_json::Value {
    json!({"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": ns}}})
}

fn tier_cases() -> Vec<Case> {
    let every = json!({"namespaces": {}});
    let allow_all_in = |ns| policy(ns, "all", json!({"podSelector": {}, "ingress": [{}]}));
    vec![
        with(
            case(
                "Admin Deny into x/a from z beats x's NetworkPolicy allowing everything",
                vec![allow_all_in("x")],
                |s, d, _, _| !(d.is("x/a") && s.ns == "z"),
            ),
            vec![cnp(
                "deny-z",
                json!({"tier": "Admin", "priority": 10,
                "subject": {"pods": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "x"}},
                                     "podSelector": {"matchLabels": {"app": "a"}}}},
                "ingress": [{"action": "Deny", "from": [from_ns("z")]}]}),
            )],
        ),
        with(
            case(
                "Baseline Deny from every pod, opened in y by its NetworkPolicy from x",
                vec![policy(
                    "y",
                    "from-x",
                    json!({"podSelector": {},
                    "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "x"}}}]}]}),
                )],
                |s, d, _, _| {
                    if d.ns == "y" {
                        s.ns == "x"
                    } else {
                        s.ns.is_empty()
                    }
                },
            ),
            vec![cnp(
                "baseline",
                json!({"tier": "Baseline", "priority": 0, "subject": every,
                "ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}]}),
            )],
        ),
        with(
            case(
                "Admin Pass from x to NetworkPolicy (z denies all), before an Admin Deny",
                vec![
                    policy("z", "deny", json!({"podSelector": {}})),
                    allow_all_in("y"),
                ],
                |s, d, _, _| (s.ns.is_empty() || s.ns == "x") && d.ns != "z",
            ),
            vec![
                cnp(
                    "deny",
                    json!({"tier": "Admin", "priority": 20, "subject": every,
                    "ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}]}),
                ),
                cnp(
                    "pass-x",
                    json!({"tier": "Admin", "priority": 10, "subject": every,
                    "ingress": [{"action": "Pass", "from": [from_ns("x")]}]}),
                ),
            ],
        ),
        with(
            case(
                "Admin Pass to the Baseline tier when no NetworkPolicy isolates",
                vec![],
                |s, d, _, _| !(d.ns == "y" && s.ns == "x"),
            ),
            vec![
                cnp(
                    "pass",
                    json!({"tier": "Admin", "priority": 1, "subject": every,
                    "ingress": [{"action": "Pass", "from": [from_ns("x")]}]}),
                ),
                cnp(
                    "accept",
                    json!({"tier": "Admin", "priority": 2, "subject": every,
                    "ingress": [{"action": "Accept", "from": [from_ns("x")]}]}),
                ),
                cnp(
                    "base",
                    json!({"tier": "Baseline", "priority": 1,
                    "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "y"}}},
                    "ingress": [{"action": "Deny", "from": [from_ns("x")]}]}),
                ),
            ],
        ),
    ]
}

fn order_cases() -> Vec<Case> {
    let into_yb =
        json!({"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "b"}}}});
    let prod = json!({"namespaces": {"matchLabels": {"env": "prod"}}});
    let pair = |accept: u16, deny: u16| {
        vec![
            cnp(
                "accept-81",
                json!({"tier": "Admin", "priority": accept, "subject": into_yb,
                "ingress": [{"action": "Accept", "from": [prod],
                             "protocols": [{"tcp": {"destinationPort": {"number": 81}}}]}]}),
            ),
            cnp(
                "deny-prod",
                json!({"tier": "Admin", "priority": deny, "subject": into_yb,
                "ingress": [{"action": "Deny", "from": [prod]}]}),
            ),
        ]
    };
    vec![
        with(
            case(
                "priority 5 Accept TCP 81 from prod before priority 7 Deny from prod (into b)",
                vec![],
                |s, d, proto, port| {
                    d.app != "b" || !(s.ns == "x" || s.ns == "y") || (proto == Protocol::Tcp && port == 81)
                },
            ),
            pair(5, 7),
        ),
        with(
            case(
                "the same with the priorities swapped: Deny first",
                vec![],
                |s, d, _, _| d.app != "b" || !(s.ns == "x" || s.ns == "y"),
            ),
            pair(7, 5),
        ),
        with(
            case(
                "rule order within one policy: Deny UDP 53 from z, then Accept from z, then Deny all",
                vec![],
                |s, d, proto, port| {
                    d.ns != "x" || s.ns.is_empty() || s.ns == "z" && !(proto == Protocol::Udp && port == 53)
                },
            ),
            vec![cnp("order", json!({"tier": "Admin", "priority": 3,
                "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "x"}}},
                "ingress": [
                    {"action": "Deny", "from": [from_ns("z")],
                     "protocols": [{"udp": {"destinationPort": {"number": 53}}}]},
                    {"action": "Accept", "from": [from_ns("z")]},
                    {"action": "Deny", "from": [{"namespaces": {}}]}]}))],
        ),
    ]
}

fn direction_cases() -> Vec<Case> {
    let a_pods =
        json!({"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "a"}}}});
    vec![
        with(
            case(
                "egress: Admin Deny from every a to the network of y, beside x's egress allow-all",
                vec![policy("x", "out", json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}))],
                |s, d, _, _| !(s.app == "a" && in_net(d.ip, "10.0.2.0/24")),
            ),
            vec![cnp("no-y", json!({"tier": "Admin", "priority": 0, "subject": a_pods,
                "egress": [{"action": "Deny", "to": [{"networks": ["10.0.2.0/24"]}]}]}))],
        ),
        with(
            case(
                "egress from z: Accept to b's named port web (TCP 81), Deny every other pod",
                vec![],
                |s, d, proto, port| {
                    s.ns != "z" || s.app.is_empty() || (d.app == "b" && proto == Protocol::Tcp && port == 81)
                },
            ),
            vec![cnp("z-out", json!({"tier": "Admin", "priority": 0,
                "subject": {"namespaces": {"matchLabels": {"env": "dev"}}},
                "egress": [
                    {"action": "Accept", "to": [{"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "b"}}}}],
                     "protocols": [{"destinationNamedPort": "web"}]},
                    {"action": "Deny", "to": [{"namespaces": {}}]}]}))],
        ),
        with(
            case(
                "ingress named port: Baseline Deny into x on dns (UDP 53) and a range 80-81",
                vec![],
                |s, d, proto, port| {
                    d.ns != "x" || s.ns.is_empty() || !((proto == Protocol::Udp && port == 53)
                        || (proto == Protocol::Tcp && (80..=81).contains(&port)))
                },
            ),
            vec![cnp("x-in", json!({"tier": "Baseline", "priority": 9,
                "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "x"}}},
                "ingress": [{"action": "Deny", "from": [{"namespaces": {}}],
                    "protocols": [{"destinationNamedPort": "dns"},
                                  {"tcp": {"destinationPort": {"range": {"start": 80, "end": 81}}}}]}]}))],
        ),
        with(
            case(
                "a Pass rule that cannot be read fails closed: a Deny of everything into z/c",
                vec![],
                |_, d, _, _| !d.is("z/c"),
            ),
            vec![cnp_read("broken", json!({"tier": "Admin", "priority": 0,
                "subject": {"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "c"}}}},
                "ingress": [{"action": "Pass", "from": [{"future": {}}]}]}), true)
                .with_subject_in("z")],
        ),
        with(
            case(
                "an Accept rule that cannot be read matches nothing: the Deny after it applies",
                vec![],
                |s, d, _, _| d.ns != "y" || s.ns.is_empty(),
            ),
            vec![cnp_read("broken", json!({"tier": "Admin", "priority": 0,
                "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "y"}}},
                "ingress": [{"action": "Accept", "from": [{"future": {}}]},
                            {"action": "Deny", "from": [{"namespaces": {}}]}]}), true)],
        ),
    ]
}

impl ClusterPolicy {
    /// The same policy, its subject narrowed to the namespace `ns`.
    fn with_subject_in(mut self, ns: &str) -> ClusterPolicy {
        self.subject.namespaces =
            serde_json::from_value(json!({"matchLabels": {"kubernetes.io/metadata.name": ns}}))
                .unwrap();
        self
    }
}

#[test]
fn cluster_policies_agree_with_the_compiled_plans_and_the_tables() {
    let mut cases = tier_cases();
    cases.extend(order_cases());
    cases.extend(direction_cases());
    let per_case: Vec<usize> = cases.iter().map(check).collect();
    assert!(per_case.iter().all(|&n| n == 13 * 10 * 4), "{per_case:?}");
    assert_eq!(cases.len(), 12);
}

#[test]
fn ipv6_paths_and_the_reasons_name_the_tier_policy_and_rule() {
    let pods = vec![
        pod("x", "a", "node-1", &["10.0.1.1", "fd00:1::1"]),
        pod("y", "b", "node-2", &["10.0.2.2", "fd00:2::2"]),
    ];
    let nss = vec![namespace("x", "prod"), namespace("y", "prod")];
    let cluster = vec![
        cnp(
            "no-v6-out",
            json!({"tier": "Admin", "priority": 2, "subject": {"namespaces": {}},
            "egress": [{"name": "v6", "action": "Deny", "to": [{"networks": ["fd00::/16"]}]}]}),
        ),
        cnp(
            "pass-in",
            json!({"tier": "Admin", "priority": 1, "subject": {"namespaces": {}},
            "ingress": [{"action": "Pass", "from": [{"namespaces": {}}]}]}),
        ),
        cnp(
            "base-in",
            json!({"tier": "Baseline", "priority": 1, "subject": {"namespaces": {}},
            "ingress": [{"action": "Accept", "from": [{"pods": {"namespaceSelector": {},
                "podSelector": {"matchLabels": {"app": "a"}}}}]},
                        {"action": "Deny", "from": [{"namespaces": {}}]}]}),
        ),
    ];
    let w = world_with(&pods, &nss, &[], &cluster);
    let plans = plans_with(&pods, &nss, &[], &cluster);
    let t = trace(
        &w,
        &BTreeMap::new(),
        &query(from_pod("x/a"), "y/b", Protocol::Tcp, 80),
    )
    .unwrap();
    let verdicts: Vec<(IpAddr, bool)> = t.paths.iter().map(|p| (p.src, p.allowed())).collect();
    assert_eq!(verdicts, [(ip("10.0.1.1"), true), (ip("fd00:1::1"), false)]);
    for p in &t.paths {
        let plan = plan_allows(&plans, &pods[1].ips, p.src, p.dst, Protocol::Tcp, 80);
        assert_eq!(plan, p.allowed(), "{p:?}");
    }
    let Judgement::Cluster(r) = &t.paths[1].egress else {
        panic!("{t:?}");
    };
    assert_eq!(
        (
            r.policy.as_str(),
            r.tier,
            r.priority,
            r.direction,
            r.rule,
            r.name.as_str(),
            r.action
        ),
        (
            "no-v6-out",
            Tier::Admin,
            2,
            Direction::Egress,
            0,
            "v6",
            Action::Deny
        )
    );
    // Ingress: passed by the Admin tier, then accepted by the Baseline tier's first rule.
    let Judgement::Passed { by, then } = &t.paths[0].ingress else {
        panic!("{t:?}");
    };
    assert_eq!((by.policy.as_str(), by.action), ("pass-in", Action::Pass));
    assert!(matches!(&**then, Judgement::Cluster(r) if r.policy == "base-in" && r.rule == 0));
    // The other way: b is no `app=a`, so the Baseline tier's Deny decides.
    let t = trace(
        &w,
        &BTreeMap::new(),
        &query(from_pod("y/b"), "x/a", Protocol::Tcp, 80),
    )
    .unwrap();
    assert!(!t.allowed());
    let Judgement::Passed { then, .. } = &t.paths[0].ingress else {
        panic!("{t:?}");
    };
    assert!(matches!(&**then, Judgement::Cluster(r) if r.rule == 1 && r.action == Action::Deny));
}

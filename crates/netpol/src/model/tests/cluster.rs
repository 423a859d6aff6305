//! ClusterNetworkPolicy v1alpha2 and Node JSON as the API spells them, and what fails closed.

use super::*;
use serde_json::json;

fn read(spec: serde_json::Value) -> ClusterPolicyRead {
    read_cluster_policy(&json!({"metadata": {"name": "c"}, "spec": spec}))
}

fn ok(spec: serde_json::Value) -> ClusterPolicy {
    match read(spec) {
        ClusterPolicyRead::Ok(p) => p,
        other => panic!("{other:?}"),
    }
}

fn closed(spec: serde_json::Value) -> (ClusterPolicy, String) {
    match read(spec) {
        ClusterPolicyRead::Closed { policy, error } => (policy, error),
        other => panic!("{other:?}"),
    }
}

fn sel(k: &str, v: &str) -> LabelSelector {
    LabelSelector {
        match_labels: [(k.to_owned(), v.to_owned())].into(),
        ..Default::default()
    }
}

fn everywhere() -> Vec<Peer> {
    ["0.0.0.0/0", "::/0"]
        .iter()
        .map(|c| Peer::Block {
            cidr: c.parse().unwrap(),
            except: vec![],
        })
        .collect()
}

#[test]
fn every_field_of_v1alpha2_is_read() {
    let p = ok(json!({"tier": "Admin", "priority": 1000,
        "subject": {"pods": {"namespaceSelector": {"matchLabels": {"t": "a"}},
                             "podSelector": {"matchLabels": {"app": "web"}}}},
        "ingress": [{"name": "in", "action": "Accept",
            "from": [{"namespaces": {"matchLabels": {"t": "b"}}},
                     {"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "db"}}}}],
            "protocols": [{"tcp": {"destinationPort": {"number": 80}}},
                          {"udp": {"destinationPort": {"range": {"start": 1000, "end": 2000}}}},
                          {"sctp": {"destinationPort": {"number": 9}}},
                          {"destinationNamedPort": "dns"}]}],
        "egress": [{"action": "Pass", "to": [{"nodes": {"matchLabels": {"zone": "z"}}},
                                              {"networks": ["10.0.0.0/8", "fd00::/64"]}]},
                   {"action": "Deny", "to": [{"namespaces": {}}]}]}));
    assert_eq!(
        (p.name.as_str(), p.tier, p.priority),
        ("c", Tier::Admin, 1000)
    );
    assert_eq!(p.subject.namespaces, sel("t", "a"));
    assert_eq!(p.subject.pods, sel("app", "web"));
    let r = &p.ingress[0];
    assert_eq!(
        (r.name.as_str(), r.action, &r.note),
        ("in", Action::Accept, &None)
    );
    assert_eq!(
        r.peers,
        [
            Peer::Pods {
                namespaces: Some(sel("t", "b")),
                pods: LabelSelector::default()
            },
            Peer::Pods {
                namespaces: Some(LabelSelector::default()),
                pods: sel("app", "db")
            }
        ]
    );
    let port = |protocol, port| Port { protocol, port };
    let named = || PortRef::Named("dns".into());
    assert_eq!(
        r.ports,
        [
            port(Protocol::Tcp, PortRef::Range(80, 80)),
            port(Protocol::Udp, PortRef::Range(1000, 2000)),
            port(Protocol::Sctp, PortRef::Range(9, 9)),
            // A named port names no protocol: the container port's, whichever it is.
            port(Protocol::Tcp, named()),
            port(Protocol::Udp, named()),
            port(Protocol::Sctp, named()),
        ]
    );
    assert_eq!(p.egress[0].action, Action::Pass);
    assert_eq!(p.egress[0].peers.len(), 3);
    assert_eq!(p.egress[0].peers[0], Peer::Nodes(sel("zone", "z")));
    assert!(p.egress[0].ports.is_empty(), "no protocols: all traffic");
    // `namespaces` as the subject: every pod of those namespaces.
    let p = ok(json!({"tier": "Baseline", "priority": 0,
        "subject": {"namespaces": {"matchLabels": {"t": "a"}}}}));
    assert_eq!(p.tier, Tier::Baseline);
    assert_eq!(p.subject.pods, LabelSelector::default());
    assert!(!p.has_rules());
}

#[test]
fn domain_names_match_nothing_and_a_rule_that_cannot_be_read_fails_closed() {
    let subject = json!({"namespaces": {}});
    // domainNames (Accept only): left out, the rule's other peers stay.
    let p = ok(json!({"tier": "Admin", "priority": 1, "subject": subject,
        "egress": [{"action": "Accept", "to": [{"domainNames": ["*.example.com"]},
                                                {"networks": ["10.1.0.0/16"]}]},
                   {"action": "Accept", "to": [{"domainNames": ["example.com"]}]}]}));
    assert_eq!(p.egress[0].peers.len(), 1);
    assert!(p.egress[1].peers.is_empty(), "matches nothing");
    assert!(p.egress[1].note.as_deref().unwrap().contains("domainNames"));
    // Accept with a peer tern cannot read: matches nothing. Deny or Pass: a Deny of everything.
    for (action, bad) in [
        ("Accept", json!({"from": [{"future": {}}]})),
        ("Pass", json!({"from": [{"future": {}}]})),
        ("Deny", json!({"from": [{"namespaces": {}, "pods": {}}]})),
        (
            "Pass",
            json!({"from": [{"namespaces": {}}], "protocols": [{"icmp": {}}]}),
        ),
        (
            "Deny",
            json!({"from": [{"namespaces": {}}],
                        "protocols": [{"tcp": {"destinationPort": {"range": {"start": 9, "end": 9}}}}]}),
        ),
        (
            "Accept",
            json!({"from": [{"namespaces": {}}],
                          "protocols": [{"tcp": {"destinationPort": {"number": 70000}}}]}),
        ),
        ("Deny", json!({"from": [{"networks": ["10.0.0.0/8"]}]})),
        ("Pass", json!({"from": "x"})),
    ] {
        let mut rule = bad.clone();
        rule["action"] = json!(action);
        let (p, error) = closed(json!({"tier": "Admin", "priority": 1, "subject": subject,
            "ingress": [rule]}));
        assert!(error.starts_with("spec.ingress[0]: "), "{error}");
        let r = &p.ingress[0];
        if action == "Accept" {
            assert!(
                r.action == Action::Accept && r.peers.is_empty(),
                "{bad}: {r:?}"
            );
        } else {
            assert_eq!((r.action, &r.peers), (Action::Deny, &everywhere()), "{bad}");
            assert!(r.ports.is_empty());
        }
        assert!(r.note.as_deref().unwrap().starts_with("failed closed"));
    }
    // domainNames in a Deny (the API allows them in Accept only), an unknown action, a CIDR
    // with host bits: Deny everything.
    for rule in [
        json!({"action": "Deny", "to": [{"domainNames": ["example.com"]}]}),
        json!({"action": "Drop", "to": [{"namespaces": {}}]}),
        json!({"action": "Pass", "to": [{"networks": ["10.0.0.1/8"]}]}),
    ] {
        let (p, _) = closed(
            json!({"tier": "Baseline", "priority": 1, "subject": subject,
            "egress": [rule]}),
        );
        assert_eq!(p.egress[0].peers, everywhere(), "{rule}");
    }
}

#[test]
fn a_policy_that_cannot_be_read_fails_closed_or_is_unreadable() {
    let rules = json!([{"action": "Accept", "from": [{"namespaces": {}}]}]);
    // Tier or priority unreadable: every direction present denies everything, in the Admin
    // tier when the tier cannot be read.
    let (p, error) = closed(json!({"tier": "Middle", "priority": 3,
        "subject": {"namespaces": {}}, "ingress": rules}));
    assert!(error.contains("spec.tier"), "{error}");
    assert_eq!((p.tier, p.priority), (Tier::Admin, 3));
    assert_eq!(p.ingress.len(), 1);
    assert_eq!(
        (p.ingress[0].action, &p.ingress[0].peers),
        (Action::Deny, &everywhere())
    );
    assert!(p.egress.is_empty());
    let (p, error) = closed(json!({"tier": "Baseline", "priority": 1001,
        "subject": {"namespaces": {}}, "egress": [{"action": "Accept", "to": [{"namespaces": {}}]}]}));
    assert!(error.contains("spec.priority"), "{error}");
    assert_eq!((p.tier, p.priority), (Tier::Baseline, 0));
    assert_eq!(p.egress[0].action, Action::Deny);
    // No subject, two subjects, a subject of the wrong shape, no spec: applies to nothing.
    for spec in [
        json!({"tier": "Admin", "priority": 1, "ingress": rules}),
        json!({"tier": "Admin", "priority": 1, "subject": {"namespaces": {}, "pods": {}}}),
        json!({"tier": "Admin", "priority": 1, "subject": {"namespaces": {"matchLabels": 5}}}),
        json!(7),
    ] {
        assert!(
            matches!(read(spec.clone()), ClusterPolicyRead::Unreadable { .. }),
            "{spec}"
        );
    }
}

#[test]
fn nodes_are_their_labels_and_addresses() {
    let n = node_from_json(&json!({"metadata": {"name": "n1", "labels": {"zone": "a"}},
        "status": {"addresses": [{"type": "Hostname", "address": "n1"},
                                 {"type": "InternalIP", "address": "192.168.0.2"},
                                 {"type": "InternalIP", "address": "fd00::2"},
                                 {"type": "ExternalIP", "address": "192.168.0.2"}]}}))
    .unwrap();
    assert_eq!(n.labels.get("zone").map(String::as_str), Some("a"));
    let want: Vec<std::net::IpAddr> =
        vec!["192.168.0.2".parse().unwrap(), "fd00::2".parse().unwrap()];
    assert_eq!(n.addresses, want);
    assert_eq!(node_from_json(&json!({})).unwrap(), NodeInfo::default());
}

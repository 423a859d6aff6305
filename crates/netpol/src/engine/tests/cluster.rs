//! Random ClusterNetworkPolicies and Nodes for the engine's random test: both tiers, every
//! action, a few priorities (ties and changes), every peer and protocol shape v1alpha2 has.

use serde_json::{json, Value};

use super::random::{random_selector, Rng};
use crate::model::{read_cluster_policy, ClusterPolicy, ClusterPolicyRead, Labels, NodeInfo};

fn random_peer(r: &mut Rng, egress: bool, accept: bool) -> Value {
    let kinds = if egress { 6 } else { 2 };
    match r.below(kinds) {
        0 => json!({"namespaces": random_selector(r, "team", &["red", "blue"])}),
        1 => json!({"pods": {"namespaceSelector": random_selector(r, "team", &["red", "blue"]),
                             "podSelector": random_selector(r, "app", &["web", "db", "cli"])}}),
        2 | 3 => json!({"networks": [r.pick(&["10.0.0.0/29", "10.0.0.8/30", "fd00::/124",
                                              "0.0.0.0/0"])]}),
        4 => json!({"nodes": random_selector(r, "zone", &["z1", "z2"])}),
        _ if accept => json!({"domainNames": ["example.com"]}),
        _ => json!({"networks": ["10.0.0.4/30"]}),
    }
}

fn random_protocol(r: &mut Rng, named: bool) -> Value {
    match r.below(if named { 4 } else { 3 }) {
        0 => json!({"tcp": {"destinationPort": {"number": 80}}}),
        1 => json!({"udp": {"destinationPort": {"range": {"start": 1000, "end": 2000}}}}),
        2 => json!({"tcp": {"destinationPort": {"number": *r.pick(&[53, 8080])}}}),
        _ => json!({"destinationNamedPort": r.pick(&["h", "d"])}),
    }
}

fn random_rule(r: &mut Rng, egress: bool) -> Value {
    let action = *r.pick(&["Accept", "Deny", "Pass"]);
    let peers: Vec<Value> = (0..1 + r.below(2))
        .map(|_| random_peer(r, egress, action == "Accept"))
        .collect();
    // The API refuses named ports beside networks, nodes and domainNames peers.
    let named = peers
        .iter()
        .all(|p| p.get("namespaces").or(p.get("pods")).is_some());
    let mut rule = json!({"action": action, (if egress { "to" } else { "from" }): peers});
    if r.chance(60) {
        let protos: Vec<Value> = (0..1 + r.below(2))
            .map(|_| random_protocol(r, named))
            .collect();
        rule["protocols"] = Value::Array(protos);
    }
    rule
}

/// A random ClusterNetworkPolicy named `name`, read as the agent reads it.
pub(super) fn random_cluster_policy(r: &mut Rng, name: &str) -> ClusterPolicy {
    let subject = if r.chance(50) {
        json!({"namespaces": random_selector(r, "team", &["red", "blue"])})
    } else {
        json!({"pods": {"namespaceSelector": random_selector(r, "team", &["red", "blue"]),
                        "podSelector": random_selector(r, "app", &["web", "db", "cli"])}})
    };
    let ingress: Vec<Value> = (0..r.below(3)).map(|_| random_rule(r, false)).collect();
    let egress: Vec<Value> = (0..r.below(3)).map(|_| random_rule(r, true)).collect();
    let obj = json!({"metadata": {"name": name}, "spec": {
        "tier": r.pick(&["Admin", "Baseline"]), "priority": r.pick(&[0, 5, 10]),
        "subject": subject, "ingress": ingress, "egress": egress}});
    match read_cluster_policy(&obj) {
        ClusterPolicyRead::Ok(p) => p,
        other => panic!("{obj}: {other:?}"),
    }
}

/// A random Node: a zone label, addresses from the pods' small pool.
pub(super) fn random_node(r: &mut Rng) -> NodeInfo {
    let mut labels = Labels::new();
    if r.chance(80) {
        labels.insert("zone".into(), (*r.pick(&["z1", "z2"])).into());
    }
    let mut addresses = vec![format!("10.0.0.{}", r.below(16))
        .parse()
        .unwrap_or([0u8; 4].into())];
    if r.chance(50) {
        addresses.push(
            format!("fd00::{:x}", r.below(16))
                .parse()
                .unwrap_or([0u8; 4].into()),
        );
    }
    NodeInfo { labels, addresses }
}

fn cnp(spec: Value) -> ClusterPolicy {
    match read_cluster_policy(&json!({"metadata": {"name": "c"}, "spec": spec})) {
        ClusterPolicyRead::Ok(p) => p,
        other => panic!("{other:?}"),
    }
}

#[test]
fn cluster_changes_compile_only_what_they_touch() {
    use std::sync::Arc;
    let mut e = super::Engine::new("n1");
    for i in 0..10 {
        let node = if i < 5 { "n1" } else { "n2" };
        let p = super::web("a", &format!("w{i}"), node, &format!("10.0.1.{i}"));
        e.set_pod(&format!("a/w{i}"), Some(Arc::new(p)));
    }
    e.flush();
    // A policy whose subject selects none of this node's pods, a Node no set reads: nothing.
    let elsewhere = cnp(json!({"tier": "Admin", "priority": 1,
        "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "b"}}},
        "egress": [{"action": "Deny", "to": [{"nodes": {}}]}]}));
    assert!(e.set_cluster_policy("elsewhere", Some(Arc::new(elsewhere))));
    let zone = |z: &str| NodeInfo {
        labels: Labels::from([("zone".to_owned(), z.to_owned())]),
        addresses: vec!["192.168.0.9".parse().unwrap_or([0u8; 4].into())],
    };
    e.set_node("n9", Some(&zone("y")));
    assert_eq!(e.flush(), super::Flush::default());
    assert_eq!(e.cluster_policies_in_force(), 0);
    // One applying to namespace a: its five pods here, one shared chain, the tier's and the
    // one judging what they send to their own node.
    let mut to_z = cnp(json!({"tier": "Admin", "priority": 1,
        "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "a"}}},
        "egress": [{"action": "Deny", "to": [{"nodes": {"matchLabels": {"zone": "z"}}}]}]}));
    e.set_cluster_policy("to-z", Some(Arc::new(to_z.clone())));
    let f = e.flush();
    assert_eq!((f.pods, e.table().chains.len()), (5, 3), "{}", f.script);
    assert_eq!(e.table().host.len(), 5);
    assert!(e.isolates(&super::web("a", "new", "n1", "10.0.1.99")));
    assert!(
        e.isolates(&super::web("b", "new", "n1", "10.0.1.99")),
        "elsewhere applies"
    );
    assert!(!e.isolates(&super::web("c", "new", "n1", "10.0.1.99")));
    // A peer of a Deny in force here waits for its address in the Deny's set; of an Accept not.
    let from_c = |action: &str| {
        cnp(json!({"tier": "Admin", "priority": 1,
            "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "a"}}},
            "ingress": [{"action": action, "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "c"}}}]}]}))
    };
    e.set_cluster_policy("from-c", Some(Arc::new(from_c("Deny"))));
    assert!(e.isolates(&super::web("c", "new", "n1", "10.0.1.99")));
    e.set_cluster_policy("from-c", Some(Arc::new(from_c("Accept"))));
    assert!(!e.isolates(&super::web("c", "new", "n1", "10.0.1.99")));
    e.set_cluster_policy("from-c", None);
    e.flush();
    // A Node joining the zone: one set's elements, no pod.
    e.set_node("n9", Some(&zone("z")));
    let f = e.flush();
    assert_eq!((f.pods, f.sets), (0, 1));
    assert_eq!(
        f.script.trim_end(),
        format!(
            "add element inet tern_netpol {} {{ 192.168.0.9 }}",
            e.table()
                .sets
                .keys()
                .find(|k| k.starts_with("p4_"))
                .cloned()
                .unwrap_or_default()
        )
    );
    // Only its priority changing: the pods are compiled again into the same chains.
    to_z.priority = 7;
    e.set_cluster_policy("to-z", Some(Arc::new(to_z)));
    let f = e.flush();
    assert_eq!((f.pods, f.script.as_str()), (5, ""));
}

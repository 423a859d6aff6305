use serde_json::{json, Value};

use super::super::json::{put as put_json, replace as replace_json};
use crate::netpol::store::{Kind, Store, Unreadable};

fn cnp(name: &str, tier: &str, egress: &Value) -> Value {
    json!({"apiVersion": "policy.networking.k8s.io/v1alpha2", "kind": "ClusterNetworkPolicy",
        "metadata": {"name": name},
        "spec": {"tier": tier, "priority": 10, "subject": {"namespaces": {}}, "egress": egress}})
}

fn deny_all(name: &str, tier: &str) -> Value {
    cnp(
        name,
        tier,
        &json!([{"action": "Deny", "to": [{"namespaces": {}}]}]),
    )
}

/// A store with the flag on, NetworkPolicy's kinds listed (empty but for namespace x).
fn store() -> Store {
    let mut st = Store::new("n1", None, true);
    replace_json(&mut st, Kind::Pods, &[]);
    replace_json(
        &mut st,
        Kind::Namespaces,
        &[json!({"metadata": {"name": "x"}})],
    );
    replace_json(&mut st, Kind::Policies, &[]);
    st
}

#[test]
fn without_the_flag_the_cluster_kinds_count_as_listed() {
    let mut st = Store::new("n1", None, false);
    for k in [Kind::Pods, Kind::Namespaces, Kind::Policies] {
        assert!(!st.synced());
        replace_json(&mut st, k, &[]);
    }
    assert!(st.synced());
    let with: Vec<Kind> = Kind::watched(true).collect();
    let without: Vec<Kind> = Kind::watched(false).collect();
    assert_eq!(with.len(), 5);
    assert_eq!(without, [Kind::Pods, Kind::Namespaces, Kind::Policies]);
}

#[test]
fn cluster_policies_and_nodes_are_listed_before_anything_is_applied() {
    let mut st = store();
    assert!(
        !st.synced(),
        "ClusterNetworkPolicies and Nodes not listed yet"
    );
    replace_json(&mut st, Kind::ClusterPolicies, &[]);
    assert!(!st.synced());
    replace_json(
        &mut st,
        Kind::Nodes,
        &[json!({"metadata": {"name": "n1", "labels": {"a": "b"}},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.9"}]}})],
    );
    assert!(st.synced());
    assert_eq!(st.nodes.iter().collect::<Vec<_>>(), ["n1"]);
    // A relist without it deletes it.
    let g = st.generation;
    assert!(replace_json(&mut st, Kind::Nodes, &[]).changed);
    assert!(st.nodes.is_empty() && st.generation > g);
}

#[test]
fn cluster_policies_by_tier_and_unreadable_ones_fail_closed_and_are_counted() {
    let mut st = store();
    let r = replace_json(
        &mut st,
        Kind::ClusterPolicies,
        &[deny_all("a", "Admin"), deny_all("b", "Baseline")],
    );
    assert!(r.changed && r.unread == 0);
    assert_eq!(st.engine.cluster_policy_names().count(), 2);
    let tiers = st.cluster_tier_counts();
    assert_eq!((tiers["Admin"], tiers["Baseline"]), (1, 1));
    // The same object again: no change, no compile.
    let g = st.generation;
    let p = put_json(
        &mut st,
        Kind::ClusterPolicies,
        "a".into(),
        Some(&deny_all("a", "Admin")),
    );
    assert!(!p.changed && p.read && st.generation == g);
    // A network that cannot be read: the rule (a Deny) fails closed, the policy stays.
    let bad = cnp(
        "a",
        "Admin",
        &json!([{"action": "Deny", "to": [{"networks": ["nonsense"]}]}]),
    );
    let p = put_json(&mut st, Kind::ClusterPolicies, "a".into(), Some(&bad));
    assert!(!p.read && p.changed);
    assert!(st.engine.cluster_policy("a").is_some());
    assert_eq!(st.unreadable_cluster["a"].0, Unreadable::Rules);
    assert_eq!(st.unreadable_counts(true)["rules"], 1);
    assert_eq!(
        st.unreadable_counts(false)["rules"],
        0,
        "NetworkPolicy's own count"
    );
    // A subject that cannot be read: it applies to nothing, dropped and counted.
    let mut no_subject = deny_all("b", "Baseline");
    no_subject["spec"]["subject"] = json!({"pods": {"podSelector": {"matchLabels": "nonsense"}}});
    let p = put_json(
        &mut st,
        Kind::ClusterPolicies,
        "b".into(),
        Some(&no_subject),
    );
    assert!(!p.read && p.changed, "{p:?} {:?}", st.unreadable_cluster);
    assert!(st.engine.cluster_policy("b").is_none());
    assert_eq!(st.unreadable_cluster["b"].0, Unreadable::PodSelector);
    assert_eq!(st.cluster_tier_counts()["Baseline"], 0);
    // A relist without them forgets both, and their unreadable entries.
    let r = replace_json(&mut st, Kind::ClusterPolicies, &[]);
    assert!(r.changed);
    assert_eq!(st.engine.cluster_policy_names().count(), 0);
    assert!(st.unreadable_cluster.is_empty() && st.cluster_tiers.is_empty());
}

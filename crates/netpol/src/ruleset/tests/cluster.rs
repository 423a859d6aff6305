//! The ClusterNetworkPolicy chains as nft text: the pod's chain jumps to the Admin tier's
//! chain (Pass is `return`), then NetworkPolicy's allows and `drop`, or the Baseline tier's
//! chain and `accept`; `nodes` peers hold the Nodes' addresses.

use super::*;
use crate::model::{read_cluster_policy, ClusterPolicy, ClusterPolicyRead, NodeInfo};

fn cnp(spec: serde_json::Value) -> ClusterPolicy {
    match read_cluster_policy(&json!({"metadata": {"name": "c"}, "spec": spec})) {
        ClusterPolicyRead::Ok(p) => p,
        other => panic!("{other:?}"),
    }
}

fn table(pols: &[serde_json::Value], cluster: &[ClusterPolicy], nodes: &[NodeInfo]) -> Table {
    let pods = three_pods();
    let pols: Vec<_> = pols
        .iter()
        .map(|s| {
            policy_from_json(&json!({"metadata": {"namespace": "x", "name": "p"}, "spec": s}))
                .unwrap()
        })
        .collect();
    render(&compile(&World {
        node: "n1",
        pods: &pods,
        namespaces: &[],
        policies: &pols,
        cluster_policies: cluster,
        nodes,
    }))
    .0
}

/// The chain the map sends `ip` to in `dir`, with the chains it jumps to, as text.
fn chains_of(t: &Table, ingress: bool, ip: &str) -> Vec<(String, Vec<String>)> {
    let map = if ingress { &t.ingress } else { &t.egress };
    let head = map.get(&ip.parse().unwrap()).unwrap().clone();
    let text = |name: &str| t.chains[name].iter().map(ToString::to_string).collect();
    let mut out: Vec<(String, Vec<String>)> = vec![(head.clone(), text(&head))];
    for r in &t.chains[&head] {
        if let Some(sub) = r.to_string().strip_prefix("jump ") {
            out.push((sub.to_owned(), text(sub)));
        }
    }
    out
}

#[test]
fn admin_then_network_policy_else_baseline() {
    let admin = cnp(
        json!({"tier": "Admin", "priority": 1, "subject": {"namespaces": {}},
        "ingress": [{"action": "Pass", "from": [{"namespaces": {"matchLabels": {"t": "p"}}}],
                     "protocols": [{"tcp": {"destinationPort": {"range": {"start": 80, "end": 90}}}}]},
                    {"action": "Deny", "from": [{"namespaces": {}}]}]}),
    );
    let np = json!({"podSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}]}]});
    let t = table(std::slice::from_ref(&np), std::slice::from_ref(&admin), &[]);
    let c = chains_of(&t, true, "10.0.1.2");
    assert_eq!(c.len(), 2, "{c:?}");
    let (head, admin_chain) = (&c[0], &c[1]);
    assert!(
        head.0.starts_with("in_") && admin_chain.0.starts_with("ai_"),
        "{c:?}"
    );
    assert_eq!(head.1[0], format!("jump {}", admin_chain.0));
    assert!(head.1[1].starts_with("ip saddr @p4_") && head.1[1].ends_with(" accept"));
    assert_eq!(head.1.last().map(String::as_str), Some("drop"));
    let rules = &admin_chain.1;
    assert_eq!(rules.len(), 4, "{rules:?}");
    assert!(
        rules[0].starts_with("ip saddr @p4_")
            && rules[0].ends_with("meta l4proto tcp th dport { 80-90 } return")
    );
    assert!(rules[1].starts_with("ip6 saddr @p6_") && rules[1].ends_with("return"));
    assert!(rules[2].ends_with(" drop") && rules[3].ends_with(" drop"));
    // Without NetworkPolicy the pod's chain goes on to accept: no Baseline rule applies.
    let t = table(&[], &[admin], &[]);
    let c = chains_of(&t, true, "10.0.1.2");
    assert_eq!(c[0].1, [format!("jump {}", c[1].0), "accept".to_owned()]);
    // A Baseline Deny: its own chain, then accept; without Admin rules no jump to one.
    let base = cnp(
        json!({"tier": "Baseline", "priority": 1, "subject": {"namespaces": {}},
        "egress": [{"action": "Deny", "to": [{"pods": {"namespaceSelector": {}, "podSelector": {}}}]}]}),
    );
    let t = table(&[], std::slice::from_ref(&base), &[]);
    assert!(t.ingress.is_empty(), "egress rules only");
    let c = chains_of(&t, false, "fd00:1::3");
    assert!(
        c[0].0.starts_with("eg_") && c[1].0.starts_with("be_"),
        "{c:?}"
    );
    assert_eq!(c[0].1, [format!("jump {}", c[1].0), "accept".to_owned()]);
    assert!(c[1].1.iter().all(|r| r.ends_with(" drop")));
    // A NetworkPolicy isolating the pod replaces the Baseline tier: its chain as without CNP.
    let base_in = cnp(
        json!({"tier": "Baseline", "priority": 1, "subject": {"namespaces": {}},
        "ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}]}),
    );
    let t2 = table(std::slice::from_ref(&np), &[base_in], &[]);
    let alone = table(&[np], &[], &[]);
    // (Its peer set stays: a policy in force keeps its sets, as a NetworkPolicy does.)
    assert_eq!((&t2.chains, &t2.ingress), (&alone.chains, &alone.ingress));
}

#[test]
fn node_peers_hold_the_selected_nodes_addresses() {
    let to_nodes = cnp(
        json!({"tier": "Admin", "priority": 1, "subject": {"namespaces": {}},
        "egress": [{"action": "Accept", "to": [{"nodes": {"matchLabels": {"zone": "a"}}}]}]}),
    );
    let node = |zone: &str, ips: &[&str]| NodeInfo {
        labels: [("zone".to_owned(), zone.to_owned())].into_iter().collect(),
        addresses: ips.iter().map(|i| i.parse().unwrap()).collect(),
    };
    let nodes = [
        node("a", &["192.168.0.1", "fd00::1"]),
        node("a", &["192.168.0.2"]),
        node("b", &["192.168.0.3"]),
    ];
    let t = table(&[], &[to_nodes], &nodes);
    let c = chains_of(&t, false, "10.0.1.2");
    let set = c[1].1[0]
        .split('@')
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    // Nodes (like pods) are single addresses: a plain set, not an interval set.
    let Elements::Addrs(r) = &t.sets[set].elements else {
        panic!("{set}");
    };
    let shown: Vec<String> = r
        .iter()
        .map(|x| crate::addrs::element(true, (*x, *x)))
        .collect();
    assert_eq!(shown, ["192.168.0.1", "192.168.0.2"]);
    let v6 = set.replace("p4_", "p6_");
    assert!(matches!(&t.sets[&v6].elements, Elements::Addrs(r) if r.len() == 1));
}

#[test]
fn traffic_to_the_own_node_is_judged_by_the_tiers_only() {
    let to_nodes = |tier: &str| {
        cnp(
            json!({"tier": tier, "priority": 1, "subject": {"namespaces": {}},
            "egress": [{"action": "Deny", "to": [{"nodes": {}}]}]}),
        )
    };
    let np_egress = json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]});
    // Admin: the host chain jumps to the same Admin chain as the egress chain, then accepts.
    let t = table(&[], &[to_nodes("Admin")], &[]);
    let head = t.host.get(&"10.0.1.2".parse().unwrap()).unwrap();
    assert!(head.starts_with("ho_"), "{head}");
    let egress = chains_of(&t, false, "10.0.1.2");
    assert_eq!(
        t.chains[head]
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [format!("jump {}", egress[1].0), "accept".into()]
    );
    // Baseline: judged only while no NetworkPolicy isolates the pod for egress (which never
    // judges its own node): then no host entry at all.
    let t = table(&[], &[to_nodes("Baseline")], &[]);
    let head = &t.host[&"fd00:1::3".parse().unwrap()];
    assert!(t.chains[head][0].to_string().starts_with("jump be_"));
    let t = table(
        std::slice::from_ref(&np_egress),
        &[to_nodes("Baseline")],
        &[],
    );
    assert!(t.host.is_empty());
    // NetworkPolicy alone: the own node is never judged, as before cluster policies.
    assert!(table(&[np_egress], &[], &[]).host.is_empty());
}

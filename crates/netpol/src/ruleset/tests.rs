use serde_json::json;

use super::*;
use crate::compile::{compile, World};
use crate::model::{pod_from_json, policy_from_json, NamedPort, Protocol};

/// The table's nft text for `plan`, and its size.
fn text_of(plan: &Plan) -> (String, Size) {
    let (t, size) = render(plan);
    (t.text(), size)
}

fn pod(name: &str, app: &str, node: &str, ips: &[&str]) -> crate::model::Pod {
    let ips: Vec<_> = ips.iter().map(|i| json!({"ip": i})).collect();
    pod_from_json(
        &json!({"metadata": {"namespace": "x", "name": name, "labels": {"app": app}},
        "spec": {"nodeName": node}, "status": {"podIPs": ips}}),
    )
    .unwrap()
}

fn plan(pols: &[serde_json::Value]) -> Plan {
    plan_of(three_pods(), pols)
}

fn three_pods() -> Vec<crate::model::Pod> {
    let mut pods = vec![
        pod("a", "web", "n1", &["10.0.1.2", "fd00:1::2"]),
        pod("b", "web", "n1", &["10.0.1.3", "fd00:1::3"]),
        pod("c", "cli", "n2", &["10.0.2.2", "fd00:2::2"]),
    ];
    pods[2].ports.push(NamedPort {
        name: "h".into(),
        protocol: Protocol::Tcp,
        port: 8080,
    });
    pods
}

fn plan_of(pods: Vec<crate::model::Pod>, pols: &[serde_json::Value]) -> Plan {
    let pols: Vec<_> = pols
        .iter()
        .map(|s| {
            policy_from_json(&json!({"metadata": {"namespace": "x", "name": "p"}, "spec": s}))
                .unwrap()
        })
        .collect();
    compile(&World {
        node: "n1",
        pods: &pods,
        namespaces: &[],
        policies: &pols,
    })
}

#[test]
fn no_policy_is_an_empty_table_that_judges_nothing() {
    let (s, size) = replace_script(&Plan::default());
    assert!(
        s.starts_with(
            "add table inet tern_netpol\ndelete table inet tern_netpol\ntable inet tern_netpol {\n"
        ),
        "{s}"
    );
    assert!(
        s.contains("type filter hook forward priority filter; policy accept;"),
        "{s}"
    );
    assert!(
        s.contains("type filter hook forward priority filter + 1; policy accept;"),
        "{s}"
    );
    assert_eq!(s.matches("ct state established,related accept").count(), 2);
    assert!(!s.contains("elements"), "{s}");
    assert_eq!(size, Size::default());
}

#[test]
fn pods_with_the_same_rules_share_one_chain_and_set() {
    let (s, size) = text_of(&plan(&[
        json!({"podSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}, {"ipBlock": {"cidr": "10.9.0.0/16", "except": ["10.9.1.0/24"]}}],
                     "ports": [{"port": 80}, {"port": 81}, {"port": 1000, "endPort": 2000, "protocol": "UDP"}]}]}),
    ]));
    assert_eq!(size.pods, 2);
    assert_eq!(size.chains, 1, "{s}");
    assert!(s.contains("set p4_0 {\n\t\ttype ipv4_addr; flags interval; \n\t\telements = { 10.0.2.2, 10.9.0.0/24, 10.9.2.0-10.9.255.255 }\n\t}"), "{s}");
    assert!(
        s.contains(
            "set p6_1 {\n\t\ttype ipv6_addr; flags interval; \n\t\telements = { fd00:2::2 }"
        ),
        "{s}"
    );
    assert!(s.contains("\tchain in_0 {\n\t\tip saddr @p4_0 meta l4proto tcp th dport { 80-81 } accept\n\t\tip saddr @p4_0 meta l4proto udp th dport { 1000-2000 } accept\n\t\tip6 saddr @p6_1 meta l4proto tcp th dport { 80-81 } accept\n"), "{s}");
    assert!(s.contains("\t\tdrop\n\t}"), "{s}");
    assert!(s.contains("map ingress4 {\n\t\ttype ipv4_addr : verdict\n\t\telements = { 10.0.1.2 : jump in_0, 10.0.1.3 : jump in_0 }"), "{s}");
    assert!(s.contains("map ingress6 {\n\t\ttype ipv6_addr : verdict\n\t\telements = { fd00:1::2 : jump in_0, fd00:1::3 : jump in_0 }"), "{s}");
    assert!(
        s.contains("map egress4 {\n\t\ttype ipv4_addr : verdict\n\t}"),
        "{s}"
    );
    assert_eq!(size.rules, 5, "four accepts and the drop");
    assert_eq!(size.sets, 2);
    assert_eq!(size.elements, 4 + 4);
}

#[test]
fn deny_all_and_egress_named_ports() {
    let (s, _) = text_of(&plan(&[
        json!({"podSelector": {}}),
        json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"ports": [{"port": "h"}]}, {"ports": [{"protocol": "UDP"}]}]}),
    ]));
    assert!(s.contains("\tchain in_0 {\n\t\tdrop\n\t}"), "{s}");
    assert!(s.contains("set e4_0 {\n\t\ttype ipv4_addr . inet_proto . inet_service; \n\t\telements = { 10.0.2.2 . tcp . 8080 }"), "{s}");
    assert!(s.contains("\t\tmeta l4proto udp accept\n\t\tip daddr . meta l4proto . th dport @e4_0 accept\n\t\tip6 daddr . meta l4proto . th dport @e6_1 accept\n\t\tdrop\n"), "{s}");
    assert!(s.contains("10.0.1.2 : jump eg_1"), "{s}");
}

#[test]
fn removal_touches_only_the_table() {
    assert_eq!(
        remove_script(),
        "add table inet tern_netpol\ndelete table inet tern_netpol\n"
    );
}

/// Ingress for `app: web` from `app: cli` and from 10.9.0.0/16 on TCP 80.
fn web_from_cli() -> serde_json::Value {
    json!({"podSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}, {"ipBlock": {"cidr": "10.9.0.0/16"}}],
                     "ports": [{"port": 80}]}]})
}

fn rendered(pods: Vec<crate::model::Pod>) -> Table {
    render(&plan_of(pods, &[web_from_cli()])).0
}

#[test]
fn an_admitted_pod_sharing_a_chain_is_one_element_per_family_in_the_maps() {
    let old = rendered(three_pods());
    let mut pods = three_pods();
    pods.push(pod("d", "web", "n1", &["10.0.1.9", "fd00:1::9"]));
    let update = update_script(&old, &rendered(pods)).expect("elements only");
    assert_eq!(
        update,
        "add element inet tern_netpol ingress4 { 10.0.1.9 : jump in_0 }\n\
         add element inet tern_netpol ingress6 { fd00:1::9 : jump in_0 }\n"
    );
    assert_eq!(update_script(&old, &old).as_deref(), Some(""));
}

#[test]
fn a_peer_whose_address_moves_is_deleted_before_the_sets_intervals_are_added() {
    let old = rendered(three_pods());
    let mut pods = three_pods();
    // c moves next to the ipBlock (10.9.255.255 + 1): the set's intervals merge.
    pods[2] = pod("c", "cli", "n2", &["10.10.0.0", "fd00:2::2"]);
    pods.push(pod("e", "cli", "n2", &["10.0.2.3"]));
    let new = rendered(pods);
    let update = update_script(&old, &new).expect("elements only");
    assert_eq!(
        update,
        "delete element inet tern_netpol p4_0 { 10.0.2.2, 10.9.0.0/16 }\n\
         add element inet tern_netpol p4_0 { 10.0.2.3, 10.9.0.0-10.10.0.0 }\n",
        "{}",
        new.text()
    );
    // a web pod's address taken away and given to another: its key leaves one map entry
    let mut pods = three_pods();
    pods[1] = pod("b", "web", "n1", &["10.0.1.7", "fd00:1::3"]);
    let update = update_script(&old, &rendered(pods)).expect("elements only");
    assert_eq!(
        update,
        "delete element inet tern_netpol ingress4 { 10.0.1.3 }\n\
         add element inet tern_netpol ingress4 { 10.0.1.7 : jump in_0 }\n"
    );
}

#[test]
fn a_new_chain_set_or_rule_needs_a_replace() {
    let old = rendered(three_pods());
    // an egress policy for web as well: a new chain in the egress maps
    let mut pods = three_pods();
    pods.push(pod("d", "web", "n1", &["10.0.1.9"]));
    let other = plan_of(
        pods.clone(),
        &[
            web_from_cli(),
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"]}),
        ],
    );
    assert_eq!(
        update_script(&old, &render(&other).0),
        None,
        "egress maps gain a chain"
    );
    // the cli peers gone: the set is gone
    let no_cli: Vec<_> = three_pods().into_iter().filter(|p| p.name != "c").collect();
    assert_eq!(update_script(&old, &rendered(no_cli)), None);
    // the first web pod loses its isolation: still elements only (its map entries go)
    let mut pods = three_pods();
    pods[0] = pod("a", "other", "n1", &["10.0.1.2", "fd00:1::2"]);
    let update = update_script(&old, &rendered(pods)).expect("elements only");
    assert_eq!(
        update,
        "delete element inet tern_netpol ingress4 { 10.0.1.2 }\n\
         delete element inet tern_netpol ingress6 { fd00:1::2 }\n"
    );
}

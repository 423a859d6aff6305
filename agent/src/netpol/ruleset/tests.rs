use serde_json::json;

use super::*;
use crate::netpol::compile::{compile, World};
use crate::netpol::model::{pod_from_json, policy_from_json, NamedPort, Protocol};

fn pod(name: &str, app: &str, node: &str, ips: &[&str]) -> crate::netpol::model::Pod {
    let ips: Vec<_> = ips.iter().map(|i| json!({"ip": i})).collect();
    pod_from_json(
        &json!({"metadata": {"namespace": "x", "name": name, "labels": {"app": app}},
        "spec": {"nodeName": node}, "status": {"podIPs": ips}}),
    )
    .unwrap()
}

fn plan(pols: &[serde_json::Value]) -> Plan {
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
    let (s, size) = table(&plan(&[
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
    let (s, _) = table(&plan(&[
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

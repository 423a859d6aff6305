use serde_json::json;

use super::*;
use crate::compile::{compile, Plan, World};
use crate::model::{pod_from_json, policy_from_json, NamedPort, Protocol};

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
    pods[2].ports = [NamedPort {
        name: "h".into(),
        protocol: Protocol::Tcp,
        port: 8080,
    }]
    .into();
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
        ..World::default()
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
    assert!(
        s.contains("type filter hook input priority filter; policy accept;"),
        "{s}"
    );
    assert_eq!(s.matches("ct state established,related accept").count(), 3);
    assert!(!s.contains("elements"), "{s}");
    assert_eq!(size, Size::default());
}

/// The one name in `t` of a set or chain starting with `prefix`.
fn only(names: impl Iterator<Item = String>, prefix: &str) -> String {
    let v: Vec<String> = names.filter(|n| n.starts_with(prefix)).collect();
    assert_eq!(v.len(), 1, "{prefix}: {v:?}");
    v[0].clone()
}

fn set_name(t: &Table, prefix: &str) -> String {
    only(t.sets.keys().cloned(), prefix)
}

fn chain_name(t: &Table, prefix: &str) -> String {
    only(t.chains.keys().cloned(), prefix)
}

#[test]
fn pods_with_the_same_rules_share_one_chain_and_set() {
    let p = plan(&[json!({"podSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}, {"ipBlock": {"cidr": "10.9.0.0/16", "except": ["10.9.1.0/24"]}}],
                     "ports": [{"port": 80}, {"port": 81}, {"port": 1000, "endPort": 2000, "protocol": "UDP"}]}]})]);
    let (t, size) = render(&p);
    let s = t.text();
    let (p4, p6, c) = (
        set_name(&t, "p4_"),
        set_name(&t, "p6_"),
        chain_name(&t, "in_"),
    );
    assert_eq!(p4[3..], p6[3..], "one definition, two families");
    assert_eq!(size.pods, 2);
    assert_eq!(size.chains, 1, "{s}");
    assert!(s.contains(&format!("set {p4} {{\n\t\ttype ipv4_addr; flags interval; \n\t\telements = {{ 10.0.2.2, 10.9.0.0/24, 10.9.2.0-10.9.255.255 }}\n\t}}")), "{s}");
    assert!(
        s.contains(&format!(
            "set {p6} {{\n\t\ttype ipv6_addr; flags interval; \n\t\telements = {{ fd00:2::2 }}"
        )),
        "{s}"
    );
    assert!(s.contains(&format!("\tchain {c} {{\n\t\tip saddr @{p4} meta l4proto tcp th dport {{ 80-81 }} accept\n\t\tip saddr @{p4} meta l4proto udp th dport {{ 1000-2000 }} accept\n\t\tip6 saddr @{p6} meta l4proto tcp th dport {{ 80-81 }} accept\n")), "{s}");
    assert!(s.contains("\t\tdrop\n\t}"), "{s}");
    assert!(s.contains(&format!("map ingress4 {{\n\t\ttype ipv4_addr : verdict\n\t\telements = {{ 10.0.1.2 : jump {c}, 10.0.1.3 : jump {c} }}")), "{s}");
    assert!(s.contains(&format!("map ingress6 {{\n\t\ttype ipv6_addr : verdict\n\t\telements = {{ fd00:1::2 : jump {c}, fd00:1::3 : jump {c} }}")), "{s}");
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
    let (t, _) = render(&plan(&[
        json!({"podSelector": {}}),
        json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"ports": [{"port": "h"}]}, {"ports": [{"protocol": "UDP"}]}]}),
    ]));
    let s = t.text();
    let (e4, e6) = (set_name(&t, "e4_"), set_name(&t, "e6_"));
    let (i, e) = (chain_name(&t, "in_"), chain_name(&t, "eg_"));
    assert!(
        s.contains(&format!("\tchain {i} {{\n\t\tdrop\n\t}}")),
        "{s}"
    );
    assert!(s.contains(&format!("set {e4} {{\n\t\ttype ipv4_addr . inet_proto . inet_service; \n\t\telements = {{ 10.0.2.2 . tcp . 8080 }}")), "{s}");
    assert!(s.contains(&format!("set {e6} {{\n\t\ttype ipv6_addr . inet_proto . inet_service; \n\t\telements = {{ fd00:2::2 . tcp . 8080 }}")), "{s}");
    assert!(s.contains(&format!("\t\tmeta l4proto udp accept\n\t\tip daddr . meta l4proto . th dport @{e4} accept\n\t\tip6 daddr . meta l4proto . th dport @{e6} accept\n\t\tdrop\n")), "{s}");
    assert!(s.contains(&format!("10.0.1.2 : jump {e}")), "{s}");
}

#[test]
fn names_come_from_definitions_and_contents_not_from_order() {
    let pols = [
        json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}]}]}),
        json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": "10.9.0.0/16"}}]}]}),
    ];
    let one = render(&plan(&pols)).0;
    let mut reversed = pols.clone();
    reversed.reverse();
    assert_eq!(render(&plan(&reversed)).0, one);
    // A peer pod more: the same names, one element more.
    let mut pods = three_pods();
    pods.push(pod("e", "cli", "n2", &["10.0.2.9"]));
    let more = render(&plan_of(pods, &pols)).0;
    assert_eq!(
        more.sets.keys().collect::<Vec<_>>(),
        one.sets.keys().collect::<Vec<_>>()
    );
    assert_eq!(more.chains, one.chains);
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
    let c = chain_name(&old, "in_");
    let mut pods = three_pods();
    pods.push(pod("d", "web", "n1", &["10.0.1.9", "fd00:1::9"]));
    assert_eq!(
        update_script(&old, &rendered(pods)),
        format!(
            "add element inet tern_netpol ingress4 {{ 10.0.1.9 : jump {c} }}\n\
             add element inet tern_netpol ingress6 {{ fd00:1::9 : jump {c} }}\n"
        )
    );
    assert_eq!(update_script(&old, &old), "");
}

#[test]
fn a_peer_whose_address_moves_is_deleted_before_the_sets_intervals_are_added() {
    let old = rendered(three_pods());
    let (p4, c) = (set_name(&old, "p4_"), chain_name(&old, "in_"));
    let mut pods = three_pods();
    // c moves next to the ipBlock (10.9.255.255 + 1): the set's intervals merge.
    pods[2] = pod("c", "cli", "n2", &["10.10.0.0", "fd00:2::2"]);
    pods.push(pod("e", "cli", "n2", &["10.0.2.3"]));
    let new = rendered(pods);
    assert_eq!(
        update_script(&old, &new),
        format!(
            "delete element inet tern_netpol {p4} {{ 10.0.2.2, 10.9.0.0/16 }}\n\
             add element inet tern_netpol {p4} {{ 10.0.2.3, 10.9.0.0-10.10.0.0 }}\n"
        ),
        "{}",
        new.text()
    );
    // a web pod's address taken away and given to another: its key leaves one map entry
    let mut pods = three_pods();
    pods[1] = pod("b", "web", "n1", &["10.0.1.7", "fd00:1::3"]);
    assert_eq!(
        update_script(&old, &rendered(pods)),
        format!(
            "delete element inet tern_netpol ingress4 {{ 10.0.1.3 }}\n\
             add element inet tern_netpol ingress4 {{ 10.0.1.7 : jump {c} }}\n"
        )
    );
}

#[test]
fn new_chains_and_sets_are_added_and_unused_ones_deleted_last() {
    let old = rendered(three_pods());
    let mut pods = three_pods();
    pods.push(pod("d", "web", "n1", &["10.0.1.9"]));
    let other = render(&plan_of(
        pods,
        &[
            web_from_cli(),
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"],
                   "egress": [{"to": [{"ipBlock": {"cidr": "10.8.0.0/16"}}]}]}),
        ],
    ))
    .0;
    let update = update_script(&old, &other);
    let eg = chain_name(&other, "eg_");
    assert!(
        update.starts_with("table inet tern_netpol {\n\tset p4_"),
        "{update}"
    );
    assert!(update.contains(&format!("\tchain {eg} {{\n")), "{update}");
    assert!(update.contains(&format!("add element inet tern_netpol egress4 {{ 10.0.1.2 : jump {eg}, 10.0.1.3 : jump {eg}, 10.0.1.9 : jump {eg} }}")), "{update}");
    // And back: the map entries go, then the chain, then the sets no chain names.
    let back = update_script(&other, &old);
    let lines: Vec<&str> = back.lines().collect();
    let at = |p: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(p))
            .unwrap_or_else(|| panic!("{p}: {back}"))
    };
    assert!(
        at("delete element inet tern_netpol egress4") < at("delete chain inet tern_netpol eg_")
    );
    assert!(at("delete chain inet tern_netpol eg_") < at("delete set inet tern_netpol p4_"));
    assert_eq!(back.matches("delete set").count(), 2, "{back}");
}

#[test]
fn a_pod_leaving_isolation_leaves_the_maps() {
    let old = rendered(three_pods());
    let mut pods = three_pods();
    pods[0] = pod("a", "other", "n1", &["10.0.1.2", "fd00:1::2"]);
    assert_eq!(
        update_script(&old, &rendered(pods)),
        "delete element inet tern_netpol ingress4 { 10.0.1.2 }\n\
         delete element inet tern_netpol ingress6 { fd00:1::2 }\n"
    );
}

#[test]
fn a_set_of_pods_only_is_a_plain_set_of_single_addresses() {
    // Neighbouring addresses stay single elements: nft reads every interval set of the table
    // whole before it changes an element anywhere, so pod sets must not be interval sets.
    let mut pods = three_pods();
    pods.push(pod("d", "cli", "n2", &["10.0.2.3", "fd00:2::3"]));
    let p = plan_of(
        pods,
        &[json!({"podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}]}]})],
    );
    let (t, _) = render(&p);
    let s = t.text();
    let (p4, p6) = (set_name(&t, "p4_"), set_name(&t, "p6_"));
    assert!(
        s.contains(&format!(
            "set {p4} {{\n\t\ttype ipv4_addr; \n\t\telements = {{ 10.0.2.2, 10.0.2.3 }}"
        )),
        "{s}"
    );
    assert!(
        s.contains(&format!(
            "set {p6} {{\n\t\ttype ipv6_addr; \n\t\telements = {{ fd00:2::2, fd00:2::3 }}"
        )),
        "{s}"
    );
    assert!(!s.contains("flags interval"), "{s}");
}

#[test]
fn logging_denied_puts_one_rate_limited_log_rule_in_front_of_each_drop() {
    let pols = [
        json!({"podSelector": {}}),
        json!({"podSelector": {}, "policyTypes": ["Egress"]}),
    ];
    let off = render(&plan(&pols)).0;
    assert!(!off.text().contains("log") && !off.text().contains("limit"));
    let log = LogDenied { group: 7, rate: 20 };
    let (on, _) = render_logging(&plan(&pols), Some(log));
    let s = on.text();
    assert!(
        s.starts_with(
            "table inet tern_netpol {\n\tlimit log_denied { rate 20/second burst 20 packets }\n"
        ),
        "{s}"
    );
    let (i, e) = (chain_name(&on, "in_"), chain_name(&on, "eg_"));
    for (chain, dir) in [(i, "ingress"), (e, "egress")] {
        let want = format!(
            "\tchain {chain} {{\n\t\tct state new limit name \"log_denied\" log prefix \"tern-netpol denied {dir}\" group 7\n\t\tdrop\n\t}}"
        );
        assert!(s.contains(&want), "{want} in\n{s}");
    }
    // Other chains (their rules differ), the same maps and sets otherwise.
    assert_ne!(
        on.chains.keys().collect::<Vec<_>>(),
        off.chains.keys().collect::<Vec<_>>()
    );
    assert_eq!(
        (on.ingress.len(), on.egress.len()),
        (off.ingress.len(), off.egress.len())
    );
    assert_eq!(on.sets, off.sets);
}

#[test]
fn a_log_prefix_names_its_direction() {
    for dir in Dir::BOTH {
        let p = log_prefix(dir);
        assert!(p.len() < 64, "{p}: nfnetlink_log carries 64 bytes");
        assert_eq!(direction_of_prefix(&p), Some(dir));
    }
    for other in [
        "",
        "tern-netpol denied",
        "tern-netpol denied in",
        "kube-router drop",
    ] {
        assert_eq!(direction_of_prefix(other), None, "{other}");
    }
}

/// Rules are data now; their text, and so every chain's hash name, is what it was as text:
/// these names were printed by the renderer that wrote rules as strings (a changed name
/// would make every node's table differ from its last one, and its drift check restore).
#[test]
fn chain_names_are_the_hashes_of_the_rules_as_they_were_written() {
    let pols = [json!({"podSelector": {"matchLabels": {"app": "web"}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}],
            "ports": [{"port": 80}, {"port": 1000, "endPort": 2000}, {"protocol": "UDP", "port": 53}]},
            {"ports": [{"protocol": "SCTP", "port": 9}]}],
        "egress": [{"to": [{"podSelector": {}}], "ports": [{"port": "h"}]}]})];
    let (t, _) = render_logging(&plan(&pols), Some(LogDenied::default()));
    let names: Vec<&String> = t.chains.keys().collect();
    assert_eq!(
        names,
        ["eg_5a5495a7f707b635", "in_964fdc5a482d5b8c"],
        "{}",
        t.text()
    );
}

mod cluster;

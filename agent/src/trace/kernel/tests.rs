use std::collections::BTreeMap;

use tern_netpol::ruleset::{Addr, Match, NamedSet, Rule, Table, Verdict};

use super::*;

#[test]
fn rules_are_compared_as_nft_prints_them() {
    let cases = [
        (
            "ip saddr @p4_1 meta l4proto tcp th dport { 80, 1000-2000 } accept",
            "ip saddr @p4_1 tcp dport { 80, 1000-2000 } accept",
        ),
        (
            "ip6 saddr @p6_1 meta l4proto sctp th dport { 9000-9010 } accept",
            "ip6 saddr @p6_1 sctp dport 9000-9010 accept",
        ),
        ("meta l4proto udp th dport { 53 } drop", "udp dport 53 drop"),
        ("meta l4proto tcp accept", "meta l4proto tcp accept"),
        (
            "ip daddr . meta l4proto . th dport @e4_1 accept",
            "ip daddr . meta l4proto . th dport @e4_1 accept",
        ),
        ("jump ai_0123", "jump ai_0123"),
    ];
    for (written, shown) in cases {
        assert_eq!(printed(written), shown, "{written}");
    }
    let listing = "table inet tern_netpol {\n\tchain in_1 {\n\t\tjump ai_1\n\t\tdrop\n\t}\n}\n";
    assert_eq!(chain_rules(listing), ["jump ai_1", "drop"]);
}

/// A kernel that holds exactly `t` (what nft would print of it).
struct Fake(Table);

impl TableReader for Fake {
    fn verdict(&self, map: &str, ip: IpAddr) -> anyhow::Result<Option<String>> {
        let m = if map.starts_with("ingress") {
            &self.0.ingress
        } else {
            &self.0.egress
        };
        Ok(m.get(&ip).cloned())
    }
    fn chain(&self, name: &str) -> anyhow::Result<Option<Vec<String>>> {
        Ok(self
            .0
            .chains
            .get(name)
            .map(|r| r.iter().map(|r| printed(&r.to_string())).collect()))
    }
    fn holds(
        &self,
        set: &str,
        peer: IpAddr,
        _: Option<(Protocol, u16)>,
    ) -> anyhow::Result<Option<bool>> {
        Ok(self.0.sets.get(set).map(|s| match &s.elements {
            Elements::Addrs(r) => r.contains(&as_u128(peer)),
            _ => false,
        }))
    }
}

fn as_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn peer(set: &str) -> Match {
    Match::Peer {
        v4: true,
        addr: Addr::Source,
        set: set.into(),
    }
}

fn table() -> Table {
    let web: IpAddr = "10.0.1.2".parse().unwrap();
    let cli: IpAddr = "10.0.2.2".parse().unwrap();
    Table {
        sets: BTreeMap::from([(
            "p4_1".to_owned(),
            NamedSet {
                v4: true,
                elements: Elements::Addrs(vec![as_u128(cli)]),
            },
        )]),
        chains: BTreeMap::from([
            (
                "in_1".to_owned(),
                vec![
                    Rule::verdict(Verdict::Jump("ai_1".into())),
                    Rule::new(
                        vec![
                            peer("p4_1"),
                            Match::Protocol(Protocol::Tcp),
                            Match::Ports(vec![(80, 80)]),
                        ],
                        Verdict::Accept,
                    ),
                    Rule::verdict(Verdict::Drop),
                ],
            ),
            (
                "ai_1".to_owned(),
                vec![Rule::new(vec![peer("p4_1")], Verdict::Return)],
            ),
        ]),
        ingress: BTreeMap::from([(web, "in_1".to_owned())]),
        ..Table::default()
    }
}

fn end() -> End {
    End {
        direction: "ingress",
        local: "10.0.1.2".parse().unwrap(),
        peer: "10.0.2.2".parse().unwrap(),
        protocol: Protocol::Tcp,
        port: 80,
    }
}

#[test]
fn the_same_table_agrees_and_each_change_is_named() {
    let t = table();
    let c = compare(&t, &[end()], &Fake(t.clone())).unwrap();
    assert_eq!(c.differences, Vec::<String>::new());
    assert_eq!(
        c.agreed,
        ["ingress4 10.0.1.2 jumps to in_1; 2 chain(s) rule for rule; 1 peer set(s) agree on 10.0.2.2"]
    );

    let mut k = t.clone();
    k.sets.insert(
        "p4_1".into(),
        NamedSet {
            v4: true,
            elements: Elements::Addrs(Vec::new()),
        },
    );
    k.chains.get_mut("ai_1").unwrap()[0] = Rule::new(vec![peer("p4_1")], Verdict::Drop);
    let c = compare(&t, &[end()], &Fake(k)).unwrap();
    assert_eq!(
        c.differences,
        [
            "chain ai_1: rule 0 is `ip saddr @p4_1 drop` in the kernel, `ip saddr @p4_1 return` in the model (1 rules against 1)",
            "set p4_1: the kernel does not hold 10.0.2.2, the model does",
        ]
    );

    let mut k = t.clone();
    k.ingress.clear();
    k.chains.remove("in_1");
    let c = compare(&t, &[end()], &Fake(k)).unwrap();
    assert_eq!(
        c.differences,
        [
            "ingress4 10.0.1.2: the kernel has no element (not judged), the model jumps to in_1",
            "chain in_1: not in the kernel",
        ]
    );

    // An address the model does not judge, and neither does the kernel.
    let other = End {
        local: "10.0.1.9".parse().unwrap(),
        ..end()
    };
    let c = compare(&t, &[other], &Fake(t.clone())).unwrap();
    assert_eq!(
        c.agreed,
        ["ingress4 has no element for 10.0.1.9 (not judged)"]
    );
}

#[test]
fn set_elements_as_nft_lists_them() {
    use serde_json::json;
    let peer: IpAddr = "10.1.0.6".parse().unwrap();
    let holds = |e: Value| element_holds(&e, peer, None);
    assert!(holds(json!("10.1.0.6")));
    assert!(!holds(json!("10.1.0.7")));
    assert!(holds(json!({"range": ["10.1.0.5", "10.1.0.9"]})));
    assert!(!holds(json!({"range": ["10.1.0.7", "10.1.0.9"]})));
    assert!(holds(json!({"prefix": {"addr": "10.1.0.0", "len": 24}})));
    assert!(!holds(json!({"prefix": {"addr": "10.2.0.0", "len": 16}})));
    assert!(holds(json!({"prefix": {"addr": "0.0.0.0", "len": 0}})));
    assert!(!holds(json!({"prefix": {"addr": "::", "len": 0}})));
    let v6: IpAddr = "fd00:2::2".parse().unwrap();
    assert!(element_holds(
        &json!({"prefix": {"addr": "fd00:2::", "len": 64}}),
        v6,
        None
    ));
    let tcp80 = Some((Protocol::Tcp, 80));
    assert!(element_holds(
        &json!({"concat": ["10.1.0.6", "tcp", 80]}),
        peer,
        tcp80
    ));
    assert!(!element_holds(
        &json!({"concat": ["10.1.0.6", "udp", 80]}),
        peer,
        tcp80
    ));
    assert!(!element_holds(&json!("10.1.0.6"), peer, tcp80));
}

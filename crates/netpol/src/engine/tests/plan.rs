//! A flush's element or table plan applied to the table as it was, in memory, as the kernel
//! would: each delete must find its element and each add must not, as the netlink writer's
//! flags ask; what a rule or entry names must exist, what is removed must be named no more.

use std::net::IpAddr;

use crate::ruleset::{ElementPlan, Elements, Match, NamedSet, Rule, Table, TablePlan, Verdict};

fn key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn map<'t>(t: &'t mut Table, name: &str) -> &'t mut std::collections::BTreeMap<IpAddr, String> {
    match name.trim_end_matches(['4', '6']) {
        "ingress" => &mut t.ingress,
        "egress" => &mut t.egress,
        "host" => &mut t.host,
        other => panic!("no verdict map {other}"),
    }
}

/// Applies `plan` to `t`; panics where the kernel would refuse the batch.
pub(super) fn apply(t: &mut Table, plan: &ElementPlan) {
    for (add, list) in [(false, &plan.deletes), (true, &plan.adds)] {
        for s in list {
            for (ip, jump) in &s.elements {
                if let Some(set) = t.sets.get_mut(&s.set) {
                    let Elements::Addrs(keys) = &mut set.elements else {
                        panic!("{}: not a plain set", s.set)
                    };
                    assert!(jump.is_none(), "{}: a set element with a verdict", s.set);
                    match (keys.binary_search(&key(*ip)), add) {
                        (Err(at), true) => keys.insert(at, key(*ip)),
                        (Ok(at), false) => {
                            keys.remove(at);
                        }
                        (found, _) => panic!("{} {ip}: add {add}, found {found:?}", s.set),
                    }
                    continue;
                }
                let m = map(t, &s.set);
                let had = match jump {
                    Some(chain) => m.insert(*ip, chain.clone()),
                    None => m.remove(ip),
                };
                assert_eq!(had.is_some(), !add, "{} {ip}", s.set);
            }
        }
    }
}

/// The sets and chains a rule names.
fn named(r: &Rule) -> Vec<&str> {
    let Rule::Match { matches, verdict } = r else {
        return Vec::new();
    };
    let mut out: Vec<&str> = matches
        .iter()
        .filter_map(|m| match m {
            Match::Peer { set, .. } | Match::Endpoint { set, .. } => Some(set.as_str()),
            _ => None,
        })
        .collect();
    if let Verdict::Jump(c) = verdict {
        out.push(c);
    }
    out
}

/// Whether anything in `t` still names `name` (a rule, or a verdict map's entry).
fn in_use(t: &Table, name: &str) -> bool {
    t.chains
        .values()
        .flatten()
        .any(|r| named(r).contains(&name))
        || [&t.ingress, &t.egress, &t.host]
            .iter()
            .any(|m| m.values().any(|c| c == name))
}

/// Applies a table plan to `t` in the netlink batch's order; panics where the kernel would
/// refuse it: a set or chain made that exists, a rule naming what does not exist, a map entry
/// to a chain that does not, a chain or set removed while still named.
pub(super) fn apply_table(t: &mut Table, plan: &TablePlan) {
    for (name, v4) in &plan.new_sets {
        let set = NamedSet {
            v4: *v4,
            elements: Elements::Addrs(Vec::new()),
        };
        assert!(
            t.sets.insert(name.clone(), set).is_none(),
            "set {name} exists"
        );
    }
    for set in &plan.new_interval_sets {
        let ranges = set.ranges.iter().map(|(lo, hi)| (key(*lo), key(*hi)));
        let made = NamedSet {
            v4: set.v4,
            elements: Elements::Ranges(ranges.collect()),
        };
        assert!(
            t.sets.insert(set.name.clone(), made).is_none(),
            "set {} exists",
            set.name
        );
    }
    for (name, _) in &plan.new_chains {
        assert!(
            t.chains.insert(name.clone(), Vec::new()).is_none(),
            "chain {name} exists"
        );
    }
    for (name, rules) in &plan.new_chains {
        for r in rules {
            assert!(matches!(r, Rule::Match { .. }), "a plan carries {r}");
            for n in named(r) {
                assert!(
                    t.sets.contains_key(n) || t.chains.contains_key(n),
                    "{name}: {r}"
                );
            }
        }
        t.chains.insert(name.clone(), rules.clone());
    }
    apply(t, &plan.elements);
    for m in [&t.ingress, &t.egress, &t.host] {
        assert!(
            m.values().all(|c| t.chains.contains_key(c)),
            "a map entry to no chain"
        );
    }
    for name in &plan.gone_chains {
        assert!(t.chains.remove(name).is_some(), "chain {name} absent");
        assert!(!in_use(t, name), "chain {name} removed while named");
    }
    for name in &plan.gone_sets {
        assert!(t.sets.remove(name).is_some(), "set {name} absent");
        assert!(!in_use(t, name), "set {name} removed while named");
    }
}

//! A flush's element plan applied to the table as it was, in memory, as the kernel would: each
//! delete must find its element and each add must not, as the netlink writer's flags ask.

use std::net::IpAddr;

use crate::ruleset::{ElementPlan, Elements, Table};

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

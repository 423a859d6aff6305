//! The rules of a per-pod chain: each [`Allow`] as nft rules, peers by their sets' names.

use std::collections::BTreeMap;

use super::LogDenied;
use crate::addrs::Range;
use crate::compile::{Allow, Dir, PortRange};
use crate::sets::fnv1a;

/// ` th dport { 80, 1000-2000 }` (ports merged), or `""` when every port.
fn ports_of(ranges: &[&PortRange]) -> String {
    let mut v: Vec<Range> = Vec::new();
    for r in ranges {
        match r.range {
            None => return String::new(),
            Some((lo, hi)) => v.push((u128::from(lo), u128::from(hi))),
        }
    }
    v.sort_unstable();
    let mut merged: Vec<Range> = Vec::new();
    for (lo, hi) in v {
        match merged.last_mut() {
            Some(last) if lo <= last.1 + 1 => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    let items: Vec<String> = merged
        .iter()
        .map(|&(lo, hi)| {
            if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            }
        })
        .collect();
    format!(" th dport {{ {} }}", items.join(", "))
}

/// The rules of one [`Allow`] (`addr` is `saddr` for ingress, `daddr` for egress).
fn allow_rules(a: &Allow, addr: &str, out: &mut Vec<String>) {
    match a {
        Allow::Match { peers, ports } => {
            let port_parts: Vec<String> = match ports {
                None => vec![String::new()],
                Some(list) => {
                    let mut by_proto: BTreeMap<_, Vec<&PortRange>> = BTreeMap::new();
                    for p in list {
                        by_proto.entry(p.protocol).or_default().push(p);
                    }
                    by_proto
                        .iter()
                        .map(|(proto, rs)| format!(" meta l4proto {}{}", proto.nft(), ports_of(rs)))
                        .collect()
                }
            };
            // Both families always: an empty set matches nothing, and a pod joining the peers
            // later changes the set's elements, not this rule.
            let peer_parts: Vec<String> = match peers {
                None => vec![String::new()],
                Some(id) => vec![
                    format!("ip {addr} @p4_{id}"),
                    format!("ip6 {addr} @p6_{id}"),
                ],
            };
            for peer in &peer_parts {
                for port in &port_parts {
                    out.push(format!("{peer}{port} accept").trim_start().to_owned());
                }
            }
        }
        Allow::Endpoints(id) => {
            for (f, v) in [("ip", 4), ("ip6", 6)] {
                out.push(format!(
                    "{f} {addr} . meta l4proto . th dport @e{v}_{id} accept"
                ));
            }
        }
    }
}

/// The chain of one pod's rules in `dir`: its name (`in_<hash>`/`eg_<hash>` of its rules:
/// pods with the same rules share it) and its rules, `drop` last, the log rule in front of it
/// when `log` is on.
pub fn chain(dir: Dir, allows: &[Allow], log: Option<LogDenied>) -> (String, Vec<String>) {
    let (prefix, addr) = match dir {
        Dir::Ingress => ("in", "saddr"),
        Dir::Egress => ("eg", "daddr"),
    };
    let mut rules = Vec::new();
    for a in allows {
        allow_rules(a, addr, &mut rules);
    }
    if let Some(log) = log {
        rules.push(log.rule(dir));
    }
    rules.push("drop".to_owned());
    let name = format!("{prefix}_{:016x}", fnv1a(&rules.join("\n")));
    (name, rules)
}

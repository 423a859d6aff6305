//! The rules of a per-pod chain: each [`Allow`] as nft rules, peers by their sets' names; the
//! ClusterNetworkPolicy tiers as chains of their own that a pod's chain jumps to.

use std::collections::BTreeMap;

use super::LogDenied;
use crate::addrs::Range;
use crate::compile::{Allow, Dir, PortRange, TierRule, Tiers};
use crate::model::Action;
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

/// The rules of one [`Allow`] (`addr` is `saddr` for ingress, `daddr` for egress), each
/// ending in `verdict`.
fn allow_rules(a: &Allow, addr: &str, verdict: &str, out: &mut Vec<String>) {
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
                    out.push(format!("{peer}{port} {verdict}").trim_start().to_owned());
                }
            }
        }
        Allow::Endpoints(id) => {
            for (f, v) in [("ip", 4), ("ip6", 6)] {
                out.push(format!(
                    "{f} {addr} . meta l4proto . th dport @e{v}_{id} {verdict}"
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
        allow_rules(a, addr, "accept", &mut rules);
    }
    if let Some(log) = log {
        rules.push(log.rule(dir));
    }
    rules.push("drop".to_owned());
    let name = format!("{prefix}_{:016x}", fnv1a(&rules.join("\n")));
    (name, rules)
}

/// A tier's chain (`ai_`/`ae_` Admin, `bi_`/`be_` Baseline, ingress/egress, hash of its
/// rules): each rule's matches with its action's verdict — Accept `accept`, Deny `drop`, Pass
/// `return` (to the pod's chain, which goes on to the next tier) — and nothing at the end, so
/// a connection no rule matches returns too.
fn tier_chain(tier: char, dir: Dir, rules: &[TierRule]) -> (String, Vec<String>) {
    let (d, addr) = match dir {
        Dir::Ingress => ('i', "saddr"),
        Dir::Egress => ('e', "daddr"),
    };
    let mut out = Vec::new();
    for r in rules {
        let verdict = match r.action {
            Action::Accept => "accept",
            Action::Deny => "drop",
            Action::Pass => "return",
        };
        for m in &r.matches {
            allow_rules(m, addr, verdict, &mut out);
        }
    }
    let name = format!("{tier}{d}_{:016x}", fnv1a(&out.join("\n")));
    (name, out)
}

/// The chains of one pod in `dir`, the one its map entry jumps to first, then the tier chains
/// it jumps to; none when no policy of any tier applies. The pod's chain: `jump` the Admin
/// chain (when an Admin rule applies), then, when a NetworkPolicy isolates it (`np`), its
/// allows and `drop`; else `jump` the Baseline chain (when a Baseline rule applies) and
/// `accept`. Without cluster policies it is [`chain`]'s, name and all.
/// With `log`, NetworkPolicy's `drop` is logged as [`chain`] logs it (a tier's Deny is not).
pub fn pod_chains(
    dir: Dir,
    np: Option<&[Allow]>,
    tiers: &Tiers,
    log: Option<LogDenied>,
) -> Vec<(String, Vec<String>)> {
    if np.is_none() && tiers.is_empty() {
        return Vec::new();
    }
    let mut subs = Vec::new();
    let mut head = Vec::new();
    if !tiers.admin.is_empty() {
        let (name, rules) = tier_chain('a', dir, &tiers.admin);
        head.push(format!("jump {name}"));
        subs.push((name, rules));
    }
    let (name, mut rules) = match np {
        Some(allows) => chain(dir, allows, log),
        None => {
            let mut rules = Vec::new();
            if !tiers.baseline.is_empty() {
                let (name, b) = tier_chain('b', dir, &tiers.baseline);
                rules.push(format!("jump {name}"));
                subs.push((name, b));
            }
            rules.push("accept".to_owned());
            let prefix = match dir {
                Dir::Ingress => "in",
                Dir::Egress => "eg",
            };
            (format!("{prefix}_{:016x}", fnv1a(&rules.join("\n"))), rules)
        }
    };
    let name = if head.is_empty() {
        name
    } else {
        head.append(&mut rules);
        rules = head;
        let prefix = &name[..2];
        format!("{prefix}_{:016x}", fnv1a(&rules.join("\n")))
    };
    let mut out = vec![(name, rules)];
    out.append(&mut subs);
    out
}

/// The chains judging what one pod sends to its own node (the input hook; the forward hook
/// never sees it), with the tier chains it jumps to: the egress Admin chain, then accept when
/// a NetworkPolicy isolates the pod for egress (NetworkPolicy never judges a pod's own node),
/// else the egress Baseline chain and accept. None when no tier rule could judge it: the
/// pod's traffic to its node stays unjudged, as without cluster policies.
pub fn host_chains(np: Option<&[Allow]>, tiers: &Tiers) -> Vec<(String, Vec<String>)> {
    let baseline = np.is_none() && !tiers.baseline.is_empty();
    if tiers.admin.is_empty() && !baseline {
        return Vec::new();
    }
    let (mut rules, mut subs) = (Vec::new(), Vec::new());
    if !tiers.admin.is_empty() {
        let (name, r) = tier_chain('a', Dir::Egress, &tiers.admin);
        rules.push(format!("jump {name}"));
        subs.push((name, r));
    }
    if baseline {
        let (name, r) = tier_chain('b', Dir::Egress, &tiers.baseline);
        rules.push(format!("jump {name}"));
        subs.push((name, r));
    }
    rules.push("accept".to_owned());
    let name = format!("ho_{:016x}", fnv1a(&rules.join("\n")));
    let mut out = vec![(name, rules)];
    out.append(&mut subs);
    out
}

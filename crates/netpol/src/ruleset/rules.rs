//! The rules of a per-pod chain: each [`Allow`] as nft rules, peers by their sets' names; the
//! ClusterNetworkPolicy tiers as chains of their own that a pod's chain jumps to.

use std::collections::BTreeMap;

use super::rule::{joined, Addr, Match, Rule, Verdict};
use super::LogDenied;
use crate::compile::{Allow, Dir, PortRange, TierRule, Tiers};
use crate::model::Action;
use crate::sets::fnv1a;

/// `th dport { 80, 1000-2000 }` (ports merged), or `None` when every port.
fn ports_of(ranges: &[&PortRange]) -> Option<Match> {
    let mut v: Vec<(u16, u16)> = Vec::new();
    for r in ranges {
        v.push(r.range?);
    }
    v.sort_unstable();
    let mut merged: Vec<(u16, u16)> = Vec::new();
    for (lo, hi) in v {
        match merged.last_mut() {
            Some(last) if u32::from(lo) <= u32::from(last.1) + 1 => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    Some(Match::Ports(merged))
}

/// The rules of one [`Allow`] (`addr`: the source for ingress, the destination for egress),
/// each ending in `verdict`.
fn allow_rules(a: &Allow, addr: Addr, verdict: &Verdict, out: &mut Vec<Rule>) {
    match a {
        Allow::Match { peers, ports } => {
            let port_parts: Vec<Vec<Match>> = match ports {
                None => vec![Vec::new()],
                Some(list) => {
                    let mut by_proto: BTreeMap<_, Vec<&PortRange>> = BTreeMap::new();
                    for p in list {
                        by_proto.entry(p.protocol).or_default().push(p);
                    }
                    by_proto
                        .iter()
                        .map(|(proto, rs)| {
                            let mut m = vec![Match::Protocol(*proto)];
                            m.extend(ports_of(rs));
                            m
                        })
                        .collect()
                }
            };
            // Both families always: an empty set matches nothing, and a pod joining the peers
            // later changes the set's elements, not this rule.
            let peer_parts: Vec<Option<Match>> = match peers {
                None => vec![None],
                Some(id) => [(true, 4), (false, 6)]
                    .into_iter()
                    .map(|(v4, v)| {
                        Some(Match::Peer {
                            v4,
                            addr,
                            set: format!("p{v}_{id}"),
                        })
                    })
                    .collect(),
            };
            for peer in &peer_parts {
                for port in &port_parts {
                    let matches = peer.iter().chain(port).cloned().collect();
                    out.push(Rule::new(matches, verdict.clone()));
                }
            }
        }
        Allow::Endpoints(id) => {
            for (v4, v) in [(true, 4), (false, 6)] {
                let set = format!("e{v}_{id}");
                let m = Match::Endpoint { v4, addr, set };
                out.push(Rule::new(vec![m], verdict.clone()));
            }
        }
    }
}

/// The chain of one pod's rules in `dir`: its name (`in_<hash>`/`eg_<hash>` of its rules:
/// pods with the same rules share it) and its rules, `drop` last, the log rule in front of it
/// when `log` is on.
pub fn chain(dir: Dir, allows: &[Allow], log: Option<LogDenied>) -> (String, Vec<Rule>) {
    let prefix = match dir {
        Dir::Ingress => "in",
        Dir::Egress => "eg",
    };
    let mut rules = Vec::new();
    for a in allows {
        allow_rules(a, Addr::of(dir), &Verdict::Accept, &mut rules);
    }
    if let Some(log) = log {
        rules.push(Rule::Log(log, dir));
    }
    rules.push(Rule::verdict(Verdict::Drop));
    let name = format!("{prefix}_{:016x}", fnv1a(&joined(&rules)));
    (name, rules)
}

/// A tier's chain (`ai_`/`ae_` Admin, `bi_`/`be_` Baseline, ingress/egress, hash of its
/// rules): each rule's matches with its action's verdict — Accept `accept`, Deny `drop`, Pass
/// `return` (to the pod's chain, which goes on to the next tier) — and nothing at the end, so
/// a connection no rule matches returns too.
fn tier_chain(tier: char, dir: Dir, rules: &[TierRule]) -> (String, Vec<Rule>) {
    let d = match dir {
        Dir::Ingress => 'i',
        Dir::Egress => 'e',
    };
    let mut out = Vec::new();
    for r in rules {
        let verdict = match r.action {
            Action::Accept => Verdict::Accept,
            Action::Deny => Verdict::Drop,
            Action::Pass => Verdict::Return,
        };
        for m in &r.matches {
            allow_rules(m, Addr::of(dir), &verdict, &mut out);
        }
    }
    let name = format!("{tier}{d}_{:016x}", fnv1a(&joined(&out)));
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
) -> Vec<(String, Vec<Rule>)> {
    if np.is_none() && tiers.is_empty() {
        return Vec::new();
    }
    let mut subs = Vec::new();
    let mut head = Vec::new();
    if !tiers.admin.is_empty() {
        let (name, rules) = tier_chain('a', dir, &tiers.admin);
        head.push(Rule::verdict(Verdict::Jump(name.clone())));
        subs.push((name, rules));
    }
    let (name, mut rules) = match np {
        Some(allows) => chain(dir, allows, log),
        None => {
            let mut rules = Vec::new();
            if !tiers.baseline.is_empty() {
                let (name, b) = tier_chain('b', dir, &tiers.baseline);
                rules.push(Rule::verdict(Verdict::Jump(name.clone())));
                subs.push((name, b));
            }
            rules.push(Rule::verdict(Verdict::Accept));
            let prefix = match dir {
                Dir::Ingress => "in",
                Dir::Egress => "eg",
            };
            (format!("{prefix}_{:016x}", fnv1a(&joined(&rules))), rules)
        }
    };
    let name = if head.is_empty() {
        name
    } else {
        head.append(&mut rules);
        rules = head;
        let prefix = &name[..2];
        format!("{prefix}_{:016x}", fnv1a(&joined(&rules)))
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
pub fn host_chains(np: Option<&[Allow]>, tiers: &Tiers) -> Vec<(String, Vec<Rule>)> {
    let baseline = np.is_none() && !tiers.baseline.is_empty();
    if tiers.admin.is_empty() && !baseline {
        return Vec::new();
    }
    let (mut rules, mut subs) = (Vec::new(), Vec::new());
    if !tiers.admin.is_empty() {
        let (name, r) = tier_chain('a', Dir::Egress, &tiers.admin);
        rules.push(Rule::verdict(Verdict::Jump(name.clone())));
        subs.push((name, r));
    }
    if baseline {
        let (name, r) = tier_chain('b', Dir::Egress, &tiers.baseline);
        rules.push(Rule::verdict(Verdict::Jump(name.clone())));
        subs.push((name, r));
    }
    rules.push(Rule::verdict(Verdict::Accept));
    let name = format!("ho_{:016x}", fnv1a(&joined(&rules)));
    let mut out = vec![(name, rules)];
    out.append(&mut subs);
    out
}

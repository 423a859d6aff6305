//! An update that is a [`TablePlan`] (element moves, and the sets and chains a policy or a new
//! local pod makes or leaves behind) written over netlink (`tern_net::netlink::nftables`)
//! instead of an exec of nft: the same parts, in the script's order, in one batch the kernel
//! applies whole or not at all. Why: nft's child costs 3–8 ms of CPU and 4–14 ms of wall time a
//! transaction (it loads the table's cache first), most of a change's way to the kernel
//! (decision 0022).
//!
//! Invariant: a refused batch changed nothing, so the caller falls back to the nft script of
//! the same flush (then, as for any refused update, to a replace).

use tern_net::netlink::nftables as nl;
use tern_net::netlink::nftables::{Element, ElementWriter, Op, SetChange, Verb, NFPROTO_INET};
use tern_netpol::ruleset::{
    Addr, ElementPlan, Match, Rule, SetElements, TablePlan, Verdict, TABLE,
};
use tracing::warn;

/// The writer of the calling thread's network namespace, `None` (the nft script then carries
/// every update) when its socket cannot be made.
pub(super) fn writer() -> Option<ElementWriter> {
    ElementWriter::new(NFPROTO_INET, TABLE)
        .inspect_err(|e| {
            warn!(error = %e, "network policy: no nf_tables netlink socket; every update goes through nft");
        })
        .ok()
}

fn changes(verb: Verb, list: &[SetElements], out: &mut Vec<SetChange>) {
    out.extend(list.iter().map(|s| {
        SetChange {
            verb,
            set: s.set.clone(),
            elements: s
                .elements
                .iter()
                .map(|(key, jump)| Element {
                    key: *key,
                    jump: jump.clone(),
                })
                .collect(),
        }
    }));
}

/// The plan as the writer's batch: every delete, then every add (also the kernel test's and
/// `tern-bench --netpol-change-cost`'s, as `tern_agent::netpol::element_batch`).
pub fn batch(plan: &ElementPlan) -> Vec<SetChange> {
    let mut out = Vec::with_capacity(plan.deletes.len() + plan.adds.len());
    changes(Verb::Delete, &plan.deletes, &mut out);
    changes(Verb::Add, &plan.adds, &mut out);
    out
}

fn set_key(v4: bool) -> nl::SetKey {
    if v4 {
        nl::SetKey::Ipv4
    } else {
        nl::SetKey::Ipv6
    }
}

fn one_match(m: &Match) -> nl::Match {
    match m {
        Match::Peer { v4, addr, set } => nl::Match::Peer {
            v4: *v4,
            destination: *addr == Addr::Destination,
            set: set.clone(),
        },
        Match::Endpoint { v4, addr, set } => nl::Match::Endpoint {
            v4: *v4,
            destination: *addr == Addr::Destination,
            set: set.clone(),
        },
        Match::Protocol(p) => nl::Match::Protocol(p.number()),
        Match::Ports(r) => nl::Match::Ports(r.clone()),
    }
}

/// The rule as the writer's, `None` for one it does not encode (the log rule).
fn rule(r: &Rule) -> Option<nl::Rule> {
    let Rule::Match { matches, verdict } = r else {
        return None;
    };
    Some(nl::Rule {
        matches: matches.iter().map(one_match).collect(),
        verdict: match verdict {
            Verdict::Accept => nl::Verdict::Accept,
            Verdict::Drop => nl::Verdict::Drop,
            Verdict::Return => nl::Verdict::Return,
            Verdict::Jump(c) => nl::Verdict::Jump(c.clone()),
        },
    })
}

/// The plan as the writer's ops, in the script's order (`ruleset::TablePlan`): sets, chains,
/// their rules, element deletes and adds, chains and sets removed (also the kernel test's and
/// the bench's, as `tern_agent::netpol::table_batch`). `None` when a rule is not encodable.
pub fn ops(plan: &TablePlan) -> Option<Vec<Op>> {
    let mut out = Vec::new();
    for (name, v4) in &plan.new_sets {
        out.push(Op::NewSet {
            name: name.clone(),
            key: set_key(*v4),
        });
    }
    for set in &plan.new_interval_sets {
        out.push(Op::NewIntervalSet {
            name: set.name.clone(),
            key: set_key(set.v4),
            ranges: set.ranges.clone(),
        });
    }
    out.extend(plan.new_chains.iter().map(|(n, _)| Op::NewChain(n.clone())));
    for (chain, rules) in &plan.new_chains {
        for r in rules {
            out.push(Op::AddRule {
                chain: chain.clone(),
                rule: rule(r)?,
            });
        }
    }
    out.extend(batch(&plan.elements).into_iter().map(Op::Elements));
    out.extend(plan.gone_chains.iter().cloned().map(Op::DeleteChain));
    out.extend(plan.gone_sets.iter().cloned().map(Op::DeleteSet));
    Some(out)
}

/// Writes `plan`; false (logged) when it is not encodable or the kernel or the socket refused
/// it.
pub(super) fn write(writer: &ElementWriter, plan: &TablePlan) -> bool {
    let Some(ops) = ops(plan) else {
        return false;
    };
    match writer.apply(&ops) {
        Ok(()) => true,
        Err(e) => {
            warn!(error = %e, elements = plan.elements.len(), objects = plan.objects(), "network policy: the kernel refused the update over netlink; sending the same update through nft");
            false
        }
    }
}

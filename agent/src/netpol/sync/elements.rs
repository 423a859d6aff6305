//! An update that only moves elements (`ruleset::ElementPlan`) written over netlink
//! (`tern_net::netlink::nftables`) instead of an exec of nft: the same deletes and adds, in one
//! batch the kernel applies whole or not at all. Why: nft's child costs 3–4 ms of CPU and
//! 4–14 ms of wall time a transaction, most of a change's way to the kernel (decision 0022).
//!
//! Invariant: a refused batch changed nothing, so the caller falls back to the nft script of
//! the same flush (then, as for any refused update, to a replace).

use tern_net::netlink::nftables::{Element, ElementWriter, SetChange, Verb, NFPROTO_INET};
use tern_netpol::ruleset::{ElementPlan, SetElements, TABLE};
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

/// Writes `plan`; false (logged) when the kernel or the socket refused it.
pub(super) fn write(writer: &ElementWriter, plan: &ElementPlan) -> bool {
    match writer.write(&batch(plan)) {
        Ok(()) => true,
        Err(e) => {
            warn!(error = %e, elements = plan.len(), "network policy: the kernel refused the element update over netlink; sending the same update through nft");
            false
        }
    }
}

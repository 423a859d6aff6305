//! A flush that only moves elements, as data: when a [`Journal`] touched nothing but elements
//! of plain address sets and verdict maps that exist before and after (no set or chain made,
//! removed or changed, no interval set touched), the same update as its script, element by
//! element, for tern-agent's nf_tables netlink writer (`tern_net::netlink::nftables`), which
//! spares the exec of nft. Anything else has no plan and goes through the script.
//!
//! Why moves inside an interval set stay with nft (a new one is made over netlink: `plan.rs`):
//! an interval element is a pair of kernel elements (start and end flag) whose neighbours nft
//! merges and splits; a plain set's element is its key alone.

use std::net::IpAddr;

use super::journal::Journal;
use super::{sorted_minus, Elements, NamedSet, Table, VerdictMap};
use crate::addrs::address;

/// Elements of one named set or verdict map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetElements {
    /// The set's or map's name (`p4_<id>`, `ingress6`, ...).
    pub set: String,
    /// Keys, and for a verdict map the chain each jumps to.
    pub elements: Vec<(IpAddr, Option<String>)>,
}

/// An element-only update: every delete, then every add (a map key whose chain changed is
/// deleted, then added), in one transaction. Applied in full it makes the kernel's table what
/// the flush's script makes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElementPlan {
    /// Elements to delete, per set.
    pub deletes: Vec<SetElements>,
    /// Elements to add, per set.
    pub adds: Vec<SetElements>,
}

impl ElementPlan {
    /// How many elements the plan deletes and adds.
    pub fn len(&self) -> usize {
        let n = |v: &[SetElements]| v.iter().map(|s| s.elements.len()).sum::<usize>();
        n(&self.deletes) + n(&self.adds)
    }

    /// Whether the plan moves nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub(super) fn push(to: &mut Vec<SetElements>, set: &str, elements: Vec<(IpAddr, Option<String>)>) {
    if !elements.is_empty() {
        to.push(SetElements {
            set: set.to_owned(),
            elements,
        });
    }
}

/// The plan of a plain set that changed, `None` when it is not a plain address set.
pub(super) fn set_change(
    name: &str,
    old: &NamedSet,
    new: &NamedSet,
    plan: &mut ElementPlan,
) -> Option<()> {
    let (Elements::Addrs(a), Elements::Addrs(b)) = (&old.elements, &new.elements) else {
        return None;
    };
    if old.v4 != new.v4 {
        return None;
    }
    let keys = |k: Vec<u128>| k.into_iter().map(|x| (address(new.v4, x), None)).collect();
    push(&mut plan.deletes, name, keys(sorted_minus(a, b)));
    push(&mut plan.adds, name, keys(sorted_minus(b, a)));
    Some(())
}

impl Journal {
    /// The verdict maps' moves: per map and family, the keys whose chain changed or went,
    /// deleted, and the keys whose chain changed or came, added.
    pub(super) fn map_moves(&self, now: &Table, plan: &mut ElementPlan) {
        for m in VerdictMap::ALL {
            let mut gone: [Vec<_>; 2] = Default::default();
            let mut came: [Vec<_>; 2] = Default::default();
            for (key, before) in &self.maps[m as usize] {
                let after = now.map(m).get(key);
                if before.as_ref() == after {
                    continue;
                }
                let family = usize::from(!key.is_ipv4());
                if before.is_some() {
                    gone[family].push((*key, None));
                }
                if let Some(chain) = after {
                    came[family].push((*key, Some(chain.clone())));
                }
            }
            for (family, (gone, came)) in gone.into_iter().zip(came).enumerate() {
                let name = super::journal::map_name(m, family == 0);
                push(&mut plan.deletes, name, gone);
                push(&mut plan.adds, name, came);
            }
        }
    }
}

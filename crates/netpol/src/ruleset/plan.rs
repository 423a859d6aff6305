//! A flush as data: when everything a [`Journal`] touched is something tern-agent's nf_tables
//! netlink writer encodes (`tern_net::netlink::nftables`), the same update as its script, part
//! by part — plain address sets made and removed, chains made with their rules and removed,
//! element moves of plain sets and verdict maps — so that a policy created, changed or deleted
//! and a new local pod's admission spare the exec of nft as element moves do (decision 0022).
//!
//! What has no plan, and goes through the script whole: an interval set (ipBlock peers) or an
//! endpoint set made or its elements changed (an interval element is a pair of kernel elements
//! whose neighbours nft merges and splits; endpoint keys are concatenations the writer does not
//! encode), a chain with the log rule (`ct state new limit … log …`), a chain whose rules
//! changed under the same name (the names are hashes of the rules: only a collision would).
//!
//! Order, as the script's: sets made, chains made, then their rules (a rule names sets and
//! chains that exist by then), element deletes, element adds (a map entry's chain exists),
//! chains removed (pod chains before the tier chains they jump to), sets removed (no rule
//! names them any more).

use super::elements::{set_change, ElementPlan};
use super::journal::Journal;
use super::{Elements, Rule, Table};
use crate::addrs::address;

/// An update as the netlink writer's parts; applied in the order of the fields, it makes the
/// kernel's table what the flush's script makes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TablePlan {
    /// Plain address sets made, empty (their elements are in `elements.adds`): name, IPv4.
    pub new_sets: Vec<(String, bool)>,
    /// Chains made, in name order, with their rules.
    pub new_chains: Vec<(String, Vec<Rule>)>,
    /// Element deletes, then adds, of sets and verdict maps.
    pub elements: ElementPlan,
    /// Chains removed, pod chains before the tier chains they jump to.
    pub gone_chains: Vec<String>,
    /// Sets removed.
    pub gone_sets: Vec<String>,
}

impl TablePlan {
    /// Whether the plan only moves elements.
    pub fn elements_only(&self) -> bool {
        self.new_sets.is_empty()
            && self.new_chains.is_empty()
            && self.gone_chains.is_empty()
            && self.gone_sets.is_empty()
    }

    /// How many sets and chains it makes or removes.
    pub fn objects(&self) -> usize {
        self.new_sets.len() + self.new_chains.len() + self.gone_chains.len() + self.gone_sets.len()
    }
}

fn encodable(rules: &[Rule]) -> bool {
    rules.iter().all(|r| matches!(r, Rule::Match { .. }))
}

impl Journal {
    /// The update as a [`TablePlan`], or `None` when it touches anything the netlink writer
    /// does not encode (see the module's doc). `now` is the table after the changes.
    pub fn table_plan(&self, now: &Table) -> Option<TablePlan> {
        let mut plan = TablePlan::default();
        for (name, before) in &self.sets {
            match (before, now.sets.get(name)) {
                (Some(old), Some(new)) if old != new => {
                    set_change(name, old, new, &mut plan.elements)?;
                }
                (None, Some(new)) => {
                    let Elements::Addrs(keys) = &new.elements else {
                        return None;
                    };
                    plan.new_sets.push((name.clone(), new.v4));
                    let keys: Vec<_> = keys.iter().map(|k| (address(new.v4, *k), None)).collect();
                    super::elements::push(&mut plan.elements.adds, name, keys);
                }
                (Some(_), None) => plan.gone_sets.push(name.clone()),
                _ => {}
            }
        }
        for (name, before) in &self.chains {
            match (before, now.chains.get(name)) {
                (None, Some(rules)) if encodable(rules) => {
                    plan.new_chains.push((name.clone(), rules.clone()));
                }
                (Some(_), None) => plan.gone_chains.push(name.clone()),
                (Some(old), Some(rules)) if old == rules => {}
                (None, None) => {}
                _ => return None,
            }
        }
        // Pod chains (`eg_`, `ho_`, `in_`) sort after the tier chains they jump to (`a?_`,
        // `b?_`): removed in reverse name order, none goes while one still jumps to it.
        plan.gone_chains.reverse();
        self.map_moves(now, &mut plan.elements);
        Some(plan)
    }
}

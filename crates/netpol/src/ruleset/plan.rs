//! A flush as data: when everything a [`Journal`] touched is something tern-agent's nf_tables
//! netlink writer encodes (`tern_net::netlink::nftables`), the same update as its script, part
//! by part — plain and interval (ipBlock) address sets made and removed, chains made with
//! their rules and removed, element moves of plain sets and verdict maps — so that a policy
//! created, changed or deleted and a new local pod's admission spare the exec of nft as element
//! moves do (decision 0022).
//!
//! What has no plan, and goes through the script whole: elements moved inside an interval set
//! that stays (a pod joining a rule whose peers also hold an ipBlock: an interval element is a
//! pair of kernel elements whose neighbours nft merges and splits), an endpoint set made or its
//! elements changed (endpoint keys are concatenations the writer does not encode), a chain
//! with the log rule (`ct state new limit … log …`), a chain whose rules changed under the same
//! name (the names are hashes of the rules: only a collision would). An ipBlock changed is a
//! new interval set, never a move inside one: a peer set is named by its definition (the
//! peers as written, ipBlocks and their `except` with them: `sets.rs`), so the policy's new
//! rule names a new set and the old one is removed whole.
//!
//! Order, as the script's: sets made, chains made, then their rules (a rule names sets and
//! chains that exist by then), element deletes, element adds (a map entry's chain exists),
//! chains removed (pod chains before the tier chains they jump to), sets removed (no rule
//! names them any more).

use super::elements::{set_change, ElementPlan};
use super::journal::Journal;
use super::{Elements, Rule, Table};
use crate::addrs::address;

use std::net::IpAddr;

/// An update as the netlink writer's parts; applied in the order of the fields, it makes the
/// kernel's table what the flush's script makes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TablePlan {
    /// Plain address sets made, empty (their elements are in `elements.adds`): name, IPv4.
    pub new_sets: Vec<(String, bool)>,
    /// Interval address sets (a rule's peers with an ipBlock) made with their elements.
    pub new_interval_sets: Vec<IntervalSet>,
    /// Chains made, in name order, with their rules.
    pub new_chains: Vec<(String, Vec<Rule>)>,
    /// Element deletes, then adds, of sets and verdict maps.
    pub elements: ElementPlan,
    /// Chains removed, pod chains before the tier chains they jump to.
    pub gone_chains: Vec<String>,
    /// Sets removed.
    pub gone_sets: Vec<String>,
}

/// A new interval set: its name, family and ranges as the engine holds them (inclusive,
/// sorted, disjoint, not adjacent: `addrs.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntervalSet {
    /// Its name (`p4_<id>`, `p6_<id>`).
    pub name: String,
    /// IPv4 (else IPv6).
    pub v4: bool,
    /// Its ranges, first and last address of each.
    pub ranges: Vec<(IpAddr, IpAddr)>,
}

impl TablePlan {
    /// Whether the plan only moves elements.
    pub fn elements_only(&self) -> bool {
        self.new_sets.is_empty()
            && self.new_interval_sets.is_empty()
            && self.new_chains.is_empty()
            && self.gone_chains.is_empty()
            && self.gone_sets.is_empty()
    }

    /// How many sets and chains it makes or removes.
    pub fn objects(&self) -> usize {
        self.new_sets.len()
            + self.new_interval_sets.len()
            + self.new_chains.len()
            + self.gone_chains.len()
            + self.gone_sets.len()
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
                    let keys = match &new.elements {
                        Elements::Addrs(keys) => keys,
                        Elements::Ranges(ranges) => {
                            let at = |x| address(new.v4, x);
                            plan.new_interval_sets.push(IntervalSet {
                                name: name.clone(),
                                v4: new.v4,
                                ranges: ranges.iter().map(|(lo, hi)| (at(*lo), at(*hi))).collect(),
                            });
                            continue;
                        }
                        Elements::Endpoints(_) => return None,
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

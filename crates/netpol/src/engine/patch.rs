//! A pods-only set's elements changed in place: the addresses its member changes since the last
//! flush touched are looked up again, where gathering it whole would sort every member's (a set
//! that selects by namespace may hold most of the cluster's pods). The fleet-scale issue's lever
//! for a pod created or deleted elsewhere, or a namespace relabelled: each was about 1 ms of
//! gathering at shape A (BENCHMARKS, "CPU per change").

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::{AsPod, Engine, Members};
use crate::addrs::number;
use crate::ruleset::{set_names, Elements, NamedSet};
use crate::sets::{SetDef, SetId};

/// One member change: the pod's id, its addresses in the set before and after (empty: not a
/// member then).
pub(super) type Edit = (u32, Box<[IpAddr]>, Box<[IpAddr]>);

/// More member changes than this between two flushes (a namespace of many pods relabelled):
/// the set is gathered whole, which then costs less than looking each address up.
const MOST_EDITS: usize = 64;

/// Whether sets of `def` are patched in place: peer sets of pods only (an ipBlock makes ranges,
/// a `nodes` peer adds node addresses; both are gathered whole).
pub(super) fn patchable(def: &SetDef) -> bool {
    matches!(def, SetDef::Peers { .. }) && !def.has_blocks() && !def.reads_nodes()
}

/// Notes in `edits` (`None`: the set is gathered whole at the next flush) that pod `id`'s part
/// went from `before` to `after`.
pub(super) fn note(edits: &mut Option<Vec<Edit>>, id: u32, before: &[IpAddr], after: &[IpAddr]) {
    if let Some(list) = edits {
        if list.len() >= MOST_EDITS {
            *edits = None;
        } else {
            list.push((id, before.into(), after.into()));
        }
    }
}

impl<P: AsPod> Engine<P> {
    /// Changes the kernel table's copy of set `id` by its member changes since the last flush;
    /// false when it must be gathered whole instead (its changes were not all noted, or the
    /// table does not hold it as single addresses).
    pub(super) fn patch_set(&mut self, id: SetId) -> bool {
        let Some(edits) = self.sets.get_mut(&id).and_then(|st| st.edits.take()) else {
            return false;
        };
        let Some(st) = self.sets.get(&id) else {
            return false;
        };
        let Members::Peers(members) = &st.members else {
            return false;
        };
        let names = set_names(id, &st.def);
        let mut now: Vec<Vec<u128>> = Vec::with_capacity(2);
        for name in &names {
            match self.table.sets.get(name) {
                Some(NamedSet {
                    elements: Elements::Addrs(a),
                    ..
                }) => now.push(a.clone()),
                _ => return false,
            }
        }
        let touched: BTreeSet<IpAddr> = edits
            .iter()
            .flat_map(|(_, before, after)| before.iter().chain(after.iter()))
            .copied()
            .collect();
        // Held: the addresses of the edited pods that are members now, and any other address
        // one of the members holds (two pods may show one address: a finished pod's, reused).
        let mut held = BTreeSet::new();
        for (pid, _, _) in &edits {
            if let Some(p) = self.by_id.get(*pid as usize).and_then(Option::as_ref) {
                if members.contains(pid) {
                    held.extend(p.as_pod().ips.iter().copied());
                }
            }
        }
        let unsure: Vec<IpAddr> = touched.difference(&held).copied().collect();
        for ip in &unsure {
            if self
                .holders_of(*ip)
                .any(|(_, holder)| members.contains(holder))
            {
                held.insert(*ip);
            }
        }
        for ip in &touched {
            let elements = &mut now[usize::from(!ip.is_ipv4())];
            let n = number(*ip);
            match (elements.binary_search(&n), held.contains(ip)) {
                (Err(at), true) => elements.insert(at, n),
                (Ok(at), false) => {
                    elements.remove(at);
                }
                _ => {}
            }
        }
        for ((name, elements), v4) in names.iter().zip(now).zip([true, false]) {
            let set = NamedSet {
                v4,
                elements: Elements::Addrs(elements),
            };
            if self.table.sets.get(name) != Some(&set) {
                self.table.put_set(&mut self.journal, name, Some(set));
            }
        }
        if let Some(st) = self.sets.get_mut(&id) {
            st.edits = Some(Vec::new());
        }
        true
    }
}

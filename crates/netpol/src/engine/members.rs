//! What a set in force holds, by pod id ([`Members`]), and the counting of sets as policies come
//! into and leave force ([`Engine::register`], [`Engine::unregister`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::{AsPod, Engine, SetState};
use crate::compile::policy_sets;
use crate::model::{Policy, Protocol};
use crate::sets::{namespace_labels, Member, SetDef};

/// A set's member pods by the engine's pod id (4 bytes a member: a set that selects by
/// namespace may hold most of the cluster's pods): a peer set keeps only which pods (their
/// addresses are the pods' own), an endpoint set each one's endpoints.
#[derive(Debug)]
pub(super) enum Members {
    Peers(BTreeSet<u32>),
    Endpoints(BTreeMap<u32, Vec<(IpAddr, Protocol, u16)>>),
}

impl Members {
    pub(super) fn new(def: &SetDef) -> Members {
        match def {
            SetDef::Peers { .. } => Members::Peers(BTreeSet::new()),
            SetDef::Endpoints { .. } => Members::Endpoints(BTreeMap::new()),
        }
    }

    /// Sets pod `id`'s part to `m` (`None`: no member); `moved`: its addresses changed. True
    /// when the set's contents may have changed.
    pub(super) fn put(&mut self, id: u32, m: Option<Member>, moved: bool) -> bool {
        match self {
            Members::Peers(set) => match m {
                Some(_) => set.insert(id) || moved,
                None => set.remove(&id),
            },
            Members::Endpoints(map) => {
                let new = match m {
                    Some(Member::Endpoints(e)) => Some(e),
                    _ => None,
                };
                if map.get(&id) == new.as_ref() {
                    return false;
                }
                match new {
                    Some(e) => map.insert(id, e),
                    None => map.remove(&id),
                };
                true
            }
        }
    }
}

impl<P: AsPod> Engine<P> {
    /// Counts the sets of a policy coming into force, gathering the members of new ones.
    pub(super) fn register(&mut self, policy: &Policy) {
        for def in policy_sets(policy) {
            let id = def.id();
            if let Some(st) = self.sets.get_mut(&id) {
                st.refs += 1;
                continue;
            }
            // Only the namespaces whose pods may be members: one selector check per namespace,
            // then their pods.
            let namespaces: Vec<(&String, &BTreeSet<String>)> = match def.scope() {
                Some(ns) => self.pods_by_ns.get_key_value(ns).into_iter().collect(),
                None => self.pods_by_ns.iter().collect(),
            };
            let mut members = Members::new(&def);
            for (ns, keys) in namespaces {
                let labels = namespace_labels(&self.namespaces, ns);
                if !def.may_hold_namespace(ns, &labels) {
                    continue;
                }
                for (id, p) in keys.iter().filter_map(|k| self.pods.get(k)) {
                    if let Some(m) = def.member(p.as_pod(), &labels) {
                        members.put(*id, Some(m), false);
                    }
                }
            }
            self.sets.insert(
                id,
                SetState {
                    def,
                    refs: 1,
                    members,
                },
            );
            self.dirty_sets.insert(id);
        }
    }

    /// Uncounts the sets of a policy leaving force, dropping the ones no rule defines now.
    pub(super) fn unregister(&mut self, policy: &Policy) {
        for def in policy_sets(policy) {
            let id = def.id();
            if let Some(st) = self.sets.get_mut(&id) {
                st.refs -= 1;
                if st.refs == 0 {
                    self.sets.remove(&id);
                    self.dirty_sets.insert(id);
                }
            }
        }
    }
}

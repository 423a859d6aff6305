//! What a set in force holds, by pod id ([`Members`]), and the counting of sets as policies come
//! into and leave force ([`Engine::select`], [`Engine::register`], [`Engine::unregister`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::{AsPod, Engine, SetState};
use crate::compile::policy_sets;
use crate::model::Protocol;
use crate::sets::{namespace_labels, Member, SetDef};

/// One pod's endpoints in an endpoint set: (address, protocol, port).
pub(super) type PodEndpoints = Box<[(IpAddr, Protocol, u16)]>;

/// A set's member pods by the engine's pod id (4 bytes a member: a set that selects by
/// namespace may hold most of the cluster's pods): a peer set keeps only which pods (their
/// addresses are the pods' own), an endpoint set each one's endpoints.
#[derive(Debug)]
pub(super) enum Members {
    Peers(BTreeSet<u32>),
    /// Boxed, not a `Vec`: a pod's one or two endpoints in a `Vec` took 80 bytes (its least
    /// capacity is four), tens of MiB in sets of every pod with a named port.
    Endpoints(BTreeMap<u32, PodEndpoints>),
}

impl Members {
    pub(super) fn new(def: &SetDef) -> Members {
        match def {
            SetDef::Peers { .. } => Members::Peers(BTreeSet::new()),
            SetDef::Endpoints { .. } => Members::Endpoints(BTreeMap::new()),
        }
    }

    /// Sets pod `id`'s part to `m` (`None`: no member); `moved`: its addresses changed. When
    /// the set's contents may have changed: whether the pod was a member before.
    pub(super) fn put(&mut self, id: u32, m: Option<Member>, moved: bool) -> Option<bool> {
        match self {
            Members::Peers(set) => match m {
                Some(_) if set.insert(id) => Some(false),
                Some(_) => moved.then_some(true),
                None => set.remove(&id).then_some(true),
            },
            Members::Endpoints(map) => {
                let new = match m {
                    Some(Member::Endpoints(e)) => Some(e.into_boxed_slice()),
                    _ => None,
                };
                if map.get(&id) == new.as_ref() {
                    return None;
                }
                let before = match new {
                    Some(e) => map.insert(id, e),
                    None => map.remove(&id),
                };
                Some(before.is_some())
            }
        }
    }
}

impl<P: AsPod> Engine<P> {
    /// Records whether policy `pk` selects local pod `key`; a policy comes into force with its
    /// first and leaves with its last.
    pub(super) fn select(&mut self, pk: &str, key: &str, on: bool) {
        let Some(policy) = self.policies.get(pk).cloned() else {
            return;
        };
        let before = self.in_force.contains_key(pk);
        let selected = self.in_force.entry(pk.to_owned()).or_default();
        if on {
            selected.insert(key.to_owned());
        } else {
            selected.remove(key);
        }
        let after = !selected.is_empty();
        if !after {
            self.in_force.remove(pk);
        }
        match (before, after) {
            (false, true) => self.register(&policy_sets(&policy)),
            (true, false) => self.unregister(&policy_sets(&policy)),
            _ => {}
        }
    }

    /// Counts the sets of a policy coming into force (`defs`), gathering the members of new
    /// ones.
    pub(super) fn register(&mut self, defs: &[SetDef]) {
        for def in defs.iter().cloned() {
            let id = def.id();
            if let Some(st) = self.sets.get_mut(&id) {
                st.refs += 1;
                continue;
            }
            // Only the namespaces whose pods may be members: one selector check per namespace,
            // then their pods.
            let namespaces: Vec<&String> = match def.scope() {
                Some(ns) => self
                    .pods_by_ns
                    .get_key_value(ns)
                    .map(|(k, _)| k)
                    .into_iter()
                    .collect(),
                None => self.pods_by_ns.keys().collect(),
            };
            let mut members = Members::new(&def);
            for ns in namespaces {
                let labels = namespace_labels(&self.namespaces, ns);
                if !def.may_hold_namespace(ns, &labels) {
                    continue;
                }
                for (id, p) in self.pods_of(ns) {
                    if let Some(m) = def.member(p.as_pod(), &labels) {
                        members.put(id, Some(m), false);
                    }
                }
            }
            self.sets.insert(
                id,
                SetState {
                    def,
                    refs: 1,
                    members,
                    edits: None,
                },
            );
            self.dirty_sets.insert(id);
        }
    }

    /// Uncounts the sets of a policy leaving force (`defs`), dropping the ones no rule defines
    /// now.
    pub(super) fn unregister(&mut self, defs: &[SetDef]) {
        for def in defs {
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

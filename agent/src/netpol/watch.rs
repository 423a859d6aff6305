//! The NetworkPolicy controller's subscribers of the watch layer (`tern-watch`): one reflector
//! per kind (Pods, Namespaces, NetworkPolicies; with `--cluster-network-policy`
//! ClusterNetworkPolicies and Nodes too, `watch/cluster.rs`), each feeding the [`Store`] through small
//! functions, [`put`] for one object and [`replace`] for a list, so what is inside the store can
//! change without touching the watch.
//!
//! Invariants: the store only changes by a list or an event; an API server that is down leaves
//! the store (and so the table) as it is; an event or a relist that changes nothing the compiler
//! reads (a Pod's status conditions or phase alone, a resourceVersion, the same list again after
//! a 410) leaves [`Store::generation`] as it is, so it costs no compile and no nft transaction; a
//! NetworkPolicy or ClusterNetworkPolicy that cannot be read whole fails closed
//! (`model::read_policy`, `model::read_cluster_policy`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tern_netpol::model::{Namespace, PolicyRead};
use tern_watch::{Change, Consumer, PodObject, Reflector, Relisted};
use tracing::{debug, error, info, warn};

use super::store::{Kind, Shared, Store, Unreadable};
use crate::watch::run_reflector;

/// What putting one object did to the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Put {
    /// Something the compiler reads changed: an insert, a removal, a model that differs, or
    /// admitted addresses dropped.
    pub(super) changed: bool,
    /// The object was read whole (a delete always is).
    pub(super) read: bool,
}

impl Put {
    /// Whether it counts as an event that changed nothing: a Pod or Namespace that does not
    /// parse is a decode error instead; a policy not read whole is both (what it became may be
    /// what the store held).
    fn unchanged(self, kind: Kind) -> bool {
        !self.changed && (self.read || matches!(kind, Kind::Policies | Kind::ClusterPolicies))
    }
}

/// Records what became of the policy `key` (`None`: read whole, or deleted), logging only when
/// that changed.
fn note_unreadable(store: &mut Store, key: &str, now: Option<(Unreadable, String)>) {
    if store.unreadable.get(key) == now.as_ref() {
        return;
    }
    match now {
        Some((why, e)) => {
            match why {
                Unreadable::Rules => {
                    warn!(policy = %key, error = %e, "network policy: cannot read this NetworkPolicy's rules; the pods it selects are isolated in the directions it names and allowed nothing until it can be read")
                }
                Unreadable::PodSelector => {
                    error!(policy = %key, error = %e, "network policy: cannot read which pods this NetworkPolicy selects; it isolates nothing")
                }
            }
            store.unreadable.insert(key.to_owned(), (why, e));
        }
        None => {
            info!(policy = %key, "network policy: a NetworkPolicy that could not be read was read whole or deleted");
            store.unreadable.remove(key);
        }
    }
}

/// Puts one policy into the store, failing closed (`model::read_policy`): a policy whose rules
/// cannot be read is kept as a deny-all of the pods it selects; one whose podSelector cannot be
/// read is dropped (a stale version of it would be wrong too) and only counted.
fn set_policy(store: &mut Store, key: &str, obj: Option<&PolicyRead>) -> Put {
    let (policy, unreadable) = match obj.cloned() {
        None => (None, None),
        Some(PolicyRead::Read(p)) => (Some(p), None),
        Some(PolicyRead::Closed { policy, error }) => {
            (Some(policy), Some((Unreadable::Rules, error)))
        }
        Some(PolicyRead::Unreadable { error }) => (None, Some((Unreadable::PodSelector, error))),
    };
    let read = unreadable.is_none();
    note_unreadable(store, key, unreadable);
    Put {
        changed: store.engine.set_policy(key, policy),
        read,
    }
}

/// A kind's slim type as the store takes it.
pub(super) trait Watched: PartialEq + Send + Sync + 'static {
    /// Its kind.
    const KIND: Kind;

    /// Puts one object into the store (`None`: removes it) without touching the generation.
    fn set(store: &mut Store, key: &Arc<str>, new: Option<&Arc<Self>>) -> Put;
}

impl Watched for PodObject {
    const KIND: Kind = Kind::Pods;

    /// The watch layer's object itself goes into the engine (one copy), admitted addresses
    /// aside; a change of its phase alone is no change.
    fn set(store: &mut Store, key: &Arc<str>, new: Option<&Arc<Self>>) -> Put {
        Put {
            changed: store.put_pod_shared(key, new),
            read: true,
        }
    }
}

impl Watched for Namespace {
    const KIND: Kind = Kind::Namespaces;

    fn set(store: &mut Store, key: &Arc<str>, new: Option<&Arc<Self>>) -> Put {
        Put {
            changed: store.engine.set_namespace(key, new.map(|n| &**n)),
            read: true,
        }
    }
}

impl Watched for PolicyRead {
    const KIND: Kind = Kind::Policies;

    fn set(store: &mut Store, key: &Arc<str>, new: Option<&Arc<Self>>) -> Put {
        set_policy(store, key, new.map(|p| &**p))
    }
}

/// Puts one object into the store (`None`: removes it), bumping the generation only when
/// something the compiler reads changed.
pub(super) fn put<T: Watched>(store: &mut Store, key: &Arc<str>, obj: Option<&Arc<T>>) -> Put {
    let p = T::set(store, key, obj);
    if p.changed {
        store.generation += 1;
    }
    p
}

/// What a list did: objects that changed nothing, objects not read whole, and whether the
/// generation moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Relist {
    pub(super) unchanged: u64,
    pub(super) unread: u64,
    pub(super) changed: bool,
}

/// Deletes every object of `T`'s kind not in `keep`; true when one was.
fn keep_only<T: Watched>(store: &mut Store, keep: &BTreeSet<&str>) -> bool {
    let e = &store.engine;
    let gone: Vec<String> = match T::KIND {
        Kind::Pods => e
            .pod_keys()
            .filter(|k| !keep.contains(*k))
            .map(str::to_owned)
            .collect(),
        Kind::Namespaces => e
            .namespace_names()
            .filter(|k| !keep.contains(k.as_str()))
            .cloned()
            .collect(),
        Kind::Policies => e
            .policy_keys()
            .filter(|k| !keep.contains(k.as_str()))
            .cloned()
            .collect(),
        Kind::ClusterPolicies => e
            .cluster_policy_names()
            .filter(|k| !keep.contains(k.as_str()))
            .cloned()
            .collect(),
        Kind::Nodes => store
            .nodes
            .iter()
            .filter(|k| !keep.contains(k.as_str()))
            .cloned()
            .collect(),
    };
    let mut changed = false;
    for key in gone {
        changed |= T::set(store, &Arc::from(key), None).changed;
    }
    changed
}

/// Replaces every object of `T`'s kind with a fresh list (`items`: the watch's store after
/// it); the generation moves only when the kind's objects differ from before, or it had not
/// been listed yet.
pub(super) fn replace<'a, T: Watched>(
    store: &mut Store,
    items: impl IntoIterator<Item = (&'a Arc<str>, &'a Arc<T>)>,
) -> Relist {
    let kind = T::KIND;
    let mut r = Relist {
        changed: !store.is_listed(kind),
        ..Relist::default()
    };
    let mut keep = BTreeSet::new();
    for (key, v) in items {
        let p = T::set(store, key, Some(v));
        r.changed |= p.changed;
        r.unread += u64::from(!p.read);
        r.unchanged += u64::from(p.unchanged(kind));
        keep.insert(&**key);
    }
    r.changed |= keep_only::<T>(store, &keep);
    if kind == Kind::Policies {
        let gone: Vec<String> = store
            .unreadable
            .keys()
            .filter(|k| !keep.contains(k.as_str()))
            .cloned()
            .collect();
        for key in gone {
            note_unreadable(store, &key, None);
        }
    }
    if kind == Kind::ClusterPolicies {
        cluster::forget_unreadable(store, &keep);
    }
    if r.changed {
        store.mark_listed(kind);
    }
    r
}

/// One kind's subscriber: feeds the store and counts.
struct Feed<T> {
    s: Arc<Shared>,
    kind: std::marker::PhantomData<fn() -> T>,
}

/// The store's counts a policy subscriber copies into the stats after each change.
enum Counts {
    /// NetworkPolicies not read whole, by reason.
    Policies(BTreeMap<&'static str, u64>),
    /// ClusterNetworkPolicies not read whole, by reason, and those held, by tier.
    Cluster(BTreeMap<&'static str, u64>, BTreeMap<&'static str, u64>),
}

impl<T: Watched> Feed<T> {
    /// Counts objects that changed nothing and objects not read whole (Pods and Namespaces
    /// that did not decode, policies that failed closed); the policies' counts now.
    fn count(&self, unchanged: u64, unread: u64, counts: Option<Counts>) {
        let mut st = self.s.stats();
        let kind = T::KIND.label();
        if unchanged > 0 {
            *st.events_unchanged.entry(kind).or_insert(0) += unchanged;
        }
        if unread > 0 {
            *st.decode_errors.entry(kind).or_insert(0) += unread;
        }
        match counts {
            Some(Counts::Policies(u)) => st.unreadable_policies = u,
            Some(Counts::Cluster(u, tiers)) => {
                st.unreadable_cluster_policies = u;
                st.cluster_policies = tiers;
            }
            None => {}
        }
    }

    /// The store's counts, when this is a policy subscriber.
    fn unreadable(st: &Store) -> Option<Counts> {
        match T::KIND {
            Kind::Policies => Some(Counts::Policies(st.unreadable_counts(false))),
            Kind::ClusterPolicies => Some(Counts::Cluster(
                st.unreadable_counts(true),
                st.cluster_tier_counts(),
            )),
            _ => None,
        }
    }
}

impl<T: Watched> Consumer<T> for Feed<T> {
    fn replaced(&mut self, watched: &tern_watch::Store<T>, relist: &Relisted<T>) {
        let (r, unreadable) = {
            let mut st = self.s.store();
            let r = replace(&mut st, watched.iter());
            (r, Self::unreadable(&st))
        };
        self.s.notify();
        debug!(
            kind = T::KIND.label(),
            unchanged = r.unchanged,
            changed = r.changed,
            "network policy: list applied"
        );
        self.count(r.unchanged, r.unread + relist.undecodable, unreadable);
    }

    fn changed(&mut self, _: &tern_watch::Store<T>, change: &Change<T>) {
        let (p, unreadable) = {
            let mut st = self.s.store();
            let p = put(&mut st, &change.key, change.new.as_ref());
            (p, Self::unreadable(&st))
        };
        self.s.notify();
        self.count(
            u64::from(p.unchanged(T::KIND)),
            u64::from(!p.read),
            unreadable,
        );
    }

    fn skipped(&mut self, unchanged: u64, undecodable: u64) {
        self.count(unchanged, undecodable, None);
    }
}

/// One kind's reflector, feeding the store, until the controller stops.
fn reflect<T: Watched>(s: &Arc<Shared>, kind: tern_watch::Kind<T>) {
    let feed: Feed<T> = Feed {
        s: Arc::clone(s),
        kind: std::marker::PhantomData,
    };
    run_reflector(
        Reflector::new(kind, vec![Box::new(feed)]),
        &s.run,
        &s.stop,
        (s.cfg.watch_timeout, s.cfg.watch_idle),
        Box::new(|cause| *s.stats().api_errors.entry(cause).or_insert(0) += 1),
        "the NetworkPolicy table is unchanged",
    );
}

/// A watcher thread of `kind`: runs until the controller stops.
pub(super) fn run(s: &Arc<Shared>, kind: Kind) {
    match kind {
        Kind::Pods => reflect(s, tern_watch::kinds::PODS),
        Kind::Namespaces => reflect(s, tern_watch::kinds::NAMESPACES),
        Kind::Policies => reflect(s, tern_watch::kinds::POLICIES),
        Kind::ClusterPolicies => reflect(s, tern_watch::kinds::CLUSTER_POLICIES),
        Kind::Nodes => reflect(s, tern_watch::kinds::NODE_PEERS),
    }
}

mod cluster;

#[cfg(test)]
pub(super) mod json;

#[cfg(test)]
mod tests;

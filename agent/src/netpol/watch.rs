//! One watcher per kind: list, replace that kind in the store, then watch from the list's
//! resourceVersion (with bookmarks), applying each event; list again on 410 Gone, resume a broken
//! watch from the last resourceVersion seen, and back off with the agent's retry policy on errors.
//!
//! Invariants: the store only changes by a list or an event; an API server that is down leaves
//! the store (and so the table) as it is; an event or a relist that changes nothing the compiler
//! reads (a Pod's status conditions, a resourceVersion, the same list again after a 410) leaves
//! [`Store::generation`] as it is, so it costs no compile and no nft transaction; a NetworkPolicy
//! that cannot be read whole fails closed (`model::read_policy`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;
use tern_kube::client::objects::{key_of, resource_version_of, ObjectEvent};
use tern_kube::KubeError;
use tern_netpol::model::{namespace_from_json, pod_from_json, read_policy, PolicyRead};
use tracing::{debug, error, info, warn};

use super::store::{Kind, Shared, Store, Unreadable};
use crate::mint::in_cluster_client;
use crate::schedule::Rng;

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
        !self.changed && (self.read || kind == Kind::Policies)
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
fn set_policy(store: &mut Store, key: &str, obj: Option<&Value>) -> Put {
    let (policy, unreadable) = match obj.map(read_policy) {
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
        changed: store.engine.set_policy(key, policy.map(Arc::new)),
        read,
    }
}

/// Puts one object into the store (`None`: removes it) without touching the generation. A Pod
/// or Namespace that does not parse leaves the store as it was.
fn set(store: &mut Store, kind: Kind, key: &str, obj: Option<&Value>) -> Put {
    let unread = Put {
        changed: false,
        read: false,
    };
    match kind {
        Kind::Pods => match obj.map(pod_from_json).transpose() {
            Ok(p) => Put {
                changed: store.put_pod(key, p),
                read: true,
            },
            Err(_) => unread,
        },
        Kind::Namespaces => match obj.map(namespace_from_json).transpose() {
            Ok(n) => Put {
                changed: store.engine.set_namespace(key, n.as_ref()),
                read: true,
            },
            Err(_) => unread,
        },
        Kind::Policies => set_policy(store, key, obj),
    }
}

/// Puts one object into the store (`None`: removes it), bumping the generation only when
/// something the compiler reads changed.
pub(super) fn put(store: &mut Store, kind: Kind, key: String, obj: Option<&Value>) -> Put {
    let p = set(store, kind, &key, obj);
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

/// Deletes every object of `kind` not in `keep`; true when one was.
fn keep_only(store: &mut Store, kind: Kind, keep: &BTreeSet<String>) -> bool {
    let e = &store.engine;
    let gone: Vec<String> = match kind {
        Kind::Pods => e
            .pod_keys()
            .filter(|k| !keep.contains(*k))
            .cloned()
            .collect(),
        Kind::Namespaces => e
            .namespace_names()
            .filter(|k| !keep.contains(*k))
            .cloned()
            .collect(),
        Kind::Policies => e
            .policy_keys()
            .filter(|k| !keep.contains(*k))
            .cloned()
            .collect(),
    };
    let mut changed = false;
    for key in gone {
        changed |= set(store, kind, &key, None).changed;
    }
    changed
}

/// Replaces every object of `kind` with a fresh list; the generation moves only when the
/// kind's objects differ from before, or it had not been listed yet.
pub(super) fn replace(store: &mut Store, kind: Kind, items: &[Value]) -> Relist {
    let mut r = Relist {
        changed: !store.is_listed(kind),
        ..Relist::default()
    };
    let mut keep = BTreeSet::new();
    for v in items {
        let key = key_of(v);
        let p = set(store, kind, &key, Some(v));
        r.changed |= p.changed;
        r.unread += u64::from(!p.read);
        // A list replaces: a Pod or Namespace that does not parse is dropped (a watch event
        // keeps its old version); a policy is whatever `set_policy` made of it.
        r.unchanged += u64::from(p.unchanged(kind));
        if p.read || kind == Kind::Policies {
            keep.insert(key);
        }
    }
    r.changed |= keep_only(store, kind, &keep);
    if kind == Kind::Policies {
        let gone: Vec<String> = store
            .unreadable
            .keys()
            .filter(|k| !keep.contains(*k))
            .cloned()
            .collect();
        for key in gone {
            note_unreadable(store, &key, None);
        }
    }
    if r.changed {
        store.mark_listed(kind);
    }
    r
}

struct Loop<'a> {
    s: &'a Shared,
    kind: Kind,
    rv: Option<String>,
    failures: u32,
    rng: Rng,
}

impl Loop<'_> {
    fn failed(&mut self, what: &str, e: &KubeError) -> bool {
        let delay = self.s.run.api_failure(
            &mut self.failures,
            &mut self.s.stats().api_errors,
            e,
            &mut self.rng,
        );
        warn!(kind = self.kind.label(), error = %e, retry_in = ?delay, "network policy: {what} failed; the table is unchanged");
        self.s.stop.sleep(delay)
    }

    /// Counts objects that changed nothing and objects not read whole; `unreadable`: the
    /// policies not read whole now (the NetworkPolicy watcher's).
    fn count(&self, unchanged: u64, unread: u64, unreadable: Option<BTreeMap<&'static str, u64>>) {
        let mut st = self.s.stats();
        let kind = self.kind.label();
        if unchanged > 0 {
            *st.events_unchanged.entry(kind).or_insert(0) += unchanged;
        }
        if unread > 0 {
            *st.decode_errors.entry(kind).or_insert(0) += unread;
        }
        if let Some(u) = unreadable {
            st.unreadable_policies = u;
        }
    }

    /// The store's unreadable policies, when this is the NetworkPolicy watcher.
    fn unreadable(&self, st: &Store) -> Option<BTreeMap<&'static str, u64>> {
        (self.kind == Kind::Policies).then(|| st.unreadable_counts())
    }

    /// Applies one watch event (`None`: a delete).
    fn event(&self, key: String, obj: Option<&Value>) {
        let (p, unreadable) = {
            let mut st = self.s.store();
            let p = put(&mut st, self.kind, key, obj);
            (p, self.unreadable(&st))
        };
        self.s.notify();
        self.count(
            u64::from(p.unchanged(self.kind)),
            u64::from(!p.read),
            unreadable,
        );
    }

    fn list(&mut self, client: &tern_kube::Client) -> Result<(), KubeError> {
        let list = client.list_objects(self.kind.collection(), self.s.run.api.request_timeout)?;
        info!(kind = self.kind.label(), items = list.items.len(), resource_version = %list.resource_version, "network policy: listed");
        let (r, unreadable) = {
            let mut st = self.s.store();
            let r = replace(&mut st, self.kind, &list.items);
            (r, self.unreadable(&st))
        };
        self.s.notify();
        debug!(
            kind = self.kind.label(),
            unchanged = r.unchanged,
            changed = r.changed,
            "network policy: list applied"
        );
        self.count(r.unchanged, r.unread, unreadable);
        self.rv = Some(list.resource_version);
        Ok(())
    }

    fn watch(&mut self, client: &tern_kube::Client, rv: &str) -> Result<(), KubeError> {
        let cfg = &self.s.cfg;
        let mut w = client.watch_objects(
            self.kind.collection(),
            rv,
            cfg.watch_timeout.as_secs().max(1),
            self.s.run.api.request_timeout,
            cfg.watch_idle,
        )?;
        debug!(
            kind = self.kind.label(),
            resource_version = rv,
            "network policy: watching"
        );
        while !self.s.stop.is_stopped() {
            let Some(event) = w.next_event()? else {
                return Ok(());
            };
            self.failures = 0;
            match event {
                ObjectEvent::Applied(v) => {
                    self.rv = Some(resource_version_of(&v));
                    self.event(key_of(&v), Some(&v));
                }
                ObjectEvent::Deleted(v) => {
                    self.rv = Some(resource_version_of(&v));
                    self.event(key_of(&v), None);
                }
                ObjectEvent::Bookmark(rv) => self.rv = Some(rv),
                ObjectEvent::Gone => {
                    info!(
                        kind = self.kind.label(),
                        "network policy: resourceVersion too old (410 Gone); listing again"
                    );
                    self.rv = None;
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// A watcher thread: runs until the controller stops.
pub(super) fn run(s: &Shared, kind: Kind) {
    let mut l = Loop {
        s,
        kind,
        rv: None,
        failures: 0,
        rng: Rng::from_entropy(),
    };
    while !s.stop.is_stopped() {
        // Credentials are re-read per connection: the kubelet rotates the agent's token.
        let client = match in_cluster_client(&s.run.api) {
            Ok((c, _)) => c,
            Err(e) => {
                if l.failed("reading the agent's credentials", &e) {
                    return;
                }
                continue;
            }
        };
        let result = match l.rv.clone() {
            None => l.list(&client),
            Some(rv) => l.watch(&client, &rv),
        };
        match result {
            Ok(()) => l.failures = 0,
            Err(KubeError::UnexpectedStatus { code: 410, .. }) => l.rv = None,
            Err(e) => {
                let what = if l.rv.is_none() {
                    "listing"
                } else {
                    "watching"
                };
                if l.failed(what, &e) {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

//! The one list-and-watch loop of the agent, for any kind: list page by page into the kind's
//! slim type (each page dropped once read), replace the store, then watch from the list's
//! resourceVersion with bookmarks, applying each event; resume a broken watch from the last
//! resourceVersion seen (an event's or a bookmark's), list again on 410 Gone (an HTTP status or
//! an `ERROR` event), back off by the caller's retry policy on errors, and connect afresh (reading
//! credentials again) for every list and watch.
//!
//! Invariants: a list happens at start and after a 410 only, so a flaky connection causes no
//! relist storm across a fleet; the store changes only by a list or an event; an event or listed
//! object whose slim value equals the stored one reaches no consumer (it is counted as
//! unchanged); consumers see the first list even when empty, and a later list only when it
//! changed something, as the changes it made; an API server that is down leaves the store as it
//! is.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tern_kube::client::objects::{key_of, resource_version_of, ObjectEvent};
use tern_kube::KubeError;
use tracing::{debug, info, warn};

use crate::kinds::Kind;
use crate::source::{Api, Connect};
use crate::store::{Change, Store};

/// What a list did to the store.
#[derive(Debug)]
pub struct Relisted<T> {
    /// The kind's first list since start (delivered even when it changed nothing).
    pub first: bool,
    /// The changes it made, in key order.
    pub changes: Vec<Change<T>>,
    /// Listed objects whose slim value was the stored one.
    pub unchanged: u64,
    /// Listed objects not of the kind's shape (left out of the store).
    pub undecodable: u64,
}

/// A subscriber to one kind's store, called on the reflector's thread, in subscription order,
/// with the store as it is after the change.
pub trait Consumer<T>: Send {
    /// A list replaced the store: the first one, or a later one that changed something.
    fn replaced(&mut self, store: &Store<T>, relist: &Relisted<T>);

    /// A watch event changed one object.
    fn changed(&mut self, store: &Store<T>, change: &Change<T>);

    /// Events, or a list that changed nothing, that reached no consumer otherwise: `unchanged`
    /// (their slim value was the stored one, or a delete of what the store did not hold) and
    /// `undecodable` (not of the kind's shape; an event leaves the stored version, a list drops
    /// the key). A list delivered by [`Consumer::replaced`] carries its own counts instead.
    fn skipped(&mut self, _unchanged: u64, _undecodable: u64) {}

    /// A watch ended at its `timeoutSeconds` with nothing lost: a moment to repair drift.
    fn renewed(&mut self, _store: &Store<T>) {}
}

/// The caller's retry policy and stop flag.
pub trait Control {
    /// True once the caller stops the reflector.
    fn is_stopped(&self) -> bool;

    /// Counts the failure `e` (`failures`: failures in a row, incremented here) and returns how
    /// long to wait before the next attempt.
    fn delay(&mut self, failures: &mut u32, e: &KubeError) -> Duration;

    /// Sleeps up to `d`, less when stopping; true when stopping.
    fn sleep(&self, d: Duration) -> bool;

    /// What stays as it was while the API fails, for the warning (`routes unchanged`).
    fn unchanged(&self) -> &str {
        "the store is unchanged"
    }
}

/// What one reflector counted since start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchStats {
    /// Lists made (start, 410).
    pub lists: u64,
    /// Watches opened.
    pub watches: u64,
    /// Watch events by type: `applied` (ADDED, MODIFIED), `deleted`, `bookmark`, `gone`.
    pub events: BTreeMap<&'static str, u64>,
    /// Events and listed objects whose slim value changed nothing (dropped).
    pub unchanged: u64,
    /// Events and listed objects not of the kind's shape.
    pub undecodable: u64,
    /// Objects in the store.
    pub objects: u64,
    /// Whether the first list is in the store.
    pub synced: bool,
}

/// One kind's reflector: its store, where the watch resumes, its subscribers.
pub struct Reflector<T> {
    kind: Kind<T>,
    store: Store<T>,
    rv: Option<String>,
    failures: u32,
    listed: bool,
    consumers: Vec<Box<dyn Consumer<T>>>,
    stats: Arc<Mutex<WatchStats>>,
}

fn is_gone(e: &KubeError) -> bool {
    matches!(e, KubeError::UnexpectedStatus { code: 410, .. })
}

impl<T: PartialEq + Send + Sync> Reflector<T> {
    /// A reflector of `kind` delivering to `consumers`, in that order.
    pub fn new(kind: Kind<T>, consumers: Vec<Box<dyn Consumer<T>>>) -> Reflector<T> {
        Reflector {
            kind,
            store: Store::default(),
            rv: None,
            failures: 0,
            listed: false,
            consumers,
            stats: Arc::default(),
        }
    }

    /// The same reflector counting into `stats` (made before the reflector's thread, for the
    /// metrics endpoint).
    #[must_use]
    pub fn sharing_stats(mut self, stats: Arc<Mutex<WatchStats>>) -> Reflector<T> {
        self.stats = stats;
        self
    }

    /// Its counters, shared (for a metrics endpoint).
    pub fn stats(&self) -> Arc<Mutex<WatchStats>> {
        Arc::clone(&self.stats)
    }

    fn count(&self) -> MutexGuard<'_, WatchStats> {
        self.stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn event_seen(&self, what: &'static str) {
        *self.count().events.entry(what).or_insert(0) += 1;
    }

    /// Counts what reached no consumer; `deliver`: tells the consumers too.
    fn skipped(&mut self, unchanged: u64, undecodable: u64, deliver: bool) {
        if unchanged + undecodable == 0 {
            return;
        }
        {
            let mut st = self.count();
            st.unchanged += unchanged;
            st.undecodable += undecodable;
        }
        if deliver {
            for c in &mut self.consumers {
                c.skipped(unchanged, undecodable);
            }
        }
    }

    /// Runs until `ctl` stops: connects, lists or watches, backs off on errors.
    pub fn run(&mut self, connect: &Connect, ctl: &mut dyn Control) {
        while !ctl.is_stopped() {
            let api = match connect() {
                Ok(api) => api,
                Err(e) => {
                    if self.failed(ctl, "reading the credentials for", &e) {
                        return;
                    }
                    continue;
                }
            };
            let result = match self.rv.clone() {
                None => self.list(&*api),
                Some(rv) => self.watch(&*api, &rv, &*ctl),
            };
            match result {
                Ok(()) => {}
                Err(e) if is_gone(&e) => {
                    self.event_seen("gone");
                    info!(
                        kind = self.kind.label,
                        "resourceVersion too old (410 Gone); listing again"
                    );
                    self.rv = None;
                }
                Err(e) => {
                    let what = if self.rv.is_none() {
                        "listing"
                    } else {
                        "watching"
                    };
                    if self.failed(ctl, what, &e) {
                        return;
                    }
                }
            }
        }
    }

    /// Counts an API failure and sleeps the caller's backoff; true when stopping.
    fn failed(&mut self, ctl: &mut dyn Control, what: &str, e: &KubeError) -> bool {
        let delay = ctl.delay(&mut self.failures, e);
        let (kind, unchanged) = (self.kind.label, ctl.unchanged());
        warn!(kind, error = %e, retry_in = ?delay, "{what} {kind} failed; {unchanged}");
        ctl.sleep(delay)
    }

    /// One full list, page by page, each page decoded into the slim type and dropped; an
    /// object equal to the stored one is kept as the stored one at once ([`Store::shared`]), so
    /// a relist holds one copy of what did not change, not two.
    fn list(&mut self, api: &dyn Api) -> Result<(), KubeError> {
        let mut items = Vec::new();
        let mut cont: Option<String> = None;
        let mut undecodable = 0;
        let rv = loop {
            let page = api.list_page(self.kind.collection, cont.as_deref())?;
            for v in &page.items {
                match (self.kind.decode)(v) {
                    Ok(t) => items.push(self.store.shared(&key_of(v), t)),
                    Err(e) => {
                        undecodable += 1;
                        debug!(kind = self.kind.label, object = %key_of(v), error = %e, "not of the kind's shape; left out of the list");
                    }
                }
            }
            match page.cont {
                Some(c) => cont = Some(c),
                None => break page.resource_version,
            }
        };
        let decoded = items.len() as u64;
        let changes = self.store.replace(items);
        let fresh = changes.iter().filter(|c| c.new.is_some()).count() as u64;
        let first = !self.listed;
        self.listed = true;
        self.failures = 0;
        info!(kind = self.kind.label, items = self.store.len(), changes = changes.len(), resource_version = %rv, "listed");
        {
            let mut st = self.count();
            st.lists += 1;
            st.objects = self.store.len() as u64;
            st.synced = true;
        }
        let unchanged = decoded.saturating_sub(fresh);
        let deliver = first || !changes.is_empty();
        self.skipped(unchanged, undecodable, !deliver);
        if deliver {
            let relist = Relisted {
                first,
                changes,
                unchanged,
                undecodable,
            };
            for c in &mut self.consumers {
                c.replaced(&self.store, &relist);
            }
        }
        self.rv = Some(rv);
        Ok(())
    }

    /// Applies one event's object (`None`: a delete of `key`).
    fn put(&mut self, key: &str, obj: Option<&Value>) {
        let new = match obj.map(self.kind.decode).transpose() {
            Ok(new) => new,
            Err(e) => {
                debug!(kind = self.kind.label, object = %key, error = %e, "not of the kind's shape; the stored version stays");
                return self.skipped(0, 1, true);
            }
        };
        let Some(change) = self.store.apply(key, new) else {
            return self.skipped(1, 0, true);
        };
        self.count().objects = self.store.len() as u64;
        for c in &mut self.consumers {
            c.changed(&self.store, &change);
        }
    }

    /// One watch from `rv` until it ends; the error that ended it, if any.
    fn watch(&mut self, api: &dyn Api, rv: &str, ctl: &dyn Control) -> Result<(), KubeError> {
        let mut w = api.watch(self.kind.collection, rv)?;
        self.count().watches += 1;
        debug!(kind = self.kind.label, resource_version = rv, "watching");
        while !ctl.is_stopped() {
            let Some(event) = w.next_event()? else {
                for c in &mut self.consumers {
                    c.renewed(&self.store);
                }
                return Ok(());
            };
            self.failures = 0;
            match event {
                ObjectEvent::Applied(v) => {
                    self.event_seen("applied");
                    self.rv = Some(resource_version_of(&v));
                    self.put(&key_of(&v), Some(&v));
                }
                ObjectEvent::Deleted(v) => {
                    self.event_seen("deleted");
                    self.rv = Some(resource_version_of(&v));
                    self.put(&key_of(&v), None);
                }
                ObjectEvent::Bookmark(rv) => {
                    self.event_seen("bookmark");
                    self.rv = Some(rv);
                }
                ObjectEvent::Gone => {
                    return Err(KubeError::UnexpectedStatus {
                        code: 410,
                        message: "resourceVersion too old (an ERROR event)".into(),
                    })
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

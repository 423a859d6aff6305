//! The route controller's loop: list Nodes, reconcile, then watch from the list's
//! resourceVersion (with bookmarks), reconciling after each change; renew the watch at its
//! timeout, list again on 410 Gone, and back off with the agent's retry policy on errors.
//!
//! Invariant: a list happens at start-up and after a 410 only; a broken watch resumes from the
//! last resourceVersion seen (an event's or a bookmark's), so a flaky connection causes no
//! re-list storm across a fleet.

use std::collections::BTreeMap;
use std::time::Duration;

use tern_kube::client::nodes::{NodeEntry, WatchEvent};
use tern_kube::KubeError;
use tern_net::netlink::Handle;
use tracing::{debug, info, warn};

use super::desired::{desired, Skipped};
use super::kernel;
use super::Shared;
use crate::mint::in_cluster_client;
use crate::schedule::{backoff_delay, Rng};

/// What the loop knows between API calls.
struct Loop<'a> {
    s: &'a Shared,
    h: Handle,
    nodes: BTreeMap<String, NodeEntry>,
    rv: Option<String>,
    failures: u32,
    rng: Rng,
    last_skipped: Vec<Skipped>,
}

fn is_gone(e: &KubeError) -> bool {
    matches!(e, KubeError::UnexpectedStatus { code: 410, .. })
}

impl Loop<'_> {
    /// Makes the kernel match the nodes known now, and records what was done.
    fn apply(&mut self) {
        if crate::uninstall::uninstalling(&self.s.run.kubeconfig) {
            debug!("node routes: tern-agent uninstall began; routes are no longer kept");
            return;
        }
        let connected = match kernel::connected(&self.h) {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "cannot read this node's addresses; routes unchanged");
                return;
            }
        };
        let want = desired(&self.s.cfg.node_name, self.nodes.values(), &connected);
        for sk in want
            .skipped
            .iter()
            .filter(|k| !self.last_skipped.contains(k))
        {
            warn!(node = %sk.node, pod_cidr = %sk.cidr, reason = sk.reason, "{}; not routed", sk.detail);
        }
        let done = match kernel::reconcile(&self.h, &want) {
            Ok(d) => d,
            Err(e) => {
                warn!(error = %e, "cannot read the routing table; routes unchanged");
                return;
            }
        };
        let mut st = self.s.stats();
        st.added += done.added;
        st.moved += done.moved;
        st.removed += done.removed;
        st.failed += done.failed;
        st.installed = done.installed;
        st.nodes = self.nodes.len() as u64;
        st.skipped.clear();
        for sk in &want.skipped {
            *st.skipped.entry(sk.reason).or_insert(0) += 1;
        }
        st.synced = true;
        self.last_skipped = want.skipped;
    }

    /// Counts an API failure and sleeps the agent's backoff; true when stopping.
    fn failed(&mut self, what: &str, e: &KubeError) -> bool {
        self.failures = self.failures.saturating_add(1);
        *self
            .s
            .stats()
            .api_errors
            .entry(e.cause_label())
            .or_insert(0) += 1;
        let delay = backoff_delay(
            &self.s.run.policy,
            self.failures,
            None,
            e.retry_after().map(Duration::from_secs),
            self.rng.unit(),
        );
        warn!(error = %e, retry_in = ?delay, "{what} failed; routes unchanged");
        self.s.sleep(delay)
    }

    fn list(&mut self, client: &tern_kube::Client) -> Result<(), KubeError> {
        let list = client.list_nodes(self.s.run.api.request_timeout)?;
        self.s.stats().lists += 1;
        info!(nodes = list.items.len(), resource_version = %list.resource_version, "listed nodes");
        self.nodes = list
            .items
            .into_iter()
            .map(|n| (n.name.clone(), n))
            .collect();
        self.rv = Some(list.resource_version);
        self.apply();
        Ok(())
    }

    fn count(&self, event: &'static str) {
        *self.s.stats().events.entry(event).or_insert(0) += 1;
    }

    /// One watch until it ends; returns the error that ended it, if any.
    fn watch(&mut self, client: &tern_kube::Client, rv: &str) -> Result<(), KubeError> {
        let cfg = &self.s.cfg;
        let mut w = client.watch_nodes(
            rv,
            cfg.watch_timeout.as_secs().max(1),
            self.s.run.api.request_timeout,
            cfg.watch_idle,
        )?;
        self.s.stats().watches += 1;
        debug!(resource_version = rv, "watching nodes");
        while !self.s.stop.is_stopped() {
            match w.next_event()? {
                None => {
                    // The server ended the watch at timeoutSeconds: also a moment to repair
                    // any drift in the kernel table.
                    self.apply();
                    return Ok(());
                }
                Some(WatchEvent::Applied(n, rv)) => {
                    self.failures = 0;
                    self.rv = Some(rv);
                    self.count("applied");
                    if self.nodes.get(&n.name) != Some(&n) {
                        self.nodes.insert(n.name.clone(), n);
                        self.apply();
                    }
                }
                Some(WatchEvent::Deleted(n, rv)) => {
                    self.failures = 0;
                    self.rv = Some(rv);
                    self.count("deleted");
                    if self.nodes.remove(&n.name).is_some() {
                        info!(node = %n.name, "node deleted");
                        self.apply();
                    }
                }
                Some(WatchEvent::Bookmark(rv)) => {
                    self.failures = 0;
                    self.count("bookmark");
                    self.rv = Some(rv);
                }
                Some(WatchEvent::Gone) => {
                    self.count("gone");
                    info!("resourceVersion too old (410 Gone); listing nodes again");
                    self.rv = None;
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// The controller thread: runs until `s.stop`.
pub(super) fn run(s: &Shared) {
    let h = match Handle::new() {
        Ok(h) => h,
        Err(e) => {
            warn!(error = %e, "node routes disabled: cannot open a netlink socket");
            return;
        }
    };
    let mut l = Loop {
        s,
        h,
        nodes: BTreeMap::new(),
        rv: None,
        failures: 0,
        rng: Rng::from_entropy(),
        last_skipped: Vec::new(),
    };
    info!(node = %s.cfg.node_name, protocol = super::TERN_PROTOCOL, "node routes: starting");
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
        let rv = match l.rv.clone() {
            Some(rv) => rv,
            None => {
                if let Err(e) = l.list(&client) {
                    if l.failed("listing nodes", &e) {
                        return;
                    }
                    continue;
                }
                l.failures = 0;
                continue;
            }
        };
        match l.watch(&client, &rv) {
            Ok(()) => {}
            Err(e) if is_gone(&e) => {
                l.count("gone");
                info!("resourceVersion too old (410 Gone); listing nodes again");
                l.rv = None;
            }
            Err(e) => {
                if l.failed("watching nodes", &e) {
                    return;
                }
            }
        }
    }
}

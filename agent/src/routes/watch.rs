//! The route controller's loop: list Nodes, reconcile, then watch from the list's
//! resourceVersion (with bookmarks), reconciling after each change; renew the watch at its
//! timeout, list again on 410 Gone, and back off with the agent's retry policy on errors.
//!
//! Invariant: a list happens at start-up and after a 410 only; a broken watch resumes from the
//! last resourceVersion seen (an event's or a bookmark's), so a flaky connection causes no
//! re-list storm across a fleet.

use std::collections::BTreeMap;

use tern_kube::client::nodes::{NodeEntry, WatchEvent};
use tern_kube::KubeError;
use tern_net::netlink::Handle;
use tracing::{debug, info, warn};

use super::desired::{self, desired, desired_vxlan, Skipped, VxlanDesired};
use super::{kernel, vxlan, Mode, Shared};
use crate::mint::in_cluster_client;
use crate::schedule::Rng;
use tern_kube::client::nodes::VTEP_MAC_ANNOTATION;
use tern_net::netlink::{format_mac, VxlanSpec};

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
    /// Makes the kernel match the nodes known now, and records what was done. `client`
    /// publishes this node's VTEP MAC (VXLAN) when its Node does not carry it yet.
    fn apply(&mut self, client: &tern_kube::Client) {
        if let (Some(cell), Some(me)) = (&self.s.own_cidrs, self.nodes.get(&self.s.cfg.node_name)) {
            cell.publish(&me.pod_cidrs);
        }
        if crate::uninstall::uninstalling(&self.s.run.kubeconfig) {
            debug!("node routes: tern-agent uninstall began; routes are no longer kept");
            return;
        }
        let (want, dev, peers, writes) = match self.s.cfg.mode {
            Mode::HostGw => {
                let connected = match kernel::connected(&self.h) {
                    Ok(c) => c,
                    Err(e) => {
                        warn!(error = %e, "cannot read this node's addresses; routes unchanged");
                        return;
                    }
                };
                let want = desired(&self.s.cfg.node_name, self.nodes.values(), &connected);
                (
                    VxlanDesired {
                        routes: want,
                        ..VxlanDesired::default()
                    },
                    None,
                    None,
                    0,
                )
            }
            Mode::Vxlan { vni, port } => match self.vxlan_device(client, vni, port) {
                Some((want, index, writes)) => {
                    let peers = want.peers.len() as u64;
                    (want, Some(index), Some(peers), writes)
                }
                None => return,
            },
        };
        self.warn_skipped(&want.routes.skipped);
        let done = match kernel::reconcile(&self.h, &want.routes, dev) {
            Ok(d) => d,
            Err(e) => {
                warn!(error = %e, "cannot read the routing table; routes unchanged");
                return;
            }
        };
        let mut after = vxlan::Written::default();
        match dev {
            Some(index) => match vxlan::remove_stale(&self.h, index, &want) {
                Ok(w) => after = w,
                Err(e) => warn!(error = %e, "cannot read the VXLAN device's entries"),
            },
            None => match vxlan::remove_device(&self.h) {
                Ok(true) => info!(
                    device = vxlan::DEVICE,
                    "removed the VXLAN device (host-gw now)"
                ),
                Ok(false) => {}
                Err(e) => warn!(error = %e, "cannot remove the VXLAN device"),
            },
        }
        let mut st = self.s.stats();
        st.added += done.added;
        st.moved += done.moved;
        st.removed += done.removed;
        st.failed += done.failed + after.failed;
        st.installed = done.installed;
        st.nodes = self.nodes.len() as u64;
        st.skipped.clear();
        for sk in &want.routes.skipped {
            *st.skipped.entry(sk.reason).or_insert(0) += 1;
        }
        if let Some(p) = peers {
            st.vxlan_peers = p;
        }
        st.vxlan_writes += writes + after.writes;
        st.synced = true;
        drop(st);
        self.last_skipped = want.routes.skipped;
    }

    fn warn_skipped(&self, skipped: &[Skipped]) {
        for sk in skipped.iter().filter(|k| !self.last_skipped.contains(k)) {
            warn!(node = %sk.node, pod_cidr = %sk.cidr, reason = sk.reason, "{}; not routed", sk.detail);
        }
    }

    /// VXLAN: this node's device made and published, the FDB and neighbour entries added.
    /// Returns the desired data path, the device's index and the entries written; `None` (all
    /// left as it is) when this node's VTEP is unknown or the device cannot be made.
    fn vxlan_device(
        &mut self,
        client: &tern_kube::Client,
        vni: u32,
        port: u16,
    ) -> Option<(VxlanDesired, u32, u64)> {
        let me = &self.s.cfg.node_name;
        let Some(vtep) = desired::vtep(me, self.nodes.values()) else {
            warn!(node = %me, "this node has no Node object with an InternalIP yet; VXLAN waits for it");
            return None;
        };
        let mtu = match vxlan::underlay_mtu(&self.h, vtep.local) {
            Ok(m) => m.saturating_sub(vxlan::overhead(vtep.local)),
            Err(e) => {
                warn!(error = %e, "cannot read this node's links; VXLAN unchanged");
                return None;
            }
        };
        let spec = VxlanSpec {
            name: vxlan::DEVICE.to_owned(),
            vni,
            port,
            local: vtep.local,
            mtu,
        };
        let link = match vxlan::ensure_device(&self.h, &spec, &vtep) {
            Ok(l) => l,
            Err(e) => {
                self.s.stats().failed += 1;
                warn!(error = %e, "cannot set up the VXLAN device; routes unchanged");
                return None;
            }
        };
        if let Some(mac) = link.mac {
            let mac = format_mac(&mac);
            let published = self.nodes.get(me).and_then(|n| n.vtep_mac.as_deref());
            if published != Some(mac.as_str()) {
                match client.annotate_node(
                    me,
                    VTEP_MAC_ANNOTATION,
                    &mac,
                    self.s.run.api.request_timeout,
                ) {
                    Ok(()) => {
                        self.s.stats().vxlan_published += 1;
                        info!(node = %me, vtep_mac = %mac, "published this node's VTEP MAC");
                        if let Some(n) = self.nodes.get_mut(me) {
                            n.vtep_mac = Some(mac);
                        }
                    }
                    Err(e) => {
                        *self
                            .s
                            .stats()
                            .api_errors
                            .entry(e.cause_label())
                            .or_insert(0) += 1;
                        warn!(error = %e, "cannot publish this node's VTEP MAC (needs patch nodes/status); other nodes cannot reach this one's pods until it is");
                    }
                }
            }
        }
        let want = desired_vxlan(me, self.nodes.values(), vtep.local.is_ipv4());
        let writes = match vxlan::add_entries(&self.h, link.index, &want) {
            Ok(w) => {
                self.s.stats().failed += w.failed;
                w.writes
            }
            Err(e) => {
                warn!(error = %e, "cannot read the VXLAN device's entries; routes unchanged");
                return None;
            }
        };
        Some((want, link.index, writes))
    }

    /// Counts an API failure and sleeps the agent's backoff; true when stopping.
    fn failed(&mut self, what: &str, e: &KubeError) -> bool {
        let delay = self.s.run.api_failure(
            &mut self.failures,
            &mut self.s.stats().api_errors,
            e,
            &mut self.rng,
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
        self.apply(client);
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
                    self.apply(client);
                    return Ok(());
                }
                Some(WatchEvent::Applied(n, rv)) => {
                    self.failures = 0;
                    self.rv = Some(rv);
                    self.count("applied");
                    if self.nodes.get(&n.name) != Some(&n) {
                        self.nodes.insert(n.name.clone(), n);
                        self.apply(client);
                    }
                }
                Some(WatchEvent::Deleted(n, rv)) => {
                    self.failures = 0;
                    self.rv = Some(rv);
                    self.count("deleted");
                    if self.nodes.remove(&n.name).is_some() {
                        info!(node = %n.name, "node deleted");
                        self.apply(client);
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

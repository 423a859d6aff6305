//! The route controller on the watch layer: one Node reflector (`tern-watch`) whose subscribers
//! are this node's podCIDR publisher (`crate::node_cidrs`) and [`Routes`], which makes the kernel
//! match the Nodes after the first list, after each change, and at each watch renewal (a moment
//! to repair drift), through the [`DataPath`] chosen at start.
//!
//! Invariant: nothing but a Node's change or disappearance removes a route; an API server that is
//! down or a watch that breaks leaves the routes as they are (the reflector's store stays).

use std::sync::Arc;

use tern_kube::client::nodes::NodeEntry;
use tern_net::netlink::Handle;
use tern_watch::{Change, Consumer, Reflector, Relisted, Store};
use tracing::{debug, info, warn};

use super::datapath::{DataPath, Written};
use super::desired::Skipped;
use super::{kernel, Shared};
use crate::node_cidrs::PublishOwn;
use crate::watch::run_reflector;

/// Keeps this node's routes for the Nodes in the store.
pub(super) struct Routes {
    s: Arc<Shared>,
    h: Handle,
    path: Box<dyn DataPath>,
    last_skipped: Vec<Skipped>,
}

impl Routes {
    /// Makes the kernel match the nodes known now, and records what was done.
    fn apply(&mut self, nodes: &Store<NodeEntry>) {
        if crate::uninstall::uninstalling(&self.s.run.kubeconfig) {
            debug!("node routes: tern-agent uninstall began; routes are no longer kept");
            return;
        }
        let Some(want) = self.path.prepare(&self.s, &self.h, nodes) else {
            return;
        };
        self.warn_skipped(&want.routes.skipped);
        let done = match kernel::reconcile(&self.h, &want.routes, want.dev) {
            Ok(d) => d,
            Err(e) => {
                warn!(error = %e, "cannot read the routing table; routes unchanged");
                return;
            }
        };
        let after: Written = self.path.finish(&self.h);
        let mut st = self.s.stats();
        st.added += done.added;
        st.moved += done.moved;
        st.removed += done.removed;
        st.failed += done.failed + after.failed;
        st.installed = done.installed;
        st.nodes = nodes.len() as u64;
        st.skipped.clear();
        for sk in &want.routes.skipped {
            *st.skipped.entry(sk.reason).or_insert(0) += 1;
        }
        if let Some(p) = want.peers {
            st.vxlan_peers = p;
        }
        st.vxlan_writes += want.writes + after.writes;
        st.synced = true;
        drop(st);
        self.last_skipped = want.routes.skipped;
    }

    fn warn_skipped(&self, skipped: &[Skipped]) {
        for sk in skipped.iter().filter(|k| !self.last_skipped.contains(k)) {
            warn!(node = %sk.node, pod_cidr = %sk.cidr, reason = sk.reason, "{}; not routed", sk.detail);
        }
    }
}

impl Consumer<NodeEntry> for Routes {
    fn replaced(&mut self, nodes: &Store<NodeEntry>, _: &Relisted<NodeEntry>) {
        self.apply(nodes);
    }

    fn changed(&mut self, nodes: &Store<NodeEntry>, change: &Change<NodeEntry>) {
        if *change.key == *self.s.cfg.node_name {
            self.path.own_node_changed();
        }
        if change.new.is_none() {
            info!(node = %change.key, "node deleted");
        }
        self.apply(nodes);
    }

    fn renewed(&mut self, nodes: &Store<NodeEntry>) {
        self.apply(nodes);
    }
}

/// The controller thread: runs until `s.stop`.
pub(super) fn run(s: &Arc<Shared>) {
    let h = match Handle::new() {
        Ok(h) => h,
        Err(e) => {
            warn!(error = %e, "node routes disabled: cannot open a netlink socket");
            return;
        }
    };
    info!(node = %s.cfg.node_name, protocol = super::TERN_PROTOCOL, "node routes: starting");
    let mut consumers: Vec<Box<dyn Consumer<NodeEntry>>> = Vec::new();
    if let Some(cells) = &s.own_cidrs {
        consumers.push(Box::new(PublishOwn {
            node_name: s.cfg.node_name.clone(),
            cells: Arc::clone(cells),
        }));
    }
    consumers.push(Box::new(Routes {
        s: Arc::clone(s),
        h,
        path: super::data_path(s.cfg.mode),
        last_skipped: Vec::new(),
    }));
    let reflector =
        Reflector::new(tern_watch::kinds::NODES, consumers).sharing_stats(Arc::clone(&s.watch));
    run_reflector(
        reflector,
        &s.run,
        &s.stop,
        (s.cfg.watch_timeout, s.cfg.watch_idle),
        Box::new(|cause| *s.stats().api_errors.entry(cause).or_insert(0) += 1),
        "routes unchanged",
    );
}

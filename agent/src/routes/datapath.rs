//! The seam between the route controller and how packets reach other nodes' pods: one
//! [`DataPath`] per `--node-routes` mode (`host_gw.rs`, `vxlan.rs`), chosen once at start
//! (`super::data_path`); the controller (`consumer.rs`) reconciles the routes each one prepares
//! in the same way, and never asks which mode it runs.
//!
//! Invariant: a new mode is one new file implementing [`DataPath`] and one line in
//! `super::data_path`.

use tern_kube::client::nodes::NodeEntry;
use tern_net::netlink::Handle;
use tern_watch::Store;

use super::desired::Desired;
use super::Shared;

/// What a data path prepared for one reconcile: the routes, and the device they go through.
#[derive(Debug, Clone, Default)]
pub(crate) struct Prepared {
    /// The routes to install, and the podCIDRs left unrouted.
    pub(crate) routes: Desired,
    /// The device every route goes through (`None`: the kernel picks the uplink from the
    /// gateway).
    pub(crate) dev: Option<u32>,
    /// Other nodes with a forwarding-database entry (VXLAN), for the metric.
    pub(crate) peers: Option<u64>,
    /// Entries written while preparing.
    pub(crate) writes: u64,
}

/// What one pass did to a data path's entries (neighbours, FDB).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Entries written or removed.
    pub writes: u64,
    /// Operations the kernel refused (each logged).
    pub failed: u64,
}

/// One way of reaching other nodes' pods.
pub(crate) trait DataPath: Send {
    /// Sets up what the routes need for `nodes` (a device, its entries) and returns the routes;
    /// `None` leaves the kernel as it is (the reason is logged).
    fn prepare(&mut self, s: &Shared, h: &Handle, nodes: &Store<NodeEntry>) -> Option<Prepared>;

    /// After the routes are reconciled: removes what no route uses any more.
    fn finish(&mut self, h: &Handle) -> Written;

    /// This node's Node changed in the API (what the data path published may differ now).
    fn own_node_changed(&mut self) {}
}

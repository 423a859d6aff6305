//! `--node-routes=host-gw`: a route per other node's podCIDR via that node's InternalIP, the
//! nodes on one L2 segment; a VXLAN device left from an earlier `vxlan` run is removed.
//!
//! Invariant: a podCIDR whose node's InternalIP is not on a directly connected network gets no
//! route (`desired::desired`), never one through a guess.

use tern_kube::client::nodes::NodeEntry;
use tern_net::netlink::Handle;
use tern_watch::Store;
use tracing::{info, warn};

use super::datapath::{DataPath, Prepared, Written};
use super::desired::desired;
use super::vxlan;
use super::{kernel, Shared};

/// The host-gw data path (it keeps nothing between passes).
#[derive(Debug, Default)]
pub(crate) struct HostGw;

impl DataPath for HostGw {
    fn prepare(&mut self, s: &Shared, h: &Handle, nodes: &Store<NodeEntry>) -> Option<Prepared> {
        let connected = match kernel::connected(h) {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "cannot read this node's addresses; routes unchanged");
                return None;
            }
        };
        Some(Prepared {
            routes: desired(&s.cfg.node_name, nodes.values(), &connected),
            ..Prepared::default()
        })
    }

    fn finish(&mut self, h: &Handle) -> Written {
        match vxlan::remove_device(h) {
            Ok(true) => info!(
                device = vxlan::DEVICE,
                "removed the VXLAN device (host-gw now)"
            ),
            Ok(false) => {}
            Err(e) => warn!(error = %e, "cannot remove the VXLAN device"),
        }
        Written::default()
    }
}

//! What tern put in the node's kernel, removed: the node routes and the VXLAN device (netlink),
//! the egress NAT and NetworkPolicy tables (nft). Each removal is idempotent.

use crate::netlink::{Family, Handle};
use crate::nft::{Nft, NftError};

use super::{
    EGRESS_NAT_FAMILY, EGRESS_NAT_TABLE, NETWORK_POLICY_FAMILY, NETWORK_POLICY_TABLE,
    NODE_ROUTE_PROTOCOL, VXLAN_DEVICE,
};

/// Removes every route with [`NODE_ROUTE_PROTOCOL`] from the main table, both families, then
/// the VXLAN device [`VXLAN_DEVICE`] when there is one; a route that vanished meanwhile counts
/// as removed. Returns how many routes were removed.
///
/// # Errors
/// A dump, or the first refused deletion (every route, and the device, is still tried).
pub fn remove_node_routes(h: &Handle) -> crate::Result<u64> {
    let mut removed = 0;
    let mut first = None;
    let removed_routes = remove_routes(h, &mut first)?;
    removed += removed_routes;
    match h.delete_link_by_name(VXLAN_DEVICE) {
        Ok(true) => tracing::info!(device = VXLAN_DEVICE, "VXLAN device removed"),
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(device = VXLAN_DEVICE, error = %e, "cannot remove the VXLAN device");
            first.get_or_insert(e);
        }
    }
    match first {
        Some(e) => Err(e),
        None => Ok(removed),
    }
}

fn remove_routes(h: &Handle, first: &mut Option<crate::Error>) -> crate::Result<u64> {
    let mut removed = 0;
    for family in [Family::V4, Family::V6] {
        for r in h.routes(family)? {
            if r.protocol != Some(NODE_ROUTE_PROTOCOL) {
                continue;
            }
            match h.del_route(&r) {
                Ok(()) => removed += 1,
                Err(e)
                    if h.routes(family).is_ok_and(|now| {
                        !now.iter()
                            .any(|n| n.dst == r.dst && n.protocol == Some(NODE_ROUTE_PROTOCOL))
                    }) =>
                {
                    tracing::debug!(dst = %r.dst, error = %e, "route already gone");
                }
                Err(e) => {
                    tracing::warn!(dst = %r.dst, error = %e, "cannot remove a route of tern's");
                    first.get_or_insert(e);
                }
            }
        }
    }
    Ok(removed)
}

/// Removes the egress NAT table when it exists (`add table` + `delete table`: one transaction
/// that cannot fail on an absent table).
///
/// # Errors
/// nft failed, or there is no `nft` tool here ([`NftError::NotFound`]: tern-agent's image brings
/// one, a node may not; the table may then be left, and the mark stays for a finish by hand).
pub fn remove_egress_nat() -> Result<(), NftError> {
    Nft::find()?.apply(&format!(
        "add table {EGRESS_NAT_FAMILY} {EGRESS_NAT_TABLE}\ndelete table {EGRESS_NAT_FAMILY} {EGRESS_NAT_TABLE}\n"
    ))
}

/// Removes the NetworkPolicy table when it exists (one transaction, as [`remove_egress_nat`]).
/// Its pods are gone by then (the finish runs after the last DEL): nothing is opened to anyone.
///
/// # Errors
/// As [`remove_egress_nat`].
pub fn remove_network_policy() -> Result<(), NftError> {
    Nft::find()?.apply(&format!(
        "add table {NETWORK_POLICY_FAMILY} {NETWORK_POLICY_TABLE}\ndelete table {NETWORK_POLICY_FAMILY} {NETWORK_POLICY_TABLE}\n"
    ))
}

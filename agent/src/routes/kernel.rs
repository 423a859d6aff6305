//! The kernel side of the route controller over `tern-net`'s rtnetlink handle: this node's
//! directly connected networks, the routes tern installed (found by [`TERN_PROTOCOL`]), and one
//! reconcile pass that makes the main table match the desired routes.
//!
//! Invariant: only routes whose `rtm_protocol` is [`TERN_PROTOCOL`] are ever replaced or
//! removed; a destination some other owner already routes is left alone and reported.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use tern_net::netlink::{Family, Handle, KernelRoute};

use super::desired::Desired;

/// tern's routing protocol number (`rtm_protocol`), shared with the drain's finish.
pub use tern_net::drain::NODE_ROUTE_PROTOCOL as TERN_PROTOCOL;

/// What one reconcile pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Routes added.
    pub added: u64,
    /// Routes whose gateway changed (replaced in place).
    pub moved: u64,
    /// Stale routes of tern's removed.
    pub removed: u64,
    /// Operations the kernel refused (each logged).
    pub failed: u64,
    /// Routes of tern's in the table after the pass.
    pub installed: u64,
}

/// The networks of this node's own addresses (every link but loopback; host routes left out).
///
/// # Errors
/// The link or address dump failed.
pub fn connected(h: &Handle) -> tern_net::Result<Vec<IpNetwork>> {
    let mut out = Vec::new();
    for link in h.links()? {
        if link.name == "lo" {
            continue;
        }
        for a in h.addresses(link.index)? {
            let full = if a.addr.is_ipv4() { 32 } else { 128 };
            if a.addr.prefix() < full {
                out.push(a.addr);
            }
        }
    }
    Ok(out)
}

/// One of tern's routes as the kernel has it: its gateway and output link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hop {
    /// `RTA_GATEWAY`.
    pub gateway: Option<IpAddr>,
    /// `RTA_OIF`.
    pub oif: Option<u32>,
}

/// tern's routes in the main table: destination → next hop.
///
/// # Errors
/// A route dump failed.
pub fn installed(h: &Handle) -> tern_net::Result<BTreeMap<IpNetwork, Hop>> {
    let mut out = BTreeMap::new();
    for family in [Family::V4, Family::V6] {
        for r in h.routes(family)? {
            if r.protocol == Some(TERN_PROTOCOL) {
                out.insert(
                    r.dst,
                    Hop {
                        gateway: r.gateway,
                        oif: r.oif,
                    },
                );
            }
        }
    }
    Ok(out)
}

/// A route of tern's; with `dev`, through that link with an onlink gateway (VXLAN: the gateway
/// is the remote podCIDR's network address, which no address of this node covers).
fn route(dst: IpNetwork, gw: Option<IpAddr>, dev: Option<u32>) -> KernelRoute {
    let mut r = KernelRoute::new(dst);
    r.gateway = gw;
    r.protocol = Some(TERN_PROTOCOL);
    r.oif = dev;
    r.onlink = dev.is_some();
    r
}

/// Makes tern's routes equal `want`: adds what is missing, replaces a route whose gateway (or,
/// with `dev`, output link) changed, removes tern's routes nothing wants. `dev` is the VXLAN
/// device every route goes through, `None` for host-gw (the kernel picks the uplink from the
/// gateway). Keeps going past a failure.
///
/// # Errors
/// Only the dumps; a refused add or delete is logged and counted in [`Applied::failed`].
pub fn reconcile(h: &Handle, want: &Desired, dev: Option<u32>) -> tern_net::Result<Applied> {
    let have = installed(h)?;
    let mut done = Applied::default();
    for (dst, hop) in &have {
        if !want.routes.contains_key(dst) {
            match h.del_route(&route(*dst, hop.gateway, None)) {
                Ok(()) => {
                    tracing::info!(%dst, "removed the route of a node that is gone or moved");
                    done.removed += 1;
                }
                Err(e) => {
                    tracing::warn!(%dst, error = %e, "cannot remove a stale route");
                    done.failed += 1;
                }
            }
        }
    }
    for (dst, (gw, node)) in &want.routes {
        let result = match have.get(dst) {
            Some(hop) if hop.gateway == Some(*gw) && (dev.is_none() || hop.oif == dev) => continue,
            // Ours, with another next hop: replaced in place, never a gap.
            Some(_) => h.replace_route(&route(*dst, Some(*gw), dev)).map(|()| {
                done.moved += 1;
                tracing::info!(%dst, via = %gw, node, "moved the route to a node's podCIDR");
            }),
            // Not ours (or none): exclusive add, so another owner's route is never replaced.
            None => h.add_route(&route(*dst, Some(*gw), dev)).map(|()| {
                done.added += 1;
                tracing::info!(%dst, via = %gw, node, "added the route to a node's podCIDR");
            }),
        };
        if let Err(e) = result {
            let hint = if matches!(&e, tern_net::Error::Netlink { errno, .. } if *errno == libc_eexist())
            {
                "; another route to it exists (not tern's): left alone"
            } else {
                ""
            };
            tracing::warn!(%dst, via = %gw, node, error = %e, "cannot route a node's podCIDR{hint}");
            done.failed += 1;
        }
    }
    done.installed = installed(h)?.len() as u64;
    Ok(done)
}

/// `EEXIST` without a libc dependency in this crate.
fn libc_eexist() -> i32 {
    nix::errno::Errno::EEXIST as i32
}

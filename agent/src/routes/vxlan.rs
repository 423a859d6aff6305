//! The kernel side of `--node-routes=vxlan`: tern's VXLAN device (made, checked, its MTU and
//! addresses kept), and the neighbour and FDB entries on it that steer each other node's
//! podCIDRs to that node's VTEP.
//!
//! Invariants: everything on the device [`DEVICE`] is tern's (its name is the ownership mark, as
//! the routing protocol is for routes), so an entry no node wants is removed and nothing off the
//! device is ever touched. Entries are added before the routes that use them and removed after
//! (the caller's order), so a route never points at a next hop with no MAC or no VTEP.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use tern_kube::client::nodes::{NodeEntry, VTEP_MAC_ANNOTATION};
use tern_net::netlink::format_mac;
use tern_net::netlink::{FdbEntry, Handle, Link, Neighbour, VxlanSpec};
use tern_watch::Store;
use tracing::{info, warn};

use super::datapath::{DataPath, Prepared};
use super::desired::{self, desired_vxlan, Vtep, VxlanDesired};
use super::Shared;

/// The name of tern's VXLAN device, shared with the drain's finish (which deletes it).
pub use tern_net::drain::VXLAN_DEVICE as DEVICE;

/// The bytes VXLAN adds to each inner frame over an IPv4 underlay: outer IPv4 (20) + UDP (8) +
/// VXLAN (8) + the inner Ethernet header (14) (RFC 7348 section 5).
pub const OVERHEAD_V4: u32 = 50;
/// The same over an IPv6 underlay: the outer IPv6 header is 40 bytes.
pub const OVERHEAD_V6: u32 = 70;
/// The MTU assumed for the underlay when no link holds the VTEP address.
const DEFAULT_UNDERLAY_MTU: u32 = 1500;

/// The VXLAN overhead in bytes for an underlay address of `local`'s family.
pub fn overhead(local: IpAddr) -> u32 {
    if local.is_ipv4() {
        OVERHEAD_V4
    } else {
        OVERHEAD_V6
    }
}

/// The MTU of the link that holds `local` (1500 when none does, e.g. a NATed InternalIP).
///
/// # Errors
/// A link or address dump failed.
pub fn underlay_mtu(h: &Handle, local: IpAddr) -> tern_net::Result<u32> {
    for link in h.links()? {
        if h.addresses(link.index)?
            .iter()
            .any(|a| a.addr.ip() == local)
        {
            return Ok(link.mtu);
        }
    }
    Ok(DEFAULT_UNDERLAY_MTU)
}

pub use super::datapath::Written;

/// Makes tern's VXLAN device match `spec` and returns it: created when missing, re-created when
/// its VNI, port, local address or learning differ (those cannot change in place), its MTU set
/// and the device up. Then its addresses: the network address of each of this node's podCIDRs
/// (/32, /128, as flannel does), so traffic this node sends to other nodes' pods has a source
/// the other side routes back through the tunnel.
///
/// # Errors
/// A netlink operation failed; the device may be missing or half set up until the next pass.
pub fn ensure_device(h: &Handle, spec: &VxlanSpec, vtep: &Vtep) -> tern_net::Result<Link> {
    match h.vxlan_info(&spec.name)? {
        Some(info) if info.matches(spec) => {}
        found => {
            if h.delete_link_by_name(&spec.name)? {
                info!(device = %spec.name, ?found, "re-creating the VXLAN device: its settings changed");
            }
            h.create_vxlan(spec)?;
            info!(device = %spec.name, vni = spec.vni, port = spec.port, local = %spec.local, mtu = spec.mtu, "created the VXLAN device");
        }
    }
    let Some(link) = h.link_by_name(&spec.name)? else {
        return Err(tern_net::Error::Netlink {
            op: format!("get link {}", spec.name),
            errno: libc_enodev(),
            advice: Some("the VXLAN device vanished right after it was made"),
        });
    };
    if link.mtu != spec.mtu {
        h.set_mtu(link.index, spec.mtu)?;
        info!(device = %spec.name, from = link.mtu, to = spec.mtu, "set the VXLAN device's MTU");
    }
    if !link.up {
        h.set_up(link.index)?;
    }
    let want: BTreeSet<IpNetwork> = vtep
        .pod_nets
        .iter()
        .filter_map(|n| {
            let full = if n.is_ipv4() { 32 } else { 128 };
            IpNetwork::new(n.network(), full).ok()
        })
        .collect();
    let have: BTreeSet<IpNetwork> = h
        .addresses(link.index)?
        .into_iter()
        .map(|a| a.addr)
        // The kernel's own IPv6 link-local stays.
        .filter(|a| !matches!(a.ip(), IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80))
        .collect();
    for a in have.difference(&want) {
        h.del_address(link.index, *a)?;
    }
    for a in want.difference(&have) {
        h.add_address(link.index, *a, true)?;
    }
    Ok(link)
}

fn count(done: &mut Written, what: &str, r: tern_net::Result<()>) {
    match r {
        Ok(()) => done.writes += 1,
        Err(e) => {
            warn!(error = %e, "cannot {what}");
            done.failed += 1;
        }
    }
}

/// Adds and updates the FDB and neighbour entries `want` needs on device `index` (before the
/// routes that use them).
///
/// # Errors
/// A dump failed; refused writes are logged and counted.
pub fn add_entries(h: &Handle, index: u32, want: &VxlanDesired) -> tern_net::Result<Written> {
    let mut done = Written::default();
    let fdb: BTreeSet<FdbEntry> = h.fdb(index)?.into_iter().collect();
    for p in want.peers.values() {
        let e = FdbEntry {
            mac: p.mac,
            dst: p.underlay,
        };
        if !fdb.contains(&e) {
            count(&mut done, "write an FDB entry", h.replace_fdb(index, &e));
        }
    }
    let neigh: BTreeMap<IpAddr, [u8; 6]> = h
        .neighbours(index)?
        .into_iter()
        .map(|n| (n.ip, n.mac))
        .collect();
    for (ip, mac) in &want.neighbours {
        if neigh.get(ip) != Some(mac) {
            let n = Neighbour { ip: *ip, mac: *mac };
            count(
                &mut done,
                "write a neighbour entry",
                h.replace_neighbour(index, &n),
            );
        }
    }
    Ok(done)
}

/// Removes the FDB and neighbour entries on device `index` that `want` does not hold (after the
/// routes that used them went).
///
/// # Errors
/// A dump failed; refused removals are logged and counted.
pub fn remove_stale(h: &Handle, index: u32, want: &VxlanDesired) -> tern_net::Result<Written> {
    let mut done = Written::default();
    for n in h.neighbours(index)? {
        if !want.neighbours.contains_key(&n.ip) {
            count(
                &mut done,
                "remove a neighbour entry",
                h.del_neighbour(index, n.ip),
            );
        }
    }
    let keep: BTreeSet<FdbEntry> = want
        .peers
        .values()
        .map(|p| FdbEntry {
            mac: p.mac,
            dst: p.underlay,
        })
        .collect();
    for e in h.fdb(index)? {
        if !keep.contains(&e) {
            count(&mut done, "remove an FDB entry", h.del_fdb(index, &e));
        }
    }
    Ok(done)
}

/// Deletes tern's VXLAN device if there is one (host-gw after VXLAN: its routes, neighbours and
/// FDB entries go with it). Returns whether there was one.
///
/// # Errors
/// The lookup or the delete failed.
pub fn remove_device(h: &Handle) -> tern_net::Result<bool> {
    h.delete_link_by_name(DEVICE)
}

/// `ENODEV` without a libc dependency in this crate.
fn libc_enodev() -> i32 {
    nix::errno::Errno::ENODEV as i32
}

/// The VXLAN data path: its VNI and port, what the last pass wanted (for the removals after the
/// routes), and the VTEP MAC published and not yet seen back in this node's Node.
#[derive(Debug)]
pub(crate) struct Vxlan {
    vni: u32,
    port: u16,
    last: Option<(u32, VxlanDesired)>,
    published: Option<String>,
}

impl Vxlan {
    /// The data path of `--vxlan-vni` and `--vxlan-port`.
    pub(crate) fn new(vni: u32, port: u16) -> Vxlan {
        Vxlan {
            vni,
            port,
            last: None,
            published: None,
        }
    }

    /// Publishes this node's VTEP MAC in its Node when the Node does not carry it yet (needs
    /// `patch nodes/status`); a new connection, as the watch's are.
    fn publish(&mut self, s: &Shared, nodes: &Store<NodeEntry>, mac: &str) {
        let me = &s.cfg.node_name;
        let shown = nodes.get(me).and_then(|n| n.vtep_mac.as_deref());
        if shown == Some(mac) || self.published.as_deref() == Some(mac) {
            return;
        }
        let result = crate::mint::in_cluster_client(&s.run.api).and_then(|(c, _)| {
            c.annotate_node(me, VTEP_MAC_ANNOTATION, mac, s.run.api.request_timeout)
        });
        match result {
            Ok(()) => {
                s.stats().vxlan_published += 1;
                info!(node = %me, vtep_mac = %mac, "published this node's VTEP MAC");
                self.published = Some(mac.to_owned());
            }
            Err(e) => {
                *s.stats().api_errors.entry(e.cause_label()).or_insert(0) += 1;
                warn!(error = %e, "cannot publish this node's VTEP MAC (needs patch nodes/status); other nodes cannot reach this one's pods until it is");
            }
        }
    }
}

impl DataPath for Vxlan {
    /// This node's device made and published, the FDB and neighbour entries added; `None` (all
    /// left as it is) when this node's VTEP is unknown or the device cannot be made.
    fn prepare(&mut self, s: &Shared, h: &Handle, nodes: &Store<NodeEntry>) -> Option<Prepared> {
        let me = &s.cfg.node_name;
        let Some(vtep) = desired::vtep(me, nodes.values()) else {
            warn!(node = %me, "this node has no Node object with an InternalIP yet; VXLAN waits for it");
            return None;
        };
        let mtu = match underlay_mtu(h, vtep.local) {
            Ok(m) => m.saturating_sub(overhead(vtep.local)),
            Err(e) => {
                warn!(error = %e, "cannot read this node's links; VXLAN unchanged");
                return None;
            }
        };
        let spec = VxlanSpec {
            name: DEVICE.to_owned(),
            vni: self.vni,
            port: self.port,
            local: vtep.local,
            mtu,
        };
        let link = match ensure_device(h, &spec, &vtep) {
            Ok(l) => l,
            Err(e) => {
                s.stats().failed += 1;
                warn!(error = %e, "cannot set up the VXLAN device; routes unchanged");
                return None;
            }
        };
        if let Some(mac) = link.mac {
            self.publish(s, nodes, &format_mac(&mac));
        }
        let want = desired_vxlan(me, nodes.values(), vtep.local.is_ipv4());
        let writes = match add_entries(h, link.index, &want) {
            Ok(w) => {
                s.stats().failed += w.failed;
                w.writes
            }
            Err(e) => {
                warn!(error = %e, "cannot read the VXLAN device's entries; routes unchanged");
                return None;
            }
        };
        let prepared = Prepared {
            routes: want.routes.clone(),
            dev: Some(link.index),
            peers: Some(want.peers.len() as u64),
            writes,
        };
        self.last = Some((link.index, want));
        Some(prepared)
    }

    fn finish(&mut self, h: &Handle) -> Written {
        let Some((index, want)) = self.last.take() else {
            return Written::default();
        };
        remove_stale(h, index, &want).unwrap_or_else(|e| {
            warn!(error = %e, "cannot read the VXLAN device's entries");
            Written::default()
        })
    }

    fn own_node_changed(&mut self) {
        // The Node as the API has it decides again whether to publish.
        self.published = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_is_the_encapsulation_of_each_underlay_family() {
        assert_eq!(overhead("192.0.2.1".parse().unwrap()), 50);
        assert_eq!(overhead("2001:db8::1".parse().unwrap()), 70);
        // 1500 - 50 = 1450: flannel's VXLAN MTU on a 1500 network.
        assert_eq!(1500 - OVERHEAD_V4, 1450);
    }
}

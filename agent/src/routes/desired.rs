//! The routes this node should have, from the Nodes it knows and its directly connected
//! networks: one route per other node's `spec.podCIDRs` entry, via that node's `InternalIP` of
//! the same family.
//!
//! Invariant: pure (no kernel, no API); a node whose gateway is not on a directly connected
//! network gets no route but a [`Skipped`] entry saying why, never a route through a guess.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use tern_kube::client::nodes::NodeEntry;
use tern_net::netlink::format_mac;

/// Why a node's podCIDR gets no route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The node's name.
    pub node: String,
    /// The podCIDR as the node spells it.
    pub cidr: String,
    /// Stable label for the metric: `not_connected`, `no_internal_ip`, `bad_cidr`, `conflict`,
    /// `no_vtep`.
    pub reason: &'static str,
    /// A sentence for the log.
    pub detail: String,
}

/// The desired routes (podCIDR network → gateway, with the node it serves) and the skipped ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Desired {
    /// Destination → (gateway, node name).
    pub routes: BTreeMap<IpNetwork, (IpAddr, String)>,
    /// podCIDRs left unrouted, with why.
    pub skipped: Vec<Skipped>,
}

/// Whether `ip` lies in one of `connected` (this node's own address prefixes) and is not one of
/// this node's own addresses.
pub fn on_link(ip: IpAddr, connected: &[IpNetwork]) -> bool {
    connected.iter().all(|n| n.ip() != ip) && connected.iter().any(|n| n.contains(ip))
}

/// Computes the routes for every node but `self_name`. Nodes are taken in name order, so two
/// nodes claiming one podCIDR resolve the same way on every node: the first name keeps it.
pub fn desired<'a>(
    self_name: &str,
    nodes: impl IntoIterator<Item = &'a NodeEntry>,
    connected: &[IpNetwork],
) -> Desired {
    let mut out = Desired::default();
    let mut sorted: Vec<&NodeEntry> = nodes.into_iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for n in sorted.into_iter().filter(|n| n.name != self_name) {
        for cidr in &n.pod_cidrs {
            let skip = |reason, detail: String| Skipped {
                node: n.name.clone(),
                cidr: cidr.clone(),
                reason,
                detail,
            };
            let net = match cidr.parse::<IpNetwork>() {
                // The route's destination is the network, whatever host bits were written.
                Ok(c) => match IpNetwork::new(c.network(), c.prefix()) {
                    Ok(net) => net,
                    Err(e) => {
                        out.skipped
                            .push(skip("bad_cidr", format!("podCIDR {cidr:?}: {e}")));
                        continue;
                    }
                },
                Err(e) => {
                    out.skipped
                        .push(skip("bad_cidr", format!("podCIDR {cidr:?}: {e}")));
                    continue;
                }
            };
            let family_ips: Vec<IpAddr> = n
                .internal_ips
                .iter()
                .copied()
                .filter(|ip| ip.is_ipv4() == net.is_ipv4())
                .collect();
            let Some(gw) = family_ips
                .iter()
                .copied()
                .find(|ip| on_link(*ip, connected))
            else {
                let s = match family_ips.first() {
                    None => skip(
                        "no_internal_ip",
                        format!("node has no InternalIP of the podCIDR {cidr}'s family"),
                    ),
                    Some(ip) => skip(
                        "not_connected",
                        format!(
                            "InternalIP {ip} is not on a directly connected network of this node; \
                             host-gw routing needs the nodes on one L2 segment"
                        ),
                    ),
                };
                out.skipped.push(s);
                continue;
            };
            if let Some((_, owner)) = out.routes.get(&net) {
                let detail = format!("podCIDR {net} is already routed to node {owner}");
                out.skipped.push(skip("conflict", detail));
                continue;
            }
            out.routes.insert(net, (gw, n.name.clone()));
        }
    }
    out
}

/// This node's VTEP: the underlay address (its first InternalIP: the family the kubelet's
/// `--node-ip` puts first) and its own podCIDR networks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vtep {
    /// `IFLA_VXLAN_LOCAL`: the address other nodes send this node's VXLAN packets to.
    pub local: IpAddr,
    /// This node's podCIDR networks; their network addresses go on the device.
    pub pod_nets: Vec<IpNetwork>,
}

fn network(cidr: &str) -> Result<IpNetwork, String> {
    let c = cidr
        .parse::<IpNetwork>()
        .map_err(|e| format!("podCIDR {cidr:?}: {e}"))?;
    IpNetwork::new(c.network(), c.prefix()).map_err(|e| format!("podCIDR {cidr:?}: {e}"))
}

/// This node's VTEP from its Node; `None` when the Node is unknown or has no InternalIP.
pub fn vtep<'a>(self_name: &str, nodes: impl IntoIterator<Item = &'a NodeEntry>) -> Option<Vtep> {
    let me = nodes.into_iter().find(|n| n.name == self_name)?;
    Some(Vtep {
        local: *me.internal_ips.first()?,
        pod_nets: me
            .pod_cidrs
            .iter()
            .filter_map(|c| network(c).ok())
            .collect(),
    })
}

/// One other node's VTEP, as it must appear in this node's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its device's MAC (from its `tern.io/vtep-mac` annotation).
    pub mac: [u8; 6],
    /// Its InternalIP of the underlay's family: the FDB entry's destination.
    pub underlay: IpAddr,
}

/// The VXLAN data path this node should have: a route per other node's podCIDR via that
/// podCIDR's network address (on the device, onlink), a neighbour entry for that address with
/// the node's VTEP MAC, and one FDB entry per node (its MAC → its InternalIP of the underlay's
/// family).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VxlanDesired {
    /// Routes (destination → (gateway, node)), as for host-gw; the gateways are the podCIDRs'
    /// network addresses.
    pub routes: Desired,
    /// Neighbour entries: gateway → MAC.
    pub neighbours: BTreeMap<IpAddr, [u8; 6]>,
    /// Forwarding-database entries, by node name.
    pub peers: BTreeMap<String, Peer>,
}

/// Computes the VXLAN data path for every node but `self_name`, over an underlay of
/// `underlay_v4`'s family. Nodes are taken in name order, so a podCIDR or a MAC claimed twice
/// resolves the same way on every node: the first name keeps it. A node without a valid
/// `tern.io/vtep-mac` (its agent has not published one yet) is skipped as `no_vtep`; one with
/// no InternalIP of the underlay's family as `no_internal_ip`.
pub fn desired_vxlan<'a>(
    self_name: &str,
    nodes: impl IntoIterator<Item = &'a NodeEntry>,
    underlay_v4: bool,
) -> VxlanDesired {
    let mut out = VxlanDesired::default();
    let mut sorted: Vec<&NodeEntry> = nodes.into_iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for n in sorted.into_iter().filter(|n| n.name != self_name) {
        let skip_all = |out: &mut VxlanDesired, reason, detail: String| {
            for cidr in &n.pod_cidrs {
                out.routes.skipped.push(Skipped {
                    node: n.name.clone(),
                    cidr: cidr.clone(),
                    reason,
                    detail: detail.clone(),
                });
            }
        };
        let mac = match n.vtep_mac.as_deref().map(tern_net::netlink::parse_mac) {
            Some(Ok(mac)) => mac,
            Some(Err(e)) => {
                skip_all(
                    &mut out,
                    "no_vtep",
                    format!("annotation tern.io/vtep-mac: {e}"),
                );
                continue;
            }
            None => {
                let d = "no tern.io/vtep-mac annotation yet (its agent publishes it)".to_owned();
                skip_all(&mut out, "no_vtep", d);
                continue;
            }
        };
        let Some(underlay) = n
            .internal_ips
            .iter()
            .copied()
            .find(|ip| ip.is_ipv4() == underlay_v4)
        else {
            let fam = if underlay_v4 { "IPv4" } else { "IPv6" };
            let d =
                format!("node has no {fam} InternalIP, the family of this node's VXLAN underlay");
            skip_all(&mut out, "no_internal_ip", d);
            continue;
        };
        if let Some((owner, _)) = out.peers.iter().find(|(_, p)| p.mac == mac) {
            let d = format!("VTEP MAC {} is already node {owner}'s", format_mac(&mac));
            skip_all(&mut out, "conflict", d);
            continue;
        }
        let mut routed = false;
        for cidr in &n.pod_cidrs {
            let skip = |reason, detail: String| Skipped {
                node: n.name.clone(),
                cidr: cidr.clone(),
                reason,
                detail,
            };
            let net = match network(cidr) {
                Ok(net) => net,
                Err(e) => {
                    out.routes.skipped.push(skip("bad_cidr", e));
                    continue;
                }
            };
            if let Some((_, owner)) = out.routes.routes.get(&net) {
                let detail = format!("podCIDR {net} is already routed to node {owner}");
                out.routes.skipped.push(skip("conflict", detail));
                continue;
            }
            out.routes
                .routes
                .insert(net, (net.network(), n.name.clone()));
            out.neighbours.insert(net.network(), mac);
            routed = true;
        }
        if routed {
            out.peers.insert(n.name.clone(), Peer { mac, underlay });
        }
    }
    out
}

#[cfg(test)]
mod tests;

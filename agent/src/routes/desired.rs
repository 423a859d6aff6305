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

/// Why a node's podCIDR gets no route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The node's name.
    pub node: String,
    /// The podCIDR as the node spells it.
    pub cidr: String,
    /// Stable label for the metric: `not_connected`, `no_internal_ip`, `bad_cidr`, `conflict`.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cidrs: &[&str], ips: &[&str]) -> NodeEntry {
        NodeEntry {
            name: name.into(),
            pod_cidrs: cidrs.iter().map(|s| (*s).to_owned()).collect(),
            internal_ips: ips.iter().map(|s| s.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn one_route_per_other_node_and_family() {
        let connected: Vec<IpNetwork> = vec![
            "192.168.7.1/24".parse().unwrap(),
            "fd07::1/64".parse().unwrap(),
        ];
        let nodes = [
            node("n1", &["10.244.0.0/24"], &["192.168.7.1"]),
            node(
                "n2",
                &["10.244.1.0/24", "fd44:0:0:1::/64"],
                &["192.168.7.2", "fd07::2"],
            ),
            node("n3", &["10.244.2.7/24"], &["10.9.9.9", "192.168.7.3"]),
            node("n4", &["10.244.3.0/24"], &["10.9.9.4"]),
            node(
                "n5",
                &["10.244.4.0/24", "fd44:0:0:5::/64"],
                &["192.168.7.5"],
            ),
            node("n6", &["10.244.1.0/24"], &["192.168.7.6"]),
            node("n7", &["nonsense"], &["192.168.7.7"]),
        ];
        let d = desired("n1", &nodes, &connected);
        let r: Vec<String> = d
            .routes
            .iter()
            .map(|(k, (gw, n))| format!("{k} via {gw} ({n})"))
            .collect();
        assert_eq!(
            r,
            [
                "10.244.1.0/24 via 192.168.7.2 (n2)",
                "10.244.2.0/24 via 192.168.7.3 (n3)",
                "10.244.4.0/24 via 192.168.7.5 (n5)",
                "fd44:0:0:1::/64 via fd07::2 (n2)",
            ]
        );
        let reasons: Vec<(&str, &str)> = d
            .skipped
            .iter()
            .map(|s| (s.node.as_str(), s.reason))
            .collect();
        assert_eq!(
            reasons,
            [
                ("n4", "not_connected"),
                ("n5", "no_internal_ip"),
                ("n6", "conflict"),
                ("n7", "bad_cidr"),
            ]
        );
        // Its own address is never a gateway.
        assert!(!on_link("192.168.7.1".parse().unwrap(), &connected));
    }
}

//! The node's egress NAT rule set (pure): one nftables table, `inet tern_nat`, whose one base
//! chain masquerades traffic from this node's pod ranges to anything outside the cluster's
//! ranges, per family; and the scripts that replace it and remove it. A pod range inside no
//! cluster range of its family gets no rule: masquerading it would hide its pods' traffic to
//! other nodes' pods behind this node's address.
//!
//! Invariant: every script touches `inet tern_nat` only, and replacing is one transaction
//! (`add table` + `delete table` + the new table: the table never exists half-written, and a
//! table that was absent is created), so kube-proxy's and iptables-nft's tables are never touched.

use ipnetwork::IpNetwork;

/// The table's family and name, shared with the drain's finish (which removes the table).
pub use tern_net::drain::{EGRESS_NAT_FAMILY as FAMILY, EGRESS_NAT_TABLE as TABLE};

/// What the rule set is made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ranges {
    /// This node's pod ranges (`spec.podCIDRs`): the sources masqueraded.
    pub pod: Vec<IpNetwork>,
    /// The cluster's ranges (pod and service networks): destinations never masqueraded.
    pub cluster: Vec<IpNetwork>,
}

fn list(nets: &[&IpNetwork], extra: &str) -> String {
    let mut items: Vec<String> = nets.iter().map(ToString::to_string).collect();
    items.push(extra.to_owned());
    format!("{{ {} }}", items.join(", "))
}

/// Whether `net` lies inside one of `ranges` (of its own family).
pub fn inside(net: &IpNetwork, ranges: &[IpNetwork]) -> bool {
    ranges
        .iter()
        .any(|r| r.is_ipv4() == net.is_ipv4() && r.prefix() <= net.prefix() && r.contains(net.ip()))
}

/// The pod ranges of `r` inside no cluster range of their family: they get no rule.
pub fn outside(r: &Ranges) -> Vec<IpNetwork> {
    r.pod
        .iter()
        .filter(|p| !inside(p, &r.cluster))
        .copied()
        .collect()
}

/// The masquerade rule of one family, when this node has a pod range of it inside the cluster's.
fn family_rule(r: &Ranges, v4: bool) -> Option<String> {
    let of = |n: &&IpNetwork| n.is_ipv4() == v4;
    let pod: Vec<&IpNetwork> = r
        .pod
        .iter()
        .filter(of)
        .filter(|p| inside(p, &r.cluster))
        .collect();
    if pod.is_empty() {
        return None;
    }
    let cluster: Vec<&IpNetwork> = r.cluster.iter().filter(of).collect();
    // Multicast never leaves through NAT (as the reference ptp's rules).
    let (fam, multicast) = if v4 {
        ("ip", "224.0.0.0/4")
    } else {
        ("ip6", "ff00::/8")
    };
    let pod: Vec<String> = pod.iter().map(ToString::to_string).collect();
    Some(format!(
        "\t\t{fam} saddr {{ {} }} {fam} daddr != {} masquerade\n",
        pod.join(", "),
        list(&cluster, multicast)
    ))
}

/// The script that replaces the table with the rule set for `r`, in one transaction.
pub fn replace_script(r: &Ranges) -> String {
    let t = format!("{FAMILY} {TABLE}");
    let mut s = format!(
        "add table {t}\n\
         delete table {t}\n\
         table {t} {{\n\
         \tchain postrouting {{\n\
         \t\ttype nat hook postrouting priority 100; policy accept;\n"
    );
    for v4 in [true, false] {
        if let Some(rule) = family_rule(r, v4) {
            s.push_str(&rule);
        }
    }
    s.push_str("\t}\n}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(v: &[&str]) -> Vec<IpNetwork> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn both_families_masquerade_outside_the_cluster() {
        let s = replace_script(&Ranges {
            pod: nets(&["10.244.1.0/24", "fd00:1:0:1::/64"]),
            cluster: nets(&["10.244.0.0/16", "10.96.0.0/12", "fd00:1::/48"]),
        });
        assert!(s.starts_with("add table inet tern_nat\ndelete table inet tern_nat\n"));
        assert!(s.contains(
            "ip saddr { 10.244.1.0/24 } ip daddr != { 10.244.0.0/16, 10.96.0.0/12, 224.0.0.0/4 } masquerade"
        ), "{s}");
        assert!(
            s.contains(
                "ip6 saddr { fd00:1:0:1::/64 } ip6 daddr != { fd00:1::/48, ff00::/8 } masquerade"
            ),
            "{s}"
        );
    }

    #[test]
    fn a_family_without_pod_ranges_gets_no_rule() {
        let s = replace_script(&Ranges {
            pod: nets(&["10.244.1.0/24"]),
            cluster: nets(&["10.244.0.0/16", "fd00:1::/48"]),
        });
        assert!(!s.contains("ip6"), "{s}");
    }

    #[test]
    fn a_pod_range_outside_the_cluster_gets_no_rule() {
        // No IPv6 cluster range: masquerading fd00:1:0:1::/64 would hide every IPv6 pod flow.
        let r = Ranges {
            pod: nets(&["10.244.1.0/24", "fd00:1:0:1::/64"]),
            cluster: nets(&["10.244.0.0/16"]),
        };
        let s = replace_script(&r);
        assert!(!s.contains("ip6"), "{s}");
        assert!(s.contains("ip saddr { 10.244.1.0/24 }"), "{s}");
        assert_eq!(outside(&r), nets(&["fd00:1:0:1::/64"]));
        // An IPv4 pod range outside the IPv4 cluster ranges: no IPv4 rule either.
        let r = Ranges {
            pod: nets(&["10.245.1.0/24", "fd00:1:0:1::/64"]),
            cluster: nets(&["10.244.0.0/16", "fd00:1::/48"]),
        };
        let s = replace_script(&r);
        assert!(!s.contains("ip saddr"), "{s}");
        assert!(s.contains("ip6 saddr { fd00:1:0:1::/64 }"), "{s}");
        assert!(s.contains("type nat hook postrouting"), "{s}");
    }
}

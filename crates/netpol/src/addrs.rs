//! Address sets (pure): the union of CIDRs and single addresses minus excepted CIDRs, per family,
//! as sorted, disjoint, non-adjacent inclusive ranges. This is how an `ipBlock`'s `except` is
//! applied without a second match in the rule, and why nft's interval sets never see two
//! overlapping elements (which `nft` refuses without `auto-merge`).
//!
//! Invariant: [`AddrSet::v4`] and [`AddrSet::v6`] are always normalized (sorted, merged).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;

/// An inclusive range of addresses of one family, as integers (IPv4 in the low 32 bits).
pub type Range = (u128, u128);

/// A set of addresses of both families.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AddrSet {
    /// IPv4 ranges, normalized.
    pub v4: Vec<Range>,
    /// IPv6 ranges, normalized.
    pub v6: Vec<Range>,
}

fn span(net: &IpNetwork) -> (bool, Range) {
    match net {
        IpNetwork::V4(n) => {
            let lo = u128::from(u32::from(n.network()));
            let size = 1u128 << (32 - u32::from(n.prefix()));
            (true, (lo, lo + size - 1))
        }
        IpNetwork::V6(n) => {
            let lo = u128::from(n.network());
            let host_bits = 128 - u32::from(n.prefix());
            let hi = if host_bits == 128 {
                u128::MAX
            } else {
                lo | ((1u128 << host_bits) - 1)
            };
            (false, (lo, hi))
        }
    }
}

/// An address as the number sets hold it (IPv4 in the low 32 bits).
pub(crate) fn number(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The address of number `x` in family `v4` (else IPv6).
pub(crate) fn address(v4: bool, x: u128) -> IpAddr {
    if v4 {
        IpAddr::V4(Ipv4Addr::from(u32::try_from(x).unwrap_or(u32::MAX)))
    } else {
        IpAddr::V6(Ipv6Addr::from(x))
    }
}

fn one(ip: IpAddr) -> (bool, Range) {
    let n = number(ip);
    (ip.is_ipv4(), (n, n))
}

/// Sorts and merges overlapping or adjacent ranges.
fn normalize(v: &mut Vec<Range>) {
    v.sort_unstable();
    let mut out: Vec<Range> = Vec::with_capacity(v.len());
    for &(lo, hi) in v.iter() {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    *v = out;
}

/// `set` minus `cut` (both normalized).
fn subtract(set: &[Range], cut: &[Range]) -> Vec<Range> {
    let mut out = Vec::new();
    for &(mut lo, hi) in set {
        let mut alive = true;
        for &(clo, chi) in cut {
            if chi < lo || clo > hi {
                continue;
            }
            if clo > lo {
                out.push((lo, clo - 1));
            }
            if chi >= hi {
                alive = false;
                break;
            }
            lo = chi + 1;
        }
        if alive {
            out.push((lo, hi));
        }
    }
    out
}

impl AddrSet {
    /// Whether the set holds no address.
    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    /// Adds a network.
    pub fn add_net(&mut self, net: &IpNetwork) {
        let (v4, r) = span(net);
        self.push(v4, r);
    }

    /// Adds one address.
    pub fn add_ip(&mut self, ip: IpAddr) {
        let (v4, r) = one(ip);
        self.push(v4, r);
    }

    fn push(&mut self, v4: bool, r: Range) {
        let v = if v4 { &mut self.v4 } else { &mut self.v6 };
        v.push(r);
        normalize(v);
    }

    /// Adds many addresses, normalizing once (what a selector's pods give).
    pub fn add_ips(&mut self, ips: impl IntoIterator<Item = IpAddr>) {
        for ip in ips {
            let (v4, r) = one(ip);
            if v4 {
                self.v4.push(r);
            } else {
                self.v6.push(r);
            }
        }
        normalize(&mut self.v4);
        normalize(&mut self.v6);
    }

    /// Adds every address of `other`.
    pub fn extend(&mut self, other: &AddrSet) {
        self.v4.extend_from_slice(&other.v4);
        self.v6.extend_from_slice(&other.v6);
        normalize(&mut self.v4);
        normalize(&mut self.v6);
    }

    /// `cidr` minus every `except` (an ipBlock).
    pub fn block(cidr: &IpNetwork, except: &[IpNetwork]) -> AddrSet {
        let mut whole = AddrSet::default();
        whole.add_net(cidr);
        let mut cut = AddrSet::default();
        for e in except {
            cut.add_net(e);
        }
        AddrSet {
            v4: subtract(&whole.v4, &cut.v4),
            v6: subtract(&whole.v6, &cut.v6),
        }
    }

    /// Whether `ip` is in the set.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let (v4, (x, _)) = one(ip);
        let v = if v4 { &self.v4 } else { &self.v6 };
        v.iter().any(|&(lo, hi)| lo <= x && x <= hi)
    }
}

/// One range as an nft set element: `a` for one address, `a/len` for an aligned network,
/// `a-b` otherwise.
pub fn element(v4: bool, (lo, hi): Range) -> String {
    let show = |x: u128| address(v4, x).to_string();
    if lo == hi {
        return show(lo);
    }
    let width = if v4 { 32 } else { 128 };
    let size = hi.wrapping_sub(lo).wrapping_add(1);
    // An aligned power-of-two block (the whole IPv6 space wraps `size` to 0).
    if (size == 0 && lo == 0) || (size.is_power_of_two() && lo % size == 0) {
        let host_bits = if size == 0 {
            128
        } else {
            size.trailing_zeros()
        };
        return format!("{}/{}", show(lo), width - host_bits);
    }
    format!("{}-{}", show(lo), show(hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNetwork {
        s.parse().unwrap()
    }

    fn show(s: &AddrSet) -> Vec<String> {
        s.v4.iter()
            .map(|r| element(true, *r))
            .chain(s.v6.iter().map(|r| element(false, *r)))
            .collect()
    }

    #[test]
    fn except_cuts_holes() {
        let s = AddrSet::block(
            &net("10.0.0.0/16"),
            &[net("10.0.1.0/24"), net("10.0.3.0/24"), net("10.0.3.128/25")],
        );
        assert_eq!(
            show(&s),
            ["10.0.0.0/24", "10.0.2.0/24", "10.0.4.0-10.0.255.255"]
        );
        assert!(s.contains("10.0.2.9".parse().unwrap()));
        assert!(!s.contains("10.0.1.9".parse().unwrap()));
        assert!(!s.contains("fd00::1".parse().unwrap()));
        // An except covering the whole block, and one at each edge.
        assert!(AddrSet::block(&net("10.0.0.0/24"), &[net("10.0.0.0/16")]).is_empty());
        let s = AddrSet::block(
            &net("10.0.0.0/24"),
            &[net("10.0.0.0/32"), net("10.0.0.255/32")],
        );
        assert_eq!(show(&s), ["10.0.0.1-10.0.0.254"]);
        // An except of the other family changes nothing.
        let s = AddrSet::block(&net("fd00::/64"), &[net("10.0.0.0/8"), net("fd00::1/128")]);
        assert_eq!(show(&s), ["fd00::", "fd00::2-fd00::ffff:ffff:ffff:ffff"]);
    }

    #[test]
    fn whole_spaces_and_merging() {
        let s = AddrSet::block(&net("0.0.0.0/0"), &[]);
        assert_eq!(show(&s), ["0.0.0.0/0"]);
        let s = AddrSet::block(&net("::/0"), &[net("::/1")]);
        assert_eq!(show(&s), ["8000::/1"]);
        let s = AddrSet::block(&net("::/0"), &[]);
        assert_eq!(show(&s), ["::/0"]);
        let mut s = AddrSet::default();
        for ip in ["10.0.0.2", "10.0.0.1", "10.0.0.3", "10.0.0.9", "10.0.0.2"] {
            s.add_ip(ip.parse().unwrap());
        }
        s.add_net(&net("10.0.0.8/30"));
        assert_eq!(show(&s), ["10.0.0.1-10.0.0.3", "10.0.0.8/30"]);
        let mut t = AddrSet::default();
        t.add_ip("10.0.0.4".parse().unwrap());
        s.extend(&t);
        assert_eq!(show(&s), ["10.0.0.1-10.0.0.4", "10.0.0.8/30"]);
    }
}

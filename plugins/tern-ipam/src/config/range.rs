//! Ranges and range sets: host-local's `range.go` and `range_set.go` — one subnet with its first,
//! last and gateway address, canonicalised and checked; a set is one address family.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use serde::Deserialize;

use super::addr::{canonical_ip, ip_to_u128, next_ip};

/// One range as written in the config: every field optional, strings not yet parsed.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct RawRange {
    /// First address handed out, inclusive.
    #[serde(default, rename = "rangeStart")]
    pub range_start: Option<String>,
    /// Last address handed out, inclusive.
    #[serde(default, rename = "rangeEnd")]
    pub range_end: Option<String>,
    /// The subnet, `a.b.c.d/n` or `x::/n`.
    #[serde(default)]
    pub subnet: Option<String>,
    /// The gateway; default: the subnet's first address.
    #[serde(default)]
    pub gateway: Option<String>,
}

/// A canonical range of one subnet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// The subnet, its address being the network address.
    pub subnet: IpNetwork,
    /// First address handed out, inclusive.
    pub range_start: IpAddr,
    /// Last address handed out, inclusive.
    pub range_end: IpAddr,
    /// The gateway, never handed out. Not required to lie inside the subnet (as host-local).
    pub gateway: IpAddr,
}

impl Range {
    /// Whether `ip` is inside this range (same family, in the subnet, between start and end).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical_ip(ip);
        ip.is_ipv4() == self.subnet.is_ipv4()
            && self.subnet.contains(ip)
            && ip >= self.range_start
            && ip <= self.range_end
    }

    /// Whether the two ranges share an address (host-local's `Range.Overlaps`).
    pub fn overlaps(&self, other: &Range) -> bool {
        self.subnet.is_ipv4() == other.subnet.is_ipv4()
            && (self.contains(other.range_start)
                || self.contains(other.range_end)
                || other.contains(self.range_start)
                || other.contains(self.range_end))
    }

    /// The number of addresses handed out from this range: start to end, minus the gateway when
    /// it lies between them. Saturates at `u128::MAX`.
    pub fn capacity(&self) -> u128 {
        let n = ip_to_u128(self.range_end)
            .saturating_sub(ip_to_u128(self.range_start))
            .saturating_add(1);
        if self.contains(self.gateway) {
            n - 1
        } else {
            n
        }
    }

    /// Canonicalizes a configured range (host-local's `Range.Canonicalize`).
    ///
    /// # Errors
    /// host-local's messages: `invalid CIDR address: x`, `invalid IP address: x`, `Network <cidr>
    /// too small to allocate from`, `Network has host bits set. …`, `RangeStart <ip> not in network
    /// <cidr>`, `RangeEnd …`, `IP <nil> not v4 nor v6` for a missing subnet. Beyond host-local
    /// (which accepts these and then hands out addresses outside the range): `RangeStart <ip> is
    /// the network address of <cidr>, …` (`RangeEnd` too; IPv4 also the broadcast address), and
    /// `RangeStart <ip> is beyond the range's end <ip> in network <cidr>` when the start lies past
    /// the defaulted end.
    pub fn canonicalize(raw: &RawRange) -> Result<Range, String> {
        let subnet_s = raw
            .subnet
            .as_deref()
            .ok_or_else(|| "IP <nil> not v4 nor v6".to_owned())?;
        let given = parse_cidr(subnet_s)?;
        let given = match (given, canonical_ip(given.ip())) {
            (IpNetwork::V6(n), IpAddr::V4(v4)) if n.prefix() >= 96 => {
                IpNetwork::new(IpAddr::V4(v4), n.prefix() - 96).map_err(|e| e.to_string())?
            }
            (n, _) => n,
        };
        let bits = if given.is_ipv4() { 32 } else { 128 };
        if given.prefix() > bits - 2 {
            return Err(format!("Network {given} too small to allocate from"));
        }
        if given.ip() != given.network() {
            return Err(format!(
                "Network has host bits set. For a subnet mask of length {} the network address is {}",
                given.prefix(),
                given.network()
            ));
        }
        let subnet = given;
        let gateway = match opt_ip(&raw.gateway)? {
            Some(g) => g,
            None => next_ip(subnet.network()),
        };
        let given_end = opt_ip(&raw.range_end)?;
        let in_subnet = |ip: IpAddr| ip.is_ipv4() == subnet.is_ipv4() && subnet.contains(ip);
        let range_start = match opt_ip(&raw.range_start)? {
            Some(s) => {
                // host-local checks the start against the explicit end too, so a start past the
                // end is reported as a bad RangeStart.
                if !in_subnet(s) || given_end.is_some_and(|e| same_family(s, e) && s > e) {
                    return Err(format!("RangeStart {s} not in network {subnet}"));
                }
                s
            }
            None => next_ip(subnet.network()),
        };
        if let Some(s) = opt_ip(&raw.range_start)? {
            check_usable("RangeStart", s, subnet)?;
        }
        if let Some(e) = given_end {
            check_usable("RangeEnd", e, subnet)?;
        }
        let range_end = match given_end {
            Some(e) => {
                if !in_subnet(e) || e < range_start {
                    return Err(format!("RangeEnd {e} not in network {subnet}"));
                }
                e
            }
            None => last_ip(subnet),
        };
        // host-local accepts a start past the defaulted end (the IPv4 broadcast address, whose
        // next address is outside the subnet) and then hands out addresses beyond it
        // (containernetworking/plugins#1292): refused here, so start <= end always holds.
        if range_start > range_end {
            return Err(format!(
                "RangeStart {range_start} is beyond the range's end {range_end} in network {subnet}"
            ));
        }
        Ok(Range {
            subnet,
            range_start,
            range_end,
            gateway,
        })
    }
}

impl fmt::Display for Range {
    /// `<start>-<end>`, as host-local prints a range in messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.range_start, self.range_end)
    }
}

/// A range set: a pool of same-family ranges from which one address is handed out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeSet(pub Vec<Range>);

impl RangeSet {
    /// Canonicalizes a configured range set (host-local's `RangeSet.Canonicalize`).
    ///
    /// # Errors
    /// `empty range set`, `mixed address families`, `subnets <a> and <b> overlap`, or a range's
    /// error.
    pub fn canonicalize(raw: &[RawRange]) -> Result<RangeSet, String> {
        if raw.is_empty() {
            return Err("empty range set".into());
        }
        let mut ranges = Vec::with_capacity(raw.len());
        for r in raw {
            let r = Range::canonicalize(r)?;
            if let Some(first) = ranges.first() {
                let first: &Range = first;
                if first.subnet.is_ipv4() != r.subnet.is_ipv4() {
                    return Err("mixed address families".into());
                }
            }
            ranges.push(r);
        }
        for (i, a) in ranges.iter().enumerate() {
            for b in &ranges[i + 1..] {
                if a.overlaps(b) {
                    return Err(format!("subnets {a} and {b} overlap"));
                }
            }
        }
        Ok(RangeSet(ranges))
    }

    /// The range holding `ip`.
    ///
    /// # Errors
    /// `<ip> not in range set <set>`.
    pub fn range_for(&self, ip: IpAddr) -> Result<&Range, String> {
        let ip = canonical_ip(ip);
        self.0
            .iter()
            .find(|r| r.contains(ip))
            .ok_or_else(|| format!("{ip} not in range set {self}"))
    }

    /// Whether some range of the set holds `ip`.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.range_for(ip).is_ok()
    }

    /// Whether any range of `self` overlaps any of `other`.
    pub fn overlaps(&self, other: &RangeSet) -> bool {
        self.0.iter().any(|a| other.0.iter().any(|b| a.overlaps(b)))
    }

    /// Whether the set is IPv4.
    pub fn is_ipv4(&self) -> bool {
        self.0.first().is_some_and(|r| r.subnet.is_ipv4())
    }
}

impl fmt::Display for RangeSet {
    /// The ranges joined by `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// Refuses, as `field` (`RangeStart` or `RangeEnd`), an address that must never be handed out:
/// the network address of `subnet` (for IPv6 the subnet-router anycast address, RFC 4291
/// section 2.6.1) and, for IPv4, the broadcast address. `subnet` is /30 (/126) or wider here.
/// host-local accepts both (containernetworking/plugins#1292, #1295).
fn check_usable(field: &str, ip: IpAddr, subnet: IpNetwork) -> Result<(), String> {
    if !same_family(ip, subnet.ip()) || !subnet.contains(ip) {
        return Ok(()); // reported as "not in network" by the caller
    }
    if ip == subnet.network() {
        return Err(format!(
            "{field} {ip} is the network address of {subnet}, which is never handed out"
        ));
    }
    if let IpNetwork::V4(n) = subnet {
        if ip == IpAddr::V4(n.broadcast()) {
            return Err(format!(
                "{field} {ip} is the broadcast address of {subnet}, which is never handed out"
            ));
        }
    }
    Ok(())
}

pub(crate) fn check_syntax(r: &RawRange) -> Result<(), String> {
    if let Some(s) = &r.subnet {
        parse_cidr(s)?;
    }
    for ip in [&r.range_start, &r.range_end, &r.gateway] {
        opt_ip(ip)?;
    }
    Ok(())
}

pub(crate) fn parse_cidr(s: &str) -> Result<IpNetwork, String> {
    if !s.contains('/') {
        return Err(format!("invalid CIDR address: {s}"));
    }
    s.parse::<IpNetwork>()
        .map_err(|_| format!("invalid CIDR address: {s}"))
}

pub(crate) fn opt_ip(s: &Option<String>) -> Result<Option<IpAddr>, String> {
    match s.as_deref() {
        // Go's net.IP decodes "" as nil: the field counts as absent.
        None | Some("") => Ok(None),
        Some(s) => s
            .parse::<IpAddr>()
            .map(|ip| Some(canonical_ip(ip)))
            .map_err(|_| format!("invalid IP address: {s}")),
    }
}

pub(crate) fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

/// The default `rangeEnd`: the broadcast address minus one for IPv4, the last address for IPv6.
pub(crate) fn last_ip(subnet: IpNetwork) -> IpAddr {
    match subnet {
        IpNetwork::V4(n) => IpAddr::V4(Ipv4Addr::from(u32::from(n.broadcast()).wrapping_sub(1))),
        IpNetwork::V6(n) => {
            let host_bits = 128 - u32::from(n.prefix());
            let mask = if host_bits == 128 {
                u128::MAX
            } else {
                (1u128 << host_bits) - 1
            };
            IpAddr::V6(Ipv6Addr::from(u128::from(n.network()) | mask))
        }
    }
}

//! Choosing addresses, in host-local's order (`host-local/backend/allocator/allocator.go`):
//! round-robin from the address after `last_reserved_ip.<set>` when it lies in the set, else from
//! the first range's start; ranges of a set are walked in order and wrap around; gateways are
//! skipped; the walk ends where it began.
//!
//! Invariant: [`get`] runs with the store lock held and reserves at most one address.

use std::collections::HashSet;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use tern_cni::IpConfig;

use crate::config::{next_ip, Range, RangeSet};
use crate::error::IpamError;
use crate::store::{Lease, Store};

/// The candidate addresses of a range set, in allocation order (host-local's `RangeIter`).
#[derive(Clone, Debug)]
pub struct RangeIter<'a> {
    set: &'a RangeSet,
    range_idx: usize,
    cur: Option<IpAddr>,
    start_ip: Option<IpAddr>,
    done: bool,
}

impl<'a> RangeIter<'a> {
    /// An iterator starting after `last_reserved` when the set holds it, else at the first
    /// range's start.
    pub fn new(set: &'a RangeSet, last_reserved: Option<IpAddr>) -> RangeIter<'a> {
        let from_last =
            last_reserved.and_then(|ip| set.0.iter().position(|r| r.contains(ip)).map(|i| (i, ip)));
        match from_last {
            Some((range_idx, ip)) => RangeIter {
                set,
                range_idx,
                cur: Some(ip),
                start_ip: None,
                done: set.0.is_empty(),
            },
            None => RangeIter {
                set,
                range_idx: 0,
                cur: None,
                start_ip: None,
                done: set.0.is_empty(),
            },
        }
    }
}

impl<'a> Iterator for RangeIter<'a> {
    /// A candidate address and the range it belongs to.
    type Item = (IpAddr, &'a Range);

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        loop {
            let r = &self.set.0[self.range_idx];
            let (cur, r) = match self.cur {
                None => {
                    self.start_ip = Some(r.range_start);
                    (r.range_start, r)
                }
                Some(cur) => {
                    let (next, r) = if cur == r.range_end {
                        self.range_idx = (self.range_idx + 1) % self.set.0.len();
                        let r = &self.set.0[self.range_idx];
                        (r.range_start, r)
                    } else {
                        (next_ip(cur), r)
                    };
                    match self.start_ip {
                        None => self.start_ip = Some(next),
                        Some(s) if s == next => {
                            self.done = true;
                            return None;
                        }
                        Some(_) => {}
                    }
                    (next, r)
                }
            };
            self.cur = Some(cur);
            if cur != r.gateway {
                return Some((cur, r));
            }
        }
    }
}

fn ip_config(ip: IpAddr, r: &Range) -> Result<IpConfig, IpamError> {
    let address = IpNetwork::new(ip, r.subnet.prefix())
        .map_err(|e| IpamError::Alloc(format!("{ip}/{}: {e}", r.subnet.prefix())))?;
    Ok(IpConfig {
        interface: None,
        address,
        gateway: Some(r.gateway),
    })
}

/// Reserves one address of `set` (index `set_idx`) for (`id`, `ifname`): `requested` if given,
/// else the next free one. `leases` is the store's content read under the same lock.
///
/// # Errors
/// [`IpamError::Alloc`] with host-local's messages (unprefixed): `<ip> not in range set <set>`,
/// `requested ip <ip> is subnet's gateway`, `requested IP address <ip> is not available in range
/// set <set>`, `<ip> has been allocated to <id>, duplicate allocation is not allowed`, `no IP
/// addresses available in range set: <set>`; [`IpamError::Store`] when writing fails.
pub fn get(
    store: &Store,
    leases: &[Lease],
    set: &RangeSet,
    set_idx: usize,
    id: &str,
    ifname: &str,
    requested: Option<IpAddr>,
) -> Result<IpConfig, IpamError> {
    if let Some(ip) = requested {
        let r = set.range_for(ip).map_err(IpamError::Alloc)?;
        if ip == r.gateway {
            return Err(IpamError::Alloc(format!(
                "requested ip {ip} is subnet's gateway"
            )));
        }
        if !store.reserve(ip, id, ifname, set_idx)? {
            return Err(IpamError::Alloc(format!(
                "requested IP address {ip} is not available in range set {set}"
            )));
        }
        return ip_config(ip, r);
    }
    if let Some(dup) = leases.iter().find(|l| {
        (l.owner.is_attachment(id, ifname) || l.owner.is_legacy_of(id)) && set.contains(l.ip)
    }) {
        return Err(IpamError::Alloc(format!(
            "{} has been allocated to {id}, duplicate allocation is not allowed",
            dup.ip
        )));
    }
    // Addresses known to be taken are skipped without a write; `reserve` still refuses to
    // replace a lease, so a stale view cannot cause a double allocation.
    let taken: HashSet<IpAddr> = leases.iter().map(|l| l.ip).collect();
    for (ip, r) in RangeIter::new(set, store.last_reserved_ip(set_idx)) {
        if taken.contains(&ip) {
            continue;
        }
        // Canonical ranges never yield one (config's invariant); never reserve one regardless.
        if !r.contains(ip) {
            return Err(IpamError::Alloc(format!("{ip} is outside the range {r}")));
        }
        if store.reserve(ip, id, ifname, set_idx)? {
            return ip_config(ip, r);
        }
    }
    Err(IpamError::Alloc(format!(
        "no IP addresses available in range set: {set}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{RawRange, StoreLocation};
    use std::fs;

    /// (subnet, rangeStart, rangeEnd, gateway)
    type R<'a> = (&'a str, Option<&'a str>, Option<&'a str>, Option<&'a str>);

    fn set(ranges: &[R]) -> RangeSet {
        let raw: Vec<RawRange> = ranges
            .iter()
            .map(|(subnet, start, end, gw)| RawRange {
                subnet: Some(subnet.to_string()),
                range_start: start.map(str::to_owned),
                range_end: end.map(str::to_owned),
                gateway: gw.map(str::to_owned),
            })
            .collect();
        RangeSet::canonicalize(&raw).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn walk(set: &RangeSet, last: Option<&str>) -> Vec<String> {
        RangeIter::new(set, last.map(ip))
            .map(|(a, _)| a.to_string())
            .collect()
    }

    #[test]
    fn order_skips_gateway_and_wraps_across_ranges() {
        let s = set(&[("10.0.0.0/29", None, None, None)]);
        assert_eq!(
            walk(&s, None),
            ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"]
        );
        assert_eq!(
            walk(&s, Some("10.0.0.4")),
            ["10.0.0.5", "10.0.0.6", "10.0.0.2", "10.0.0.3", "10.0.0.4"],
            "round-robin after the last reserved, the last one tried last"
        );
        assert_eq!(
            walk(&s, Some("10.9.9.9")),
            walk(&s, None),
            "outside the set: from start"
        );
        let s = set(&[
            ("10.0.0.0/30", None, None, None),
            ("10.0.1.0/30", None, None, Some("10.0.1.2")),
        ]);
        assert_eq!(walk(&s, None), ["10.0.0.2", "10.0.1.1"]);
        assert_eq!(walk(&s, Some("10.0.0.2")), ["10.0.1.1", "10.0.0.2"]);
        let s = set(&[(
            "10.0.0.0/24",
            Some("10.0.0.10"),
            Some("10.0.0.12"),
            Some("10.0.0.11"),
        )]);
        assert_eq!(walk(&s, None), ["10.0.0.10", "10.0.0.12"]);
        let s = set(&[("10.0.0.0/24", Some("10.0.0.1"), Some("10.0.0.1"), None)]);
        assert!(walk(&s, None).is_empty(), "only the gateway: nothing");
        let s = set(&[("2001:db8::/126", None, None, None)]);
        assert_eq!(walk(&s, None), ["2001:db8::2", "2001:db8::3"]);
    }

    fn store(dir: &std::path::Path) -> Store {
        Store::open(&StoreLocation {
            name: "n".into(),
            data_dir: dir.into(),
        })
        .unwrap()
    }

    fn get_one(st: &Store, s: &RangeSet, id: &str, req: Option<&str>) -> Result<String, String> {
        let leases = st.leases().unwrap();
        get(st, &leases, s, 0, id, "eth0", req.map(ip))
            .map(|c| format!("{} gw {}", c.address, c.gateway.unwrap()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn allocation_order_exhaustion_and_reuse() {
        let tmp = tempfile::tempdir().unwrap();
        let st = store(tmp.path());
        let s = set(&[("10.0.0.0/29", None, None, None)]);
        let got: Vec<String> = (0..5)
            .map(|i| get_one(&st, &s, &format!("c{i}"), None).unwrap())
            .collect();
        assert_eq!(got[0], "10.0.0.2/29 gw 10.0.0.1");
        assert_eq!(got[4], "10.0.0.6/29 gw 10.0.0.1");
        assert_eq!(
            get_one(&st, &s, "c9", None).unwrap_err(),
            "no IP addresses available in range set: 10.0.0.1-10.0.0.6"
        );
        fs::remove_file(st.dir().join("10.0.0.3")).unwrap();
        assert_eq!(
            get_one(&st, &s, "c9", None).unwrap(),
            "10.0.0.3/29 gw 10.0.0.1"
        );
        fs::remove_file(st.dir().join("10.0.0.2")).unwrap();
        fs::remove_file(st.dir().join("10.0.0.5")).unwrap();
        assert_eq!(
            get_one(&st, &s, "c10", None).unwrap(),
            "10.0.0.5/29 gw 10.0.0.1",
            "round-robin continues after the last reserved"
        );
    }

    #[test]
    fn duplicates_and_requested_addresses() {
        let tmp = tempfile::tempdir().unwrap();
        let st = store(tmp.path());
        let s = set(&[("10.0.0.0/29", None, None, None)]);
        assert_eq!(
            get_one(&st, &s, "c1", None).unwrap(),
            "10.0.0.2/29 gw 10.0.0.1"
        );
        assert_eq!(
            get_one(&st, &s, "c1", None).unwrap_err(),
            "10.0.0.2 has been allocated to c1, duplicate allocation is not allowed"
        );
        fs::write(st.dir().join("10.0.0.6"), "legacy").unwrap();
        assert!(get_one(&st, &s, "legacy", None)
            .unwrap_err()
            .contains("10.0.0.6 has been allocated to legacy"));
        assert_eq!(
            get_one(&st, &s, "c2", Some("10.0.0.5")).unwrap(),
            "10.0.0.5/29 gw 10.0.0.1"
        );
        assert_eq!(
            get_one(&st, &s, "c3", Some("10.0.0.5")).unwrap_err(),
            "requested IP address 10.0.0.5 is not available in range set 10.0.0.1-10.0.0.6"
        );
        assert_eq!(
            get_one(&st, &s, "c3", Some("10.0.0.1")).unwrap_err(),
            "requested ip 10.0.0.1 is subnet's gateway"
        );
        assert_eq!(
            get_one(&st, &s, "c3", Some("10.0.0.7")).unwrap_err(),
            "10.0.0.7 not in range set 10.0.0.1-10.0.0.6"
        );
        fs::remove_file(st.dir().join("10.0.0.6")).unwrap();
        assert_eq!(
            get_one(&st, &s, "c4", None).unwrap(),
            "10.0.0.6/29 gw 10.0.0.1",
            "a requested address moves the cursor (host-local records it too), else .3"
        );
    }
}

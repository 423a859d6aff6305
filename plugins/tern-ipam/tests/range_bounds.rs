//! case-28 (`../shared/cases/README.md`; containernetworking/plugins#1292, #1295): an IPAM range
//! never hands out an address outside itself. tern-ipam is run directly (`CNI_COMMAND=ADD`) as a
//! runtime or a main plugin would.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::IpAddr;

use common::{add, addresses, del, Ipam, Net};
use ipnetwork::IpNetwork;
use serde_json::{json, Value};

/// The top /126 of the IPv6 space and its four addresses.
const V6_TOP: &str = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffc/126";
const V6_NET: &str = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffc";
const V6_FFFE: &str = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe";
const V6_LAST: &str = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";

/// Asserts that nothing was written for a refused ADD: no reservation, no `last_reserved_ip.*`.
fn assert_no_files(n: &Net, what: &str) {
    let written: Vec<String> = n
        .files()
        .into_iter()
        .filter(|f| f.parse::<IpAddr>().is_ok() || f.starts_with("last_reserved_ip"))
        .collect();
    assert!(written.is_empty(), "{what}: files written: {written:?}");
}

/// case-28: a range whose `rangeStart` or `rangeEnd` is the network or broadcast address, or
/// whose start lies beyond its (explicit or defaulted) end, is refused with code 7 and an error
/// naming the field; no panic, no file. Both the `ranges` and the legacy top-level form, IPv4 and
/// the IPv6 equivalents at the top of `ffff:…`.
#[test]
fn case_28_out_of_bounds_ranges_are_refused() {
    if tern_testkit::root::skip() {
        return;
    }
    let cases: Vec<(Value, &str)> = vec![
        // The broadcast address, beyond the defaulted end .2.
        (
            json!({"subnet": "10.97.8.0/30", "rangeStart": "10.97.8.3"}),
            "RangeStart",
        ),
        // The network address as the end.
        (
            json!({"subnet": "10.97.8.0/30", "rangeEnd": "10.97.8.0"}),
            "RangeEnd",
        ),
        // The top of the IPv4 space: next after the broadcast address wraps to 0.0.0.0.
        (
            json!({"subnet": "255.255.255.252/30", "rangeStart": "255.255.255.255"}),
            "RangeStart",
        ),
        // The network address as the start, the broadcast address as the end.
        (
            json!({"subnet": "10.97.8.0/29", "rangeStart": "10.97.8.0"}),
            "RangeStart",
        ),
        (
            json!({"subnet": "10.97.8.0/29", "rangeEnd": "10.97.8.7"}),
            "RangeEnd",
        ),
        // IPv6 at the top of the space: the last address past an explicit end, the network
        // address (subnet-router anycast, RFC 4291 2.6.1) as the end, and as the start.
        (
            json!({"subnet": V6_TOP, "rangeStart": V6_LAST, "rangeEnd": V6_FFFE}),
            "RangeStart",
        ),
        (json!({"subnet": V6_TOP, "rangeEnd": V6_NET}), "RangeEnd"),
        (
            json!({"subnet": V6_TOP, "rangeStart": V6_NET}),
            "RangeStart",
        ),
    ];
    for (range, field) in cases {
        for legacy in [false, true] {
            let ipam = if legacy {
                range.clone()
            } else {
                json!({"ranges": [[range.clone()]]})
            };
            let n = Net::new();
            let c = n.conf("1.0.0", ipam.clone());
            let o = add(Ipam::Tern, "c28", &c);
            let what = format!("ADD {ipam}");
            assert!(!o.success(), "{what} must fail:\n{}", o.describe());
            assert!(
                !o.stderr.contains("panicked"),
                "{what} panicked:\n{}",
                o.describe()
            );
            assert_eq!(o.error_code(), Some(7), "{what}:\n{}", o.describe());
            let msg = o.error_msg().unwrap_or("");
            assert!(msg.contains(field), "{what}: {msg:?} does not name {field}");
            assert_no_files(&n, &what);
            // The runtime's DEL of the failed ADD succeeds.
            let d = del(Ipam::Tern, "c28", &c);
            assert!(d.success(), "DEL after {what}:\n{}", d.describe());
        }
    }
}

/// case-28: /31 and /32 (and IPv6 /127, /128) behave as the reference host-local documents
/// them: `Network <cidr> too small to allocate from`, code 7, nothing written.
#[test]
fn case_28_point_to_point_and_host_ranges_are_too_small() {
    if tern_testkit::root::skip() {
        return;
    }
    for subnet in [
        "10.97.8.0/31",
        "10.97.8.1/32",
        "255.255.255.254/31",
        "fd97::/127",
        "fd97::1/128",
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127",
    ] {
        let n = Net::new();
        let c = n.conf("1.0.0", json!({"ranges": [[{"subnet": subnet}]]}));
        let o = add(Ipam::Tern, "c28", &c);
        assert_eq!(o.error_code(), Some(7), "{subnet}:\n{}", o.describe());
        assert_eq!(
            o.error_msg(),
            Some(
                format!("invalid range set 0: Network {subnet} too small to allocate from")
                    .as_str()
            ),
            "{subnet}"
        );
        assert_no_files(&n, subnet);
    }
}

/// Whether `ip` may be handed out from `subnet`: inside it, and for IPv4 neither the network nor
/// the broadcast address; for IPv6 not the network (subnet-router anycast) address.
fn usable(subnet: IpNetwork, ip: IpAddr) -> bool {
    let inside = subnet.contains(ip) && ip != subnet.network();
    match subnet {
        IpNetwork::V4(n) => inside && ip != IpAddr::V4(n.broadcast()),
        IpNetwork::V6(_) => inside,
    }
}

/// case-28: every address tern-ipam hands out, until the range is exhausted, lies inside the
/// range and is neither the network nor the broadcast address; exhaustion is code 102, not a walk
/// into the next subnet (or round the top of the address space).
#[test]
fn case_28_every_address_handed_out_is_inside_its_range() {
    if tern_testkit::root::skip() {
        return;
    }
    let cases: Vec<(Value, usize)> = vec![
        (json!({"subnet": "10.97.8.0/30"}), 1), // .1 is the gateway: .2 only
        (json!({"subnet": "10.97.8.0/30", "gateway": "10.97.8.2"}), 1), // .1 only
        (
            json!({"subnet": "10.97.8.0/30", "rangeStart": "10.97.8.2"}),
            1,
        ),
        (
            json!({"subnet": "255.255.255.252/30", "gateway": "10.0.0.1"}),
            2,
        ),
        (json!({"subnet": "255.255.255.248/29"}), 5),
        (
            json!({"subnet": "255.255.255.248/29", "rangeStart": "255.255.255.254", "gateway": "255.255.255.249"}),
            1,
        ),
        (json!({"subnet": V6_TOP}), 2), // fffd, fffe, ffff minus the gateway fffd
        (json!({"subnet": V6_TOP, "rangeStart": V6_LAST}), 1),
        (json!({"subnet": "fd97::/125", "rangeEnd": "fd97::7"}), 6),
    ];
    for (range, want) in cases {
        let subnet: IpNetwork = range["subnet"].as_str().unwrap().parse().unwrap();
        let n = Net::new();
        let c = n.conf("1.0.0", json!({"ranges": [[range.clone()]]}));
        let mut got = Vec::new();
        for i in 0..want + 1 {
            let o = add(Ipam::Tern, &format!("c{i}"), &c);
            if i == want {
                assert_eq!(
                    o.error_code(),
                    Some(102),
                    "{range}: ADD {i} past {want} addresses:\n{}",
                    o.describe()
                );
                break;
            }
            assert!(o.success(), "{range}: ADD {i}:\n{}", o.describe());
            let addrs = addresses(&o);
            assert_eq!(addrs.len(), 1, "{range}: {addrs:?}");
            let a: IpNetwork = addrs[0].parse().unwrap();
            assert_eq!(a.prefix(), subnet.prefix(), "{range}: {a}");
            assert!(usable(subnet, a.ip()), "{range}: handed out {a}");
            assert!(!got.contains(&a.ip()), "{range}: {a} handed out twice");
            got.push(a.ip());
        }
    }
}

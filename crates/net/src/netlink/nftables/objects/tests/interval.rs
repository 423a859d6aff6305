//! A named interval set (an ipBlock's) and its elements against nft's own: the captures
//! `interval_*` of `nft-1.0.6.txt`, of `table inet tern_netpol { set p4_9 { type ipv4_addr;
//! flags interval; elements = { … } } }` (the engine's script of a new set) for the element
//! lists named, and `delete set` of one.

use std::net::{IpAddr, Ipv4Addr};

use super::super::{Op, SetKey};
use super::{nft, ours};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn set(v4: bool, ranges: &[(&str, &str)]) -> Op {
    let (name, key) = if v4 {
        ("p4_9", SetKey::Ipv4)
    } else {
        ("p6_9", SetKey::Ipv6)
    };
    Op::NewIntervalSet {
        name: name.into(),
        key,
        ranges: ranges.iter().map(|(lo, hi)| (ip(lo), ip(hi))).collect(),
    }
}

#[test]
fn an_interval_set_and_its_elements_are_what_nft_writes() {
    let cases: Vec<(&str, Op)> = vec![
        (
            "10.0.0.0-8_192.168.1.0-24",
            set(
                true,
                &[
                    ("10.0.0.0", "10.255.255.255"),
                    ("192.168.1.0", "192.168.1.255"),
                ],
            ),
        ),
        (
            "10.0.0.0-8_except_10.64.0.0-16",
            set(
                true,
                &[
                    ("10.0.0.0", "10.63.255.255"),
                    ("10.65.0.0", "10.255.255.255"),
                ],
            ),
        ),
        (
            "fd00--64_fd00-1--1",
            set(
                false,
                &[
                    ("fd00::", "fd00::ffff:ffff:ffff:ffff"),
                    ("fd00:1::1", "fd00:1::1"),
                ],
            ),
        ),
        ("0.0.0.0-0", set(true, &[("0.0.0.0", "255.255.255.255")])),
        (
            "0.0.0.0-0_except_10.0.0.0-8",
            set(
                true,
                &[
                    ("0.0.0.0", "9.255.255.255"),
                    ("11.0.0.0", "255.255.255.255"),
                ],
            ),
        ),
        (
            "10.0.0.1_192.168.0.0-255.255.255.255",
            set(
                true,
                &[("10.0.0.1", "10.0.0.1"), ("192.168.0.0", "255.255.255.255")],
            ),
        ),
        (
            "--0",
            set(false, &[("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")]),
        ),
    ];
    for (name, op) in cases {
        let names = [
            format!("interval_set_{name}"),
            format!("interval_elements_{name}"),
        ];
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(
            ours(std::slice::from_ref(&op)),
            nft(&names),
            "{name}: {op:?}"
        );
    }
    // An empty interval set: the set alone, no element message.
    assert_eq!(ours(&[set(true, &[])]), nft(&["interval_set_empty"]));
    // Removing one is removing any named set.
    assert_eq!(
        ours(&[Op::DeleteSet("p4_9".into())]),
        nft(&["delete_interval_set_p4_9"])
    );
}

/// A set too large for one message's element list is split between ranges, never between a
/// range's start and its end, and every message names the set by its id too.
#[test]
fn a_large_interval_set_splits_between_ranges() {
    let ranges: Vec<(IpAddr, IpAddr)> = (1..=1000u32)
        .map(|i| {
            let a = IpAddr::V4(Ipv4Addr::from(i * 4));
            (a, a)
        })
        .collect();
    let op = Op::NewIntervalSet {
        name: "p4_9".into(),
        key: SetKey::Ipv4,
        ranges,
    };
    let msgs = ours(&[op]);
    let lists: Vec<_> = msgs.iter().filter(|(ty, _)| *ty == 12).collect();
    assert!(lists.len() > 1, "{} element messages", lists.len());
    let mut total = 0;
    for (_, tree) in lists {
        assert!(tree.iter().any(|a| a.ty == 4), "the set's id");
        let elements = &tree.iter().find(|a| a.ty == 3).unwrap().children;
        let first_is_end = elements[0].children.iter().any(|a| a.ty == 3);
        let last_is_end = elements.last().unwrap().children.iter().any(|a| a.ty == 3);
        assert!(
            total == 0 || !first_is_end,
            "a message starts with a range's start"
        );
        assert!(last_is_end, "a message ends with a range's end");
        total += elements.len();
    }
    // The leading end at 0, then a start and an end per address.
    assert_eq!(total, 1 + 2 * 1000);
}

/// A rule's port set too large for one attribute (an attribute's length is 16 bits: 5,000
/// single ports, a plain set of 5,000 elements, about 80 kB) goes out as several element messages, each
/// of which parses whole and together hold every element; written as one, its length wrapped
/// and the kernel kept 904 of the 5,000 ports without a word.
#[test]
fn a_port_set_past_an_attributes_length_is_split_between_messages() {
    use super::super::super::rule::{Match, Rule, Verdict};
    let ports: Vec<(u16, u16)> = (0..5000).map(|i| (2 * i + 1, 2 * i + 1)).collect();
    let rule = Op::AddRule {
        chain: "in_1".into(),
        rule: Rule {
            matches: vec![Match::Ports(ports)],
            verdict: Verdict::Accept,
        },
    };
    let element_lists: Vec<usize> = ours(&[rule])
        .iter()
        .filter(|(ty, _)| *ty == 12)
        .map(|(_, tree)| {
            tree.iter()
                .filter(|a| a.ty == 3)
                .map(|a| a.children.len())
                .sum()
        })
        .collect();
    assert!(element_lists.len() > 1, "{element_lists:?}");
    assert_eq!(element_lists.iter().sum::<usize>(), 5000);
}

//! The set, chain and rule messages against nft's own. `nft-1.0.6.txt` holds, one a line, the
//! body (nfgenmsg and attributes) and type of each message nft 1.0.6 sent for the scripts named
//! there (a chain `in_1` with one rule of each shape tern writes, port sets of single ports,
//! ranges and a range to 65535, new address sets, deletes), captured with
//! `strace -f -e trace=sendmsg -s 65535 -xx nft -f …` on this machine (little-endian). Compared
//! as attribute trees, with two differences that are ours: set ids are nft's own numbering (the
//! kernel binds a lookup by the id only within one batch: the tests check ours bind), and nft's
//! lookup of a set that already exists carries that set's id from nft's cache, ours the name
//! alone (the kernel looks the name up first).

#![cfg(target_endian = "little")]

use super::super::encode::batch;
use super::super::rule::{Match, Rule, Verdict};
use super::{Op, SetKey};
use crate::netlink::nftables::{Element, SetChange, Verb, NFPROTO_INET};

const NFT: &str = include_str!("nft-1.0.6.txt");

/// An attribute: its type (flags off), payload, and children when nested.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Attr {
    ty: u16,
    value: Vec<u8>,
    children: Vec<Attr>,
}

fn attrs(mut b: &[u8]) -> Vec<Attr> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let len = usize::from(u16::from_le_bytes([b[0], b[1]]));
        let ty = u16::from_le_bytes([b[2], b[3]]);
        let value = b[4..len].to_vec();
        let children = if ty & 0x8000 != 0 {
            attrs(&value)
        } else {
            Vec::new()
        };
        out.push(Attr {
            ty: ty & 0x3fff,
            value: if children.is_empty() {
                value
            } else {
                Vec::new()
            },
            children,
        });
        b = &b[((len + 3) & !3).min(b.len())..];
    }
    out
}

/// Set ids blanked; a named (not anonymous) lookup's id dropped.
fn normalize(msg_type: u8, tree: &mut [Attr]) {
    for a in tree.iter_mut() {
        if (msg_type == 9 && a.ty == 10) || (msg_type == 12 && a.ty == 4) {
            a.value.clear();
        }
    }
    fn lookups(tree: &mut [Attr]) {
        for a in tree.iter_mut() {
            let name = a
                .children
                .iter()
                .find(|c| c.ty == 1)
                .map(|c| c.value.clone());
            if name.as_deref() == Some(b"lookup\0") {
                for data in a.children.iter_mut().filter(|c| c.ty == 2) {
                    let anonymous = data.children.iter().any(|c| c.value == b"__set%d\0");
                    data.children.retain(|c| c.ty != 4 || anonymous);
                    data.children
                        .iter_mut()
                        .filter(|c| c.ty == 4)
                        .for_each(|c| c.value.clear());
                }
            }
            lookups(&mut a.children);
        }
    }
    lookups(tree);
}

/// nft's messages named `names`, as (type, tree).
fn nft(names: &[&str]) -> Vec<(u8, Vec<Attr>)> {
    names
        .iter()
        .map(|n| {
            let line = NFT
                .lines()
                .find(|l| l.split(' ').next() == Some(n))
                .unwrap_or_else(|| panic!("{n} not captured"));
            let parts: Vec<&str> = line.split(' ').collect();
            let bytes: Vec<u8> = (0..parts[2].len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&parts[2][i..i + 2], 16).unwrap())
                .collect();
            let mut tree = attrs(&bytes[4..]);
            let ty: u8 = parts[1].parse().unwrap();
            normalize(ty, &mut tree);
            (ty, tree)
        })
        .collect()
}

/// Our messages for `ops`, as (type, tree), and the raw ids of sets made and looked up.
fn ours(ops: &[Op]) -> Vec<(u8, Vec<Attr>)> {
    let b = batch(NFPROTO_INET, "tern_netpol", ops, 1);
    let mut out = Vec::new();
    let mut at = 0;
    while at + 16 <= b.bytes.len() {
        let len = u32::from_le_bytes(b.bytes[at..at + 4].try_into().unwrap()) as usize;
        let ty = u16::from_le_bytes([b.bytes[at + 4], b.bytes[at + 5]]);
        if ty >> 8 == 10 {
            let mut tree = attrs(&b.bytes[at + 20..at + len]);
            normalize(ty as u8, &mut tree);
            out.push(((ty & 0xff) as u8, tree));
        }
        at += (len + 3) & !3;
    }
    out
}

fn rule_in(chain: &str, matches: Vec<Match>, verdict: Verdict) -> Op {
    Op::AddRule {
        chain: chain.into(),
        rule: Rule { matches, verdict },
    }
}

fn rule(matches: Vec<Match>, verdict: Verdict) -> Op {
    rule_in("in_1", matches, verdict)
}

fn peer(v4: bool, destination: bool, set: &str) -> Match {
    Match::Peer {
        v4,
        destination,
        set: set.into(),
    }
}

/// Each `(capture names, op)`: `op` alone encodes to exactly those nft 1.0.6 messages.
fn assert_each_is_what_nft_writes(cases: Vec<(&[&str], Op)>) {
    for (names, op) in cases {
        assert_eq!(
            ours(std::slice::from_ref(&op)),
            nft(names),
            "{names:?}: {op:?}"
        );
    }
}

#[test]
fn each_rule_shape_is_what_nft_writes() {
    let (tcp, udp, sctp) = (
        Match::Protocol(6),
        Match::Protocol(17),
        Match::Protocol(132),
    );
    let accept = || Verdict::Accept;
    assert_each_is_what_nft_writes(vec![
        (&["chain_in_1"], Op::NewChain("in_1".into())),
        (
            &["rule_saddr4"],
            rule(vec![peer(true, false, "p4_1")], accept()),
        ),
        (
            &["rule_saddr6"],
            rule(vec![peer(false, false, "p6_1")], accept()),
        ),
        (
            &["rule_daddr4_tcp_80"],
            rule(
                vec![
                    peer(true, true, "p4_1"),
                    tcp.clone(),
                    Match::Ports(vec![(80, 80)]),
                ],
                accept(),
            ),
        ),
        (
            &[
                "set_ports_80_443_1000-2000",
                "elements_ports_80_443_1000-2000",
                "rule_saddr4_tcp_ports",
            ],
            rule(
                vec![
                    peer(true, false, "p4_1"),
                    tcp.clone(),
                    Match::Ports(vec![(80, 80), (443, 443), (1000, 2000)]),
                ],
                accept(),
            ),
        ),
        (
            &["rule_udp_1000-2000"],
            rule(vec![udp, Match::Ports(vec![(1000, 2000)])], accept()),
        ),
        (&["rule_sctp"], rule(vec![sctp], accept())),
        (
            &["rule_endpoint4"],
            rule(
                vec![Match::Endpoint {
                    v4: true,
                    destination: false,
                    set: "e4_2".into(),
                }],
                accept(),
            ),
        ),
        (
            &["rule_endpoint6"],
            rule(
                vec![Match::Endpoint {
                    v4: false,
                    destination: true,
                    set: "e6_2".into(),
                }],
                accept(),
            ),
        ),
        (&["rule_jump"], rule(vec![], Verdict::Jump("in_2".into()))),
        (&["rule_return"], rule(vec![], Verdict::Return)),
        (&["rule_drop"], rule(vec![], Verdict::Drop)),
    ]);
}

#[test]
fn each_port_set_chain_and_set_object_is_what_nft_writes() {
    let tcp = Match::Protocol(6);
    let accept = || Verdict::Accept;
    assert_each_is_what_nft_writes(vec![
        (&["chain_in_3"], Op::NewChain("in_3".into())),
        (
            &[
                "set_ports_80_443",
                "elements_ports_80_443",
                "rule_tcp_ports_80_443",
            ],
            rule_in(
                "in_3",
                vec![tcp.clone(), Match::Ports(vec![(80, 80), (443, 443)])],
                accept(),
            ),
        ),
        (
            &[
                "set_ports_0-10_80",
                "elements_ports_0-10_80",
                "rule_tcp_ports_0-10_80",
            ],
            rule_in(
                "in_3",
                vec![tcp.clone(), Match::Ports(vec![(0, 10), (80, 80)])],
                accept(),
            ),
        ),
        (
            &[
                "set_ports_80_60000-65535",
                "elements_ports_80_60000-65535",
                "rule_tcp_ports_80_60000-65535",
            ],
            rule_in(
                "in_3",
                vec![tcp.clone(), Match::Ports(vec![(80, 80), (60000, 65535)])],
                accept(),
            ),
        ),
        (
            &["rule_tcp_0-65535"],
            rule_in("in_3", vec![tcp, Match::Ports(vec![(0, 65535)])], accept()),
        ),
        (
            &["set_p4_9"],
            Op::NewSet {
                name: "p4_9".into(),
                key: SetKey::Ipv4,
            },
        ),
        (
            &["set_p6_9"],
            Op::NewSet {
                name: "p6_9".into(),
                key: SetKey::Ipv6,
            },
        ),
        (&["delete_set_p4_9"], Op::DeleteSet("p4_9".into())),
        (&["delete_chain_in_3"], Op::DeleteChain("in_3".into())),
    ]);
}

/// The anonymous set, its elements and the rule's lookup carry one id, distinct per rule of a
/// batch; a new named set's elements and every message but the last are not acked.
#[test]
fn a_rules_port_set_is_bound_by_its_own_id() {
    let ports = |p: u16| Op::AddRule {
        chain: "in_1".into(),
        rule: Rule {
            matches: vec![Match::Ports(vec![(p, p), (p + 2, p + 2)])],
            verdict: Verdict::Accept,
        },
    };
    let new_set = Op::NewSet {
        name: "p4_9".into(),
        key: SetKey::Ipv4,
    };
    let add = Op::Elements(SetChange {
        verb: Verb::Add,
        set: "p4_9".into(),
        elements: vec![Element {
            key: "10.0.0.1".parse().unwrap(),
            jump: None,
        }],
    });
    let b = batch(
        NFPROTO_INET,
        "tern_netpol",
        &[new_set, ports(80), ports(90), add],
        1,
    );
    // The raw ids: the named set's, then each anonymous set's (NEWSET, NEWSETELEM, lookup).
    let mut ids = Vec::new();
    let mut at = 0;
    let mut acked = Vec::new();
    while at + 16 <= b.bytes.len() {
        let len = u32::from_le_bytes(b.bytes[at..at + 4].try_into().unwrap()) as usize;
        let ty = u16::from_le_bytes([b.bytes[at + 4], b.bytes[at + 5]]);
        let flags = u16::from_le_bytes([b.bytes[at + 6], b.bytes[at + 7]]);
        acked.push(flags & 0x4 != 0);
        let tree = attrs(&b.bytes[at + 20..at + len]);
        let id = |t: &[Attr], ty: u16| t.iter().find(|a| a.ty == ty).map(|a| a.value.clone());
        match ty {
            0x0a09 => ids.push(id(&tree, 10)),
            0x0a0c => ids.push(id(&tree, 4)),
            0x0a06 => {
                let exprs = &tree.iter().find(|a| a.ty == 4).unwrap().children;
                let data = &exprs.last().unwrap().children;
                let lookup = &exprs[exprs.len() - 2].children[1].children;
                assert!(!data.is_empty());
                ids.push(id(lookup, 4));
            }
            _ => {}
        }
        at += (len + 3) & !3;
    }
    let be = |v: u32| Some(v.to_be_bytes().to_vec());
    assert_eq!(
        ids,
        [be(1), be(2), be(2), be(2), be(3), be(3), be(3), None],
        "named set 1; the port sets 2 and 3; the element add names its set by name"
    );
    let n = acked.len();
    assert_eq!(acked[..n - 2].iter().filter(|a| **a).count(), 0);
    assert!(acked[n - 2], "the last message before BATCH_END is acked");
}

mod interval;

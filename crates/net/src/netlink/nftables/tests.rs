//! The encoder's bytes against nft's own. The `NFT` constants are the element messages nft
//! 1.0.6 sent for `nft add element inet tern_netpol p4_x '{ 10.1.2.3 }'` (and the others named
//! below), captured with `strace -e trace=sendmsg -xx -s 4096` on this machine (little-endian,
//! so the netlink headers are too). Two differences are ours, and the tests make them
//! explicitly: nft's adds carry `NFTA_SET_ELEM_LIST_SET_ID` (it names a set made in the same
//! batch; ours exist) and only `NLM_F_CREATE`, where tern's carry `NLM_F_EXCL | NLM_F_ACK`
//! (an element already there is an error, and every message is acked); nft's delete has no
//! `NLM_F_ACK`.

#![cfg(target_endian = "little")]

use super::encode::{batch, element_at};
use super::{Element, Op, SetChange, Verb, NFPROTO_INET};

/// `nft add element inet tern_netpol p4_x '{ 10.1.2.3 }'`: the NEWSETELEM message.
const NFT_ADD_V4: &[u8] = &[
    76, 0, 0, 0, 0x0c, 0x0a, 0x01, 0x04, 1, 0, 0, 0, 0, 0, 0, 0, // nlmsghdr
    1, 0, 0, 0, // nfgenmsg: NFPROTO_INET, v0, res_id 0
    16, 0, 1, 0, b't', b'e', b'r', b'n', b'_', b'n', b'e', b't', b'p', b'o', b'l', 0, // table
    9, 0, 2, 0, b'p', b'4', b'_', b'x', 0, 0, 0, 0, // set
    8, 0, 4, 0, 0, 0, 0, 1, // NFTA_SET_ELEM_LIST_SET_ID
    20, 0, 3, 0x80, 16, 0, 1, 0x80, 12, 0, 1, 0x80, 8, 0, 1, 0, 10, 1, 2, 3, // elements
];

/// `nft add element inet tern_netpol p6_x '{ fd00::1:2 }'`: the NEWSETELEM message.
const NFT_ADD_V6: &[u8] = &[
    88, 0, 0, 0, 0x0c, 0x0a, 0x01, 0x04, 1, 0, 0, 0, 0, 0, 0, 0, // nlmsghdr
    1, 0, 0, 0, // nfgenmsg
    16, 0, 1, 0, b't', b'e', b'r', b'n', b'_', b'n', b'e', b't', b'p', b'o', b'l', 0, // table
    9, 0, 2, 0, b'p', b'6', b'_', b'x', 0, 0, 0, 0, // set
    8, 0, 4, 0, 0, 0, 0, 2, // NFTA_SET_ELEM_LIST_SET_ID
    32, 0, 3, 0x80, 28, 0, 1, 0x80, 24, 0, 1, 0x80, 20, 0, 1, 0, // elements, key, value
    0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, // fd00::1:2, network order
];

/// `nft add element inet tern_netpol ingress4 '{ 10.1.2.3 : jump in_a }'`.
const NFT_ADD_VERDICT: &[u8] = &[
    108, 0, 0, 0, 0x0c, 0x0a, 0x01, 0x04, 1, 0, 0, 0, 0, 0, 0, 0, // nlmsghdr
    1, 0, 0, 0, // nfgenmsg
    16, 0, 1, 0, b't', b'e', b'r', b'n', b'_', b'n', b'e', b't', b'p', b'o', b'l', 0, // table
    13, 0, 2, 0, b'i', b'n', b'g', b'r', b'e', b's', b's', b'4', 0, 0, 0, 0, // set
    8, 0, 4, 0, 0, 0, 0, 3, // NFTA_SET_ELEM_LIST_SET_ID
    48, 0, 3, 0x80, 44, 0, 1, 0x80, 12, 0, 1, 0x80, 8, 0, 1, 0, 10, 1, 2, 3, // key
    28, 0, 2, 0x80, 24, 0, 2, 0x80, 8, 0, 1, 0, 0xff, 0xff, 0xff, 0xfd, // data: NFT_JUMP
    9, 0, 2, 0, b'i', b'n', b'_', b'a', 0, 0, 0, 0, // chain
];

/// `nft delete element inet tern_netpol p4_x '{ 10.1.2.3 }'`: the DELSETELEM message.
const NFT_DELETE_V4: &[u8] = &[
    68, 0, 0, 0, 0x0e, 0x0a, 0x01, 0x00, 1, 0, 0, 0, 0, 0, 0, 0, // nlmsghdr
    1, 0, 0, 0, // nfgenmsg
    16, 0, 1, 0, b't', b'e', b'r', b'n', b'_', b'n', b'e', b't', b'p', b'o', b'l', 0, // table
    9, 0, 2, 0, b'p', b'4', b'_', b'x', 0, 0, 0, 0, // set
    20, 0, 3, 0x80, 16, 0, 1, 0x80, 12, 0, 1, 0x80, 8, 0, 1, 0, 10, 1, 2, 3, // elements
];

/// nft's message as tern sends it: the set-id attribute (the 8 bytes after the set name)
/// dropped, the length fixed, `flags` in place of nft's.
fn as_tern_sends(nft: &[u8], set_id_at: Option<usize>, flags: u16) -> Vec<u8> {
    let mut m = nft.to_vec();
    if let Some(at) = set_id_at {
        m.drain(at..at + 8);
    }
    let len = m.len() as u32;
    m[0..4].copy_from_slice(&len.to_le_bytes());
    m[6..8].copy_from_slice(&flags.to_le_bytes());
    m
}

/// `NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE`, and `NLM_F_REQUEST | NLM_F_ACK`.
const ADD_FLAGS: u16 = 0x605;
const DELETE_FLAGS: u16 = 0x005;

fn one(verb: Verb, set: &str, key: &str, jump: Option<&str>) -> Vec<u8> {
    let change = SetChange {
        verb,
        set: set.into(),
        elements: vec![Element {
            key: key.parse().unwrap(),
            jump: jump.map(str::to_owned),
        }],
    };
    let b = batch(NFPROTO_INET, "tern_netpol", &[Op::Elements(change)], 7);
    assert_eq!(b.begin_seq, 7);
    assert_eq!(b.sent.len(), 1);
    assert_eq!(b.sent[0].seq, 8);
    // The batch markers: nft's bytes but for the sequence numbers.
    let begin = [
        20, 0, 0, 0, 0x10, 0, 1, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10,
    ];
    let end = [
        20, 0, 0, 0, 0x11, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10,
    ];
    assert_eq!(b.bytes[..20], begin);
    assert_eq!(b.bytes[b.bytes.len() - 20..], end);
    let mut msg = b.bytes[20..b.bytes.len() - 20].to_vec();
    msg[8..12].copy_from_slice(&1u32.to_le_bytes()); // nft's sequence number
    msg
}

#[test]
fn a_v4_add_is_nfts_bytes() {
    let ours = one(Verb::Add, "p4_x", "10.1.2.3", None);
    assert_eq!(ours, as_tern_sends(NFT_ADD_V4, Some(48), ADD_FLAGS));
}

#[test]
fn a_v6_add_is_nfts_bytes() {
    let ours = one(Verb::Add, "p6_x", "fd00::1:2", None);
    assert_eq!(ours, as_tern_sends(NFT_ADD_V6, Some(48), ADD_FLAGS));
}

#[test]
fn a_verdict_map_add_is_nfts_bytes() {
    let ours = one(Verb::Add, "ingress4", "10.1.2.3", Some("in_a"));
    assert_eq!(ours, as_tern_sends(NFT_ADD_VERDICT, Some(52), ADD_FLAGS));
}

#[test]
fn a_v4_delete_is_nfts_bytes() {
    let ours = one(Verb::Delete, "p4_x", "10.1.2.3", None);
    assert_eq!(ours, as_tern_sends(NFT_DELETE_V4, None, DELETE_FLAGS));
}

/// A change too big for one attribute goes in several messages, each element once, and an
/// extended ack's offset names the element it points into.
#[test]
fn a_big_change_splits_and_offsets_name_elements() {
    let elements: Vec<Element> = (0..10_000u32)
        .map(|i| Element {
            key: std::net::Ipv6Addr::from(u128::from(i)).into(),
            jump: None,
        })
        .collect();
    let change = SetChange {
        verb: Verb::Add,
        set: "p6_x".into(),
        elements,
    };
    let b = batch(NFPROTO_INET, "tern_netpol", &[Op::Elements(change)], 1);
    assert!(b.sent.len() >= 5, "{}", b.sent.len());
    let carried: Vec<usize> = b
        .sent
        .iter()
        .flat_map(|s| s.elements.iter().map(|(_, k)| *k))
        .collect();
    assert_eq!(carried, (0..10_000).collect::<Vec<_>>());
    let second = &b.sent[1];
    let (start, k) = second.elements[3];
    assert_eq!(element_at(second, start + 5), Some(k));
    assert_eq!(element_at(second, 0), None);
}

/// A nest longer than 16 bits stops the encoder instead of being written modulo 2^16 (the
/// kernel would read the truncated list and keep part of a set without an error).
#[test]
#[should_panic(expected = "over 16 bits")]
fn a_nest_past_an_attributes_length_is_refused_not_wrapped() {
    use super::encode::{nest_end, nest_start};
    let mut buf = Vec::new();
    let at = nest_start(&mut buf, 3);
    buf.resize(at + 70_000, 0);
    nest_end(&mut buf, at);
}

/// The writer turns that stop into a refused batch, before anything is sent, so the agent's
/// syncer falls back to nft (needs no root: nothing reaches the kernel; the table is one no
/// agent uses, in case a regression ever sent it).
#[test]
fn a_batch_the_encoder_cannot_write_is_an_error_and_nothing_is_sent() {
    let writer = super::ElementWriter::new(NFPROTO_INET, "tern_test_never_sent").unwrap();
    let change = SetChange {
        verb: Verb::Add,
        set: "p".repeat(70_000),
        elements: vec![Element {
            key: "10.1.2.3".parse().unwrap(),
            jump: None,
        }],
    };
    let e = writer.write(&[change]).unwrap_err().to_string();
    assert!(
        e.contains("16-bit length") && e.contains("nothing sent"),
        "{e}"
    );
}

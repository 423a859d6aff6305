//! Datagrams captured from NFNLGRP_NFTABLES in a scratch netns (kernel 6.18, nft 1.0.6: a
//! NETLINK_NETFILTER socket joined to group 7, each datagram printed in hex), one per `nft` command:
//! `add table inet t; add set inet t p { type ipv4_addr; }; add set inet t i { type ipv4_addr;
//! flags interval; }; add set inet t s6 { type ipv6_addr; }`, then `add element inet t p {
//! 10.251.3.7 }`, `add element inet t i { 172.16.4.0/24, 10.9.0.5-10.9.0.9 }`, `delete element
//! inet t i { 172.16.4.0/24 }`, `add element inet t s6 { fd00::a }`.

use super::*;

const CREATE: &str = "38000000000a000001000000bb72000001000002060001007400000008000300000000030c0004000000000000000001080002000000000070000000090a000402000000bb72000001000002060001007400000006000200700000000c0010000000000000000001080004000000000708000500000000040a000d00000402000000000004000900170013003078666666666666666638323530363630300000080014000000000078000000090a000403000000bb72000001000002060001007400000006000200690000000c00100000000000000000020800030000000004080004000000000708000500000000040a000d00000402000000000004000900170013003078666666666666666638323530363761300000080014000000000070000000090a000404000000bb72000001000002060001007400000007000200733600000c0010000000000000000003080004000000000808000500000000100a000d000004020000000000040009001700130030786666666666666666383235303636303000000800140000000000";
const GEN: &str =
    "2c0000000f0a000001000000bb72000000000002080001000000000208000200000072bb080003006e667400";
const ADD_PLAIN: &str = "380000000c0a000400000000e9720000010000030600010074000000060002007000000014000300100001000c000100080001000afb0307";
const ADD_INTERVALS: &str = "400000000c0a000400000000f272000001000004060001007400000006000200690000001c000300180001000c00010008000100000000000800030000000001380000000c0a000400000000f2720000010000040600010074000000060002006900000014000300100001000c000100080001000a090005400000000c0a000400000000f272000001000004060001007400000006000200690000001c000300180001000c000100080001000a09000a0800030000000001380000000c0a000400000000f2720000010000040600010074000000060002006900000014000300100001000c00010008000100ac100400400000000c0a000400000000f272000001000004060001007400000006000200690000001c000300180001000c00010008000100ac1005000800030000000001";
const DEL_INTERVAL: &str = "380000000e0a0000000000000d730000010000050600010074000000060002006900000014000300100001000c00010008000100ac100400400000000e0a0000000000000d73000001000005060001007400000006000200690000001c000300180001000c00010008000100ac1005000800030000000001";
const ADD_V6: &str = "440000000c0a000400000000237300000100000606000100740000000700020073360000200003001c0001001800010014000100fd00000000000000000000000000000a";

fn bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// (set, deleted, address, end) of each element event.
fn elems(hex: &str) -> Vec<(String, bool, String, bool)> {
    events(&bytes(hex))
        .into_iter()
        .filter_map(|e| match e {
            Event::Elem {
                table,
                set,
                deleted,
                key,
                end,
            } => {
                assert_eq!(table, "t");
                Some((set, deleted, address(&key)?.to_string(), end))
            }
            _ => None,
        })
        .collect()
}

fn e(set: &str, deleted: bool, addr: &str, end: bool) -> (String, bool, String, bool) {
    (set.to_string(), deleted, addr.to_string(), end)
}

#[test]
fn a_plain_element_is_its_address() {
    assert_eq!(elems(ADD_PLAIN), [e("p", false, "10.251.3.7", false)]);
}

#[test]
fn an_interval_set_sends_start_and_end_keys_in_order() {
    // The leading 0.0.0.0 end closes "nothing below"; each interval's end key is one past it.
    assert_eq!(
        elems(ADD_INTERVALS),
        [
            e("i", false, "0.0.0.0", true),
            e("i", false, "10.9.0.5", false),
            e("i", false, "10.9.0.10", true),
            e("i", false, "172.16.4.0", false),
            e("i", false, "172.16.5.0", true),
        ]
    );
    assert_eq!(
        elems(DEL_INTERVAL),
        [
            e("i", true, "172.16.4.0", false),
            e("i", true, "172.16.5.0", true)
        ]
    );
}

#[test]
fn an_ipv6_key_is_an_ipv6_address() {
    assert_eq!(elems(ADD_V6), [e("s6", false, "fd00::a", false)]);
}

#[test]
fn tables_sets_and_the_generation() {
    let ev = events(&bytes(CREATE));
    assert_eq!(
        ev[0],
        Event::Table {
            table: "t".into(),
            deleted: false
        }
    );
    let sets: Vec<String> = ev
        .iter()
        .filter_map(|x| match x {
            Event::Set { set, deleted, .. } if !deleted => Some(set.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(sets, ["p", "i", "s6"]);
    assert_eq!(events(&bytes(GEN)), [Event::Gen]);
}

#[test]
fn a_truncated_datagram_gives_what_is_whole() {
    let b = bytes(ADD_INTERVALS);
    // The first message (64 bytes) whole, the second cut.
    assert_eq!(events(&b[..64 + 20]).len(), 1);
    for n in 0..b.len() {
        let _ = events(&b[..n]);
    }
}

#[test]
fn an_interval_prints_as_nft_does() {
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    assert_eq!(
        interval(ip("172.16.4.0"), ip("172.16.4.255")),
        "172.16.4.0/24"
    );
    assert_eq!(
        interval(ip("10.9.0.5"), ip("10.9.0.9")),
        "10.9.0.5-10.9.0.9"
    );
    assert_eq!(interval(ip("10.9.0.4"), ip("10.9.0.7")), "10.9.0.4/30");
    assert_eq!(
        interval(ip("10.9.0.6"), ip("10.9.0.9")),
        "10.9.0.6-10.9.0.9"
    );
    assert_eq!(interval(ip("10.9.0.6"), ip("10.9.0.6")), "10.9.0.6");
    assert_eq!(interval(ip("fd00::"), ip("fd00::ff")), "fd00::/120");
    assert_eq!(before(ip("172.16.5.0")), ip("172.16.4.255"));
}

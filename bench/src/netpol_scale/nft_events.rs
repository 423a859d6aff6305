//! The nf_tables notifications the kernel multicasts to NFNLGRP_NFTABLES, decoded from a
//! datagram into the few events the harness reads: a table's or set's creation or removal, each
//! set element added or deleted (its key and whether it closes an interval), a chain or rule,
//! and the generation that ends a transaction.
//!
//! Constants from linux/netfilter/nfnetlink.h and nf_tables.h. crates/net has its own (the
//! agent's nf_tables writer); these few are repeated here so the bench decodes what the kernel
//! says, not what the agent thinks it wrote.
//!
//! Layout: nlmsghdr (16 bytes, host order), nfgenmsg (4), then attributes (u16 length, u16
//! type, padded to 4); a set element message's NFTA_SET_ELEM_LIST_ELEMENTS holds one
//! NFTA_LIST_ELEM per element, each with NFTA_SET_ELEM_KEY → NFTA_DATA_VALUE (the key's bytes,
//! network order) and NFTA_SET_ELEM_FLAGS (big-endian u32). The kernel sends one message per
//! element, several messages per datagram.

/// nfnetlink.h: the multicast group of nf_tables' notifications.
pub(crate) const NFNLGRP_NFTABLES: u32 = 7;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NLMSG_HDRLEN: usize = 16;
const NFGENMSG_LEN: usize = 4;
// nf_tables.h: enum nf_tables_msg_types.
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_NEWSET: u16 = 9;
const NFT_MSG_DELSET: u16 = 11;
const NFT_MSG_NEWSETELEM: u16 = 12;
const NFT_MSG_DELSETELEM: u16 = 14;
const NFT_MSG_NEWGEN: u16 = 15;
/// NFTA_TABLE_NAME, NFTA_SET_TABLE, NFTA_CHAIN_TABLE, NFTA_RULE_TABLE and
/// NFTA_SET_ELEM_LIST_TABLE are all attribute 1.
const NFTA_TABLE: u16 = 1;
/// NFTA_SET_NAME and NFTA_SET_ELEM_LIST_SET.
const NFTA_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_SET_ELEM_KEY: u16 = 1;
const NFTA_SET_ELEM_FLAGS: u16 = 3;
const NFTA_DATA_VALUE: u16 = 1;
const NFT_SET_ELEM_INTERVAL_END: u32 = 1;
/// NLA_F_NESTED and NLA_F_NET_BYTEORDER, set on some attributes' types.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// One thing a notification said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// NEWTABLE (`deleted` false) or DELTABLE.
    Table { table: String, deleted: bool },
    /// NEWSET or DELSET.
    Set {
        table: String,
        set: String,
        deleted: bool,
    },
    /// One element of a NEWSETELEM or DELSETELEM. `end`: NFT_SET_ELEM_INTERVAL_END, the key
    /// one past the interval the previous element began.
    Elem {
        table: String,
        set: String,
        deleted: bool,
        key: Vec<u8>,
        end: bool,
    },
    /// NEWCHAIN or NEWRULE (counted, not read).
    ChainOrRule { table: String },
    /// NEWGEN: the transaction's last message.
    Gen,
}

/// The attributes of `b`: (type without flags, payload). A truncated attribute ends the list.
fn attrs(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([b[0], b[1]]));
        let ty = u16::from_ne_bytes([b[2], b[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            break;
        }
        out.push((ty, &b[4..len]));
        b = &b[((len + 3) & !3).min(b.len())..];
    }
    out
}

fn attr(list: &[(u16, &[u8])], ty: u16) -> Option<Vec<u8>> {
    list.iter().find(|(t, _)| *t == ty).map(|(_, v)| v.to_vec())
}

/// A NUL-terminated string attribute.
fn string(list: &[(u16, &[u8])], ty: u16) -> String {
    let v = attr(list, ty).unwrap_or_default();
    let end = v.iter().position(|&c| c == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

/// The elements of a set element message: (key, closes an interval).
fn elements(list: &[(u16, &[u8])]) -> Vec<(Vec<u8>, bool)> {
    let Some(all) = attr(list, NFTA_SET_ELEM_LIST_ELEMENTS) else {
        return Vec::new();
    };
    attrs(&all)
        .into_iter()
        .filter(|(t, _)| *t == NFTA_LIST_ELEM)
        .filter_map(|(_, elem)| {
            let e = attrs(elem);
            let key = attr(&e, NFTA_SET_ELEM_KEY)?;
            let value = attr(&attrs(&key), NFTA_DATA_VALUE)?;
            let flags = attr(&e, NFTA_SET_ELEM_FLAGS)
                .and_then(|f| <[u8; 4]>::try_from(f.as_slice()).ok())
                .map_or(0, u32::from_be_bytes);
            Some((value, flags & NFT_SET_ELEM_INTERVAL_END != 0))
        })
        .collect()
}

/// The events of one nf_tables message (type within the subsystem, its attributes).
fn message(msg: u16, list: &[(u16, &[u8])], into: &mut Vec<Event>) {
    let table = string(list, NFTA_TABLE);
    match msg {
        NFT_MSG_NEWTABLE | NFT_MSG_DELTABLE => into.push(Event::Table {
            table,
            deleted: msg == NFT_MSG_DELTABLE,
        }),
        NFT_MSG_NEWSET | NFT_MSG_DELSET => into.push(Event::Set {
            set: string(list, NFTA_SET),
            table,
            deleted: msg == NFT_MSG_DELSET,
        }),
        NFT_MSG_NEWSETELEM | NFT_MSG_DELSETELEM => {
            let set = string(list, NFTA_SET);
            for (key, end) in elements(list) {
                into.push(Event::Elem {
                    table: table.clone(),
                    set: set.clone(),
                    deleted: msg == NFT_MSG_DELSETELEM,
                    key,
                    end,
                });
            }
        }
        NFT_MSG_NEWCHAIN | NFT_MSG_NEWRULE => into.push(Event::ChainOrRule { table }),
        NFT_MSG_NEWGEN => into.push(Event::Gen),
        _ => {}
    }
}

/// The events of one datagram, in order; anything not nf_tables' (or truncated) is skipped.
pub(crate) fn events(mut b: &[u8]) -> Vec<Event> {
    let mut out = Vec::new();
    while b.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let ty = u16::from_ne_bytes([b[4], b[5]]);
        if len < NLMSG_HDRLEN || len > b.len() {
            break;
        }
        if ty >> 8 == NFNL_SUBSYS_NFTABLES && len >= NLMSG_HDRLEN + NFGENMSG_LEN {
            message(
                ty & 0xff,
                &attrs(&b[NLMSG_HDRLEN + NFGENMSG_LEN..len]),
                &mut out,
            );
        }
        b = &b[((len + 3) & !3).min(b.len())..];
    }
    out
}

/// A key as an address: 4 bytes IPv4, 16 IPv6; other keys (ports, concatenations) none.
pub(crate) fn address(key: &[u8]) -> Option<std::net::IpAddr> {
    if let Ok(a) = <[u8; 4]>::try_from(key) {
        return Some(std::net::Ipv4Addr::from(a).into());
    }
    <[u8; 16]>::try_from(key)
        .ok()
        .map(|a| std::net::Ipv6Addr::from(a).into())
}

/// An interval [first, last] as nft prints it: a network when it is exactly one, else `a-b`.
pub(crate) fn interval(first: std::net::IpAddr, last: std::net::IpAddr) -> String {
    use std::net::IpAddr::{V4, V6};
    let (a, b, bits) = match (first, last) {
        (V4(a), V4(b)) => (u128::from(u32::from(a)), u128::from(u32::from(b)), 32),
        (V6(a), V6(b)) => (u128::from(a), u128::from(b), 128),
        _ => return format!("{first}-{last}"),
    };
    if a == b {
        return first.to_string();
    }
    let span = b.wrapping_sub(a).wrapping_add(1);
    if b > a && span.is_power_of_two() && a % span == 0 {
        return format!("{first}/{}", bits - span.trailing_zeros());
    }
    format!("{first}-{last}")
}

/// The address just before `key`'s (an interval's end key is one past its last address).
pub(crate) fn before(key: std::net::IpAddr) -> std::net::IpAddr {
    use std::net::IpAddr::{V4, V6};
    match key {
        V4(a) => std::net::Ipv4Addr::from(u32::from(a).wrapping_sub(1)).into(),
        V6(a) => std::net::Ipv6Addr::from(u128::from(a).wrapping_sub(1)).into(),
    }
}

#[cfg(test)]
#[path = "nft_events_tests.rs"]
mod tests;

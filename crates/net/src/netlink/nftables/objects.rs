//! The messages that make and remove a table's objects (pure): a named set (plain, or interval
//! with its elements: `interval.rs`), a regular chain,
//! a rule appended to a chain (with the anonymous set its `th dport { … }` needs), as nft 1.0.6
//! writes them (the unit tests hold its bytes), so the table lists as nft's own commands make
//! it. Constants from `linux/netfilter/nf_tables.h`; set user data as nft writes it (its
//! `NFTNL_UDATA_SET_*` records: the key's byte order, for port sets their merging and the
//! `typeof` of `th dport`), which `nft list` reads back.
//!
//! Differences from nft, on purpose: a new set or chain is made with `NLM_F_EXCL` (nft's
//! `table { … }` block leaves it off and would take one already there), so a table that is not
//! what the agent thinks refuses the batch and the caller falls back, rather than a chain
//! getting its rules twice.

use super::encode::{
    message_end, message_start, nest_end, nest_start, put_attr, put_str, put_u32, Counter,
    NFNL_SUBSYS_NFTABLES, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST,
};
use super::encode::{
    NFTA_SET_ELEM_LIST_ELEMENTS, NFTA_SET_ELEM_LIST_SET, NFTA_SET_ELEM_LIST_TABLE,
    NFT_MSG_NEWSETELEM,
};
use super::rule::{put_rule, Rule};
use interval::{bounds, chunks, put_bounds};

use std::net::IpAddr;

mod interval;

/// The name nft gives an anonymous set; the kernel names it (`__set0` …) and binds the rule's
/// lookup to it by its id.
pub(super) const ANONYMOUS_SET: &str = "__set%d";

/// `enum nf_tables_msg_types`.
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_DELCHAIN: u16 = 5;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_NEWSET: u16 = 9;
const NFT_MSG_DELSET: u16 = 11;
/// linux/netlink.h: `NLM_F_APPEND`, a new rule goes last.
const NLM_F_APPEND: u16 = 0x800;
/// `enum nft_chain_attributes`, `enum nft_rule_attributes`.
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
/// `enum nft_set_attributes`, `enum nft_set_desc_attributes`, `enum nft_set_flags`.
const NFTA_SET_TABLE: u16 = 1;
const NFTA_SET_NAME: u16 = 2;
const NFTA_SET_FLAGS: u16 = 3;
const NFTA_SET_KEY_TYPE: u16 = 4;
const NFTA_SET_KEY_LEN: u16 = 5;
const NFTA_SET_DESC: u16 = 9;
const NFTA_SET_ID: u16 = 10;
const NFTA_SET_USERDATA: u16 = 13;
const NFTA_SET_DESC_SIZE: u16 = 1;
const NFT_SET_ANONYMOUS: u32 = 0x1;
const NFT_SET_CONSTANT: u32 = 0x2;
const NFT_SET_INTERVAL: u32 = 0x4;
/// `enum nft_set_elem_list_attributes`.
const NFTA_SET_ELEM_LIST_SET_ID: u16 = 4;
/// nft's data types (its `enum datatypes`): the key types a set is declared with.
const TYPE_IPV4_ADDR: u32 = 7;
const TYPE_IPV6_ADDR: u32 = 8;
const TYPE_INET_SERVICE: u32 = 13;

/// nft's set user data: `NFTNL_UDATA_SET_KEYBYTEORDER` = big endian (an address set's).
const UDATA_BIG_ENDIAN_KEY: [u8; 6] = [0, 4, 2, 0, 0, 0];
/// A port set's: `NFTNL_UDATA_SET_MERGE_ELEMENTS` (interval sets only) and
/// `NFTNL_UDATA_SET_KEY_TYPEOF` of `th dport` (a payload expression: transport header, 2
/// bytes at 2... as nft records it).
const UDATA_MERGE: [u8; 6] = [2, 4, 1, 0, 0, 0];
const UDATA_TYPEOF_TH_DPORT: [u8; 22] = [
    3, 20, 0, 4, 7, 0, 0, 0, 1, 12, 0, 4, 11, 0, 0, 0, 1, 4, 2, 0, 0, 0,
];
/// The key of a named set tern makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetKey {
    /// `type ipv4_addr`.
    Ipv4,
    /// `type ipv6_addr`.
    Ipv6,
}

/// One step of a table batch, in the order the batch carries them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A named set, empty (its elements follow as [`Op::Elements`]).
    NewSet {
        /// Its name.
        name: String,
        /// Its key.
        key: SetKey,
    },
    /// A named interval set (`flags interval`: an ipBlock's), with its elements: inclusive
    /// ranges of its key's family, sorted, disjoint and not adjacent (as nft would merge them).
    NewIntervalSet {
        /// Its name.
        name: String,
        /// Its key.
        key: SetKey,
        /// Its ranges (none: an empty set, and no element message).
        ranges: Vec<(IpAddr, IpAddr)>,
    },
    /// A regular chain, empty.
    NewChain(String),
    /// A rule appended to a chain.
    AddRule {
        /// The chain.
        chain: String,
        /// The rule.
        rule: Rule,
    },
    /// Elements of a set or map deleted or added.
    Elements(super::SetChange),
    /// A regular chain removed, with its rules (nothing may jump to it any more).
    DeleteChain(String),
    /// A named set removed (no rule may name it any more).
    DeleteSet(String),
}

fn kind(ty: u16) -> u16 {
    NFNL_SUBSYS_NFTABLES << 8 | ty
}

/// The messages of `op` (one for all but an element change, which `encode.rs` writes, and a
/// rule with a port set: the set, its elements, the rule); their starts go to `headers`.
pub(super) fn put_op(
    buf: &mut Vec<u8>,
    op: &Op,
    family: u8,
    table: &str,
    seq: &mut Counter,
    headers: &mut Vec<(usize, u32)>,
) {
    let mut start = |buf: &mut Vec<u8>, seq: &mut Counter, ty: u16, flags: u16| {
        let (at, s) = (buf.len(), seq.take());
        message_start(
            buf,
            kind(ty),
            NLM_F_REQUEST | NLM_F_ACK | flags,
            s,
            family,
            0,
        );
        headers.push((at, s));
        at
    };
    let at = match op {
        Op::NewSet { name, key } => {
            let at = start(buf, seq, NFT_MSG_NEWSET, NLM_F_CREATE | NLM_F_EXCL);
            named_set(buf, table, name, *key, 0, seq.set_id());
            at
        }
        Op::NewIntervalSet { name, key, ranges } => {
            let id = seq.set_id();
            let at = start(buf, seq, NFT_MSG_NEWSET, NLM_F_CREATE | NLM_F_EXCL);
            named_set(buf, table, name, *key, NFT_SET_INTERVAL, id);
            message_end(buf, at);
            let (width, max) = match key {
                SetKey::Ipv4 => (4, u128::from(u32::MAX)),
                SetKey::Ipv6 => (16, u128::MAX),
            };
            let numbers: Vec<_> = ranges
                .iter()
                .map(|(lo, hi)| (number(lo), number(hi)))
                .collect();
            let elements = bounds(&numbers, max);
            for chunk in chunks(&elements) {
                let at = start(buf, seq, NFT_MSG_NEWSETELEM, NLM_F_CREATE);
                put_str(buf, NFTA_SET_ELEM_LIST_TABLE, table);
                put_str(buf, NFTA_SET_ELEM_LIST_SET, name);
                put_u32(buf, NFTA_SET_ELEM_LIST_SET_ID, id);
                let list = nest_start(buf, NFTA_SET_ELEM_LIST_ELEMENTS);
                put_bounds(buf, chunk, width);
                nest_end(buf, list);
                message_end(buf, at);
            }
            return;
        }
        Op::NewChain(name) => {
            let at = start(buf, seq, NFT_MSG_NEWCHAIN, NLM_F_CREATE | NLM_F_EXCL);
            put_str(buf, NFTA_CHAIN_TABLE, table);
            put_str(buf, NFTA_CHAIN_NAME, name);
            at
        }
        Op::AddRule { chain, rule } => {
            let set_id = rule.port_set().map(|ranges| {
                let id = seq.set_id();
                let at = start(buf, seq, NFT_MSG_NEWSET, NLM_F_CREATE);
                port_set(buf, table, id, ranges);
                message_end(buf, at);
                let (_, elements) = port_bounds(ranges);
                for chunk in chunks(&elements) {
                    let at = start(buf, seq, NFT_MSG_NEWSETELEM, NLM_F_CREATE);
                    port_elements(buf, table, id, chunk);
                    message_end(buf, at);
                }
                id
            });
            let at = start(buf, seq, NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND);
            put_str(buf, NFTA_RULE_TABLE, table);
            put_str(buf, NFTA_RULE_CHAIN, chain);
            let exprs = nest_start(buf, NFTA_RULE_EXPRESSIONS);
            put_rule(buf, rule, set_id);
            nest_end(buf, exprs);
            at
        }
        Op::DeleteChain(name) => {
            let at = start(buf, seq, NFT_MSG_DELCHAIN, 0);
            put_str(buf, NFTA_CHAIN_TABLE, table);
            put_str(buf, NFTA_CHAIN_NAME, name);
            at
        }
        Op::DeleteSet(name) => {
            let at = start(buf, seq, NFT_MSG_DELSET, 0);
            put_str(buf, NFTA_SET_TABLE, table);
            put_str(buf, NFTA_SET_NAME, name);
            at
        }
        Op::Elements(_) => return,
    };
    message_end(buf, at);
}

/// `NFT_MSG_NEWSET`'s attributes of a named address set (`flags` 0, or interval).
fn named_set(buf: &mut Vec<u8>, table: &str, name: &str, key: SetKey, flags: u32, id: u32) {
    let (ty, len) = match key {
        SetKey::Ipv4 => (TYPE_IPV4_ADDR, 4),
        SetKey::Ipv6 => (TYPE_IPV6_ADDR, 16),
    };
    put_str(buf, NFTA_SET_TABLE, table);
    put_str(buf, NFTA_SET_NAME, name);
    put_u32(buf, NFTA_SET_FLAGS, flags);
    put_u32(buf, NFTA_SET_KEY_TYPE, ty);
    put_u32(buf, NFTA_SET_KEY_LEN, len);
    put_u32(buf, NFTA_SET_ID, id);
    put_attr(buf, NFTA_SET_USERDATA, &UDATA_BIG_ENDIAN_KEY);
}

/// An address as a number (IPv4 in the low 32 bits).
fn number(ip: &IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(*a)),
        IpAddr::V6(a) => u128::from(*a),
    }
}

/// A port set's kernel elements: an interval set's bounds when one range is wider than a
/// port, else the ports (a plain set).
fn port_bounds(ranges: &[(u16, u16)]) -> (bool, Vec<interval::Bound>) {
    let interval = ranges.iter().any(|(lo, hi)| lo != hi);
    let wide: Vec<_> = ranges
        .iter()
        .map(|(lo, hi)| (u128::from(*lo), u128::from(*hi)))
        .collect();
    if interval {
        return (true, bounds(&wide, u128::from(u16::MAX)));
    }
    let single = |(key, _)| interval::Bound {
        key,
        end: false,
        open: false,
    };
    (false, wide.into_iter().map(single).collect())
}

/// `NFT_MSG_NEWSET` of the anonymous set of a rule's ports.
fn port_set(buf: &mut Vec<u8>, table: &str, id: u32, ranges: &[(u16, u16)]) {
    let (interval, elements) = port_bounds(ranges);
    let open = elements.iter().filter(|b| b.open).count();
    let mut flags = NFT_SET_ANONYMOUS | NFT_SET_CONSTANT;
    if interval {
        flags |= NFT_SET_INTERVAL;
    }
    put_str(buf, NFTA_SET_TABLE, table);
    put_str(buf, NFTA_SET_NAME, ANONYMOUS_SET);
    put_u32(buf, NFTA_SET_FLAGS, flags);
    put_u32(buf, NFTA_SET_KEY_TYPE, TYPE_INET_SERVICE);
    put_u32(buf, NFTA_SET_KEY_LEN, 2);
    put_u32(buf, NFTA_SET_ID, id);
    // nft counts an open interval's end it does not send.
    let desc = nest_start(buf, NFTA_SET_DESC);
    put_u32(buf, NFTA_SET_DESC_SIZE, (elements.len() + open) as u32);
    nest_end(buf, desc);
    let mut udata = UDATA_BIG_ENDIAN_KEY.to_vec();
    if interval {
        udata.extend_from_slice(&UDATA_MERGE);
    }
    udata.extend_from_slice(&UDATA_TYPEOF_TH_DPORT);
    put_attr(buf, NFTA_SET_USERDATA, &udata);
}

/// `NFT_MSG_NEWSETELEM` of the anonymous set's elements; nft numbers each list element.
fn port_elements(buf: &mut Vec<u8>, table: &str, id: u32, elements: &[interval::Bound]) {
    put_str(buf, NFTA_SET_ELEM_LIST_TABLE, table);
    put_str(buf, NFTA_SET_ELEM_LIST_SET, ANONYMOUS_SET);
    put_u32(buf, NFTA_SET_ELEM_LIST_SET_ID, id);
    let list = nest_start(buf, NFTA_SET_ELEM_LIST_ELEMENTS);
    put_bounds(buf, elements, 2);
    nest_end(buf, list);
}

#[cfg(test)]
mod tests;

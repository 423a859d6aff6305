//! A rule of tern's NetworkPolicy chains as nf_tables expressions (pure), exactly the
//! expressions nft 1.0.6 writes for the same rule text, so that the table lists the same
//! whichever wrote it. Learned from nft itself (`nft --debug=netlink -f`, and the bytes of its
//! `sendmsg` under strace; the unit tests hold those bytes), constants from
//! `linux/netfilter/nf_tables.h`:
//!
//! - `ip saddr @s` in an `inet` table: `meta load nfproto => reg 1; cmp eq reg 1 2` (the
//!   dependency nft adds: an inet chain sees both families), `payload load 4b @ network header
//!   + 12 => reg 1` (daddr: + 16; ip6: nfproto 10, 16 bytes at + 8 or + 24), `lookup reg 1 set s`;
//! - `meta l4proto P`: `meta load l4proto => reg 1; cmp eq reg 1 P` (no dependency);
//! - `th dport { … }`: `payload load 2b @ transport header + 2 => reg 1`, then one port a
//!   `cmp eq`, one range `cmp gte` and `cmp lte`, more an anonymous set (`objects.rs`) and
//!   `lookup reg 1 set __set%d` bound by its id;
//! - `ip saddr . meta l4proto . th dport @s`: the dependency, the address to reg 1, the protocol
//!   and port to the 32-bit registers after it (9 and 10 for IPv4; for IPv6 the protocol to
//!   reg 2, the second 16-byte register, and the port to 13), `lookup reg 1 set s`;
//! - the verdict: `immediate reg 0` of `accept`, `drop`, `return` or `jump chain`.

use super::encode::{nest_end, nest_start, put_attr, put_str, put_u32};
use super::encode::{
    NFTA_DATA_VALUE, NFTA_DATA_VERDICT, NFTA_LIST_ELEM, NFTA_VERDICT_CHAIN, NFTA_VERDICT_CODE,
    NFT_JUMP,
};

/// `enum nft_list_attributes` / `enum nft_expr_attributes`.
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
/// `enum nft_meta_attributes`, `enum nft_meta_keys`.
const NFTA_META_DREG: u16 = 1;
const NFTA_META_KEY: u16 = 2;
const NFT_META_NFPROTO: u32 = 15;
const NFT_META_L4PROTO: u32 = 16;
/// `enum nft_cmp_attributes`, `enum nft_cmp_ops`.
const NFTA_CMP_SREG: u16 = 1;
const NFTA_CMP_OP: u16 = 2;
const NFTA_CMP_DATA: u16 = 3;
const NFT_CMP_EQ: u32 = 0;
const NFT_CMP_LTE: u32 = 3;
const NFT_CMP_GTE: u32 = 5;
/// `enum nft_payload_attributes`, `enum nft_payload_bases`.
const NFTA_PAYLOAD_DREG: u16 = 1;
const NFTA_PAYLOAD_BASE: u16 = 2;
const NFTA_PAYLOAD_OFFSET: u16 = 3;
const NFTA_PAYLOAD_LEN: u16 = 4;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
/// `enum nft_lookup_attributes`.
const NFTA_LOOKUP_SET: u16 = 1;
const NFTA_LOOKUP_SREG: u16 = 2;
const NFTA_LOOKUP_SET_ID: u16 = 4;
/// `enum nft_immediate_attributes`, `enum nft_data_attributes`, `enum nft_verdict_attributes`.
const NFTA_IMMEDIATE_DREG: u16 = 1;
const NFTA_IMMEDIATE_DATA: u16 = 2;
/// `enum nft_registers`: the verdict register, the first two 16-byte registers, and the
/// 32-bit ones nft picks for a concatenation's later parts.
const NFT_REG_VERDICT: u32 = 0;
const NFT_REG_1: u32 = 1;
const NFT_REG_2: u32 = 2;
const NFT_REG32_01: u32 = 9;
const NFT_REG32_02: u32 = 10;
const NFT_REG32_05: u32 = 13;
/// `NF_ACCEPT`, `NF_DROP` (linux/netfilter.h); `enum nft_verdicts`.
const NF_DROP: i32 = 0;
const NF_ACCEPT: i32 = 1;
const NFT_RETURN: i32 = -5;
/// `NFPROTO_IPV4`, `NFPROTO_IPV6` (linux/netfilter.h).
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;

/// One match of a rule (tern's vocabulary, `tern_netpol::ruleset::Match`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// `ip saddr @set` (`v4`, `destination` false), `ip6 daddr @set`, ...
    Peer {
        /// IPv4 (else IPv6).
        v4: bool,
        /// The destination address (else the source).
        destination: bool,
        /// The named set.
        set: String,
    },
    /// `ip saddr . meta l4proto . th dport @set`.
    Endpoint {
        /// IPv4 (else IPv6).
        v4: bool,
        /// The destination address (else the source).
        destination: bool,
        /// The named set.
        set: String,
    },
    /// `meta l4proto P`, the IP protocol number.
    Protocol(u8),
    /// `th dport { … }`: inclusive ranges, sorted and disjoint, at least one.
    Ports(Vec<(u16, u16)>),
}

/// A rule's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// `accept`.
    Accept,
    /// `drop`.
    Drop,
    /// `return`.
    Return,
    /// `jump chain`.
    Jump(String),
}

/// One rule: its matches in order, then its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The matches.
    pub matches: Vec<Match>,
    /// The verdict.
    pub verdict: Verdict,
}

impl Rule {
    /// The port ranges of the rule's one `th dport` that needs an anonymous set (more than one
    /// range), if any.
    pub(super) fn port_set(&self) -> Option<&[(u16, u16)]> {
        self.matches.iter().find_map(|m| match m {
            Match::Ports(r) if r.len() > 1 => Some(&r[..]),
            _ => None,
        })
    }
}

fn expr(buf: &mut Vec<u8>, name: &str, body: impl FnOnce(&mut Vec<u8>)) {
    let elem = nest_start(buf, NFTA_LIST_ELEM);
    put_str(buf, NFTA_EXPR_NAME, name);
    let data = nest_start(buf, NFTA_EXPR_DATA);
    body(buf);
    nest_end(buf, data);
    nest_end(buf, elem);
}

fn meta(buf: &mut Vec<u8>, key: u32, dreg: u32) {
    expr(buf, "meta", |b| {
        put_u32(b, NFTA_META_KEY, key);
        put_u32(b, NFTA_META_DREG, dreg);
    });
}

fn cmp(buf: &mut Vec<u8>, op: u32, value: &[u8]) {
    expr(buf, "cmp", |b| {
        put_u32(b, NFTA_CMP_SREG, NFT_REG_1);
        put_u32(b, NFTA_CMP_OP, op);
        let data = nest_start(b, NFTA_CMP_DATA);
        put_attr(b, NFTA_DATA_VALUE, value);
        nest_end(b, data);
    });
}

fn payload(buf: &mut Vec<u8>, dreg: u32, base: u32, offset: u32, len: u32) {
    expr(buf, "payload", |b| {
        put_u32(b, NFTA_PAYLOAD_DREG, dreg);
        put_u32(b, NFTA_PAYLOAD_BASE, base);
        put_u32(b, NFTA_PAYLOAD_OFFSET, offset);
        put_u32(b, NFTA_PAYLOAD_LEN, len);
    });
}

fn lookup(buf: &mut Vec<u8>, set: &str, set_id: Option<u32>) {
    expr(buf, "lookup", |b| {
        put_u32(b, NFTA_LOOKUP_SREG, NFT_REG_1);
        put_str(b, NFTA_LOOKUP_SET, set);
        if let Some(id) = set_id {
            put_u32(b, NFTA_LOOKUP_SET_ID, id);
        }
    });
}

/// The family dependency, then the address's load into reg 1.
fn address(buf: &mut Vec<u8>, v4: bool, destination: bool) {
    let (proto, offset, len) = match (v4, destination) {
        (true, false) => (NFPROTO_IPV4, 12, 4),
        (true, true) => (NFPROTO_IPV4, 16, 4),
        (false, false) => (NFPROTO_IPV6, 8, 16),
        (false, true) => (NFPROTO_IPV6, 24, 16),
    };
    meta(buf, NFT_META_NFPROTO, NFT_REG_1);
    cmp(buf, NFT_CMP_EQ, &[proto]);
    payload(buf, NFT_REG_1, NFT_PAYLOAD_NETWORK_HEADER, offset, len);
}

fn destination_port(buf: &mut Vec<u8>, dreg: u32) {
    payload(buf, dreg, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
}

fn put_match(buf: &mut Vec<u8>, m: &Match, port_set: Option<u32>) {
    match m {
        Match::Peer {
            v4,
            destination,
            set,
        } => {
            address(buf, *v4, *destination);
            lookup(buf, set, None);
        }
        Match::Endpoint {
            v4,
            destination,
            set,
        } => {
            address(buf, *v4, *destination);
            let (proto_reg, port_reg) = if *v4 {
                (NFT_REG32_01, NFT_REG32_02)
            } else {
                (NFT_REG_2, NFT_REG32_05)
            };
            meta(buf, NFT_META_L4PROTO, proto_reg);
            destination_port(buf, port_reg);
            lookup(buf, set, None);
        }
        Match::Protocol(p) => {
            meta(buf, NFT_META_L4PROTO, NFT_REG_1);
            cmp(buf, NFT_CMP_EQ, &[*p]);
        }
        Match::Ports(ranges) => {
            destination_port(buf, NFT_REG_1);
            match (ranges.as_slice(), port_set) {
                ([(lo, hi)], _) if lo == hi => cmp(buf, NFT_CMP_EQ, &lo.to_be_bytes()),
                ([(lo, hi)], _) => {
                    cmp(buf, NFT_CMP_GTE, &lo.to_be_bytes());
                    cmp(buf, NFT_CMP_LTE, &hi.to_be_bytes());
                }
                (_, id) => lookup(buf, super::objects::ANONYMOUS_SET, id),
            }
        }
    }
}

fn put_verdict(buf: &mut Vec<u8>, v: &Verdict) {
    let (code, chain) = match v {
        Verdict::Accept => (NF_ACCEPT, None),
        Verdict::Drop => (NF_DROP, None),
        Verdict::Return => (NFT_RETURN, None),
        Verdict::Jump(c) => (NFT_JUMP, Some(c)),
    };
    expr(buf, "immediate", |b| {
        put_u32(b, NFTA_IMMEDIATE_DREG, NFT_REG_VERDICT);
        let data = nest_start(b, NFTA_IMMEDIATE_DATA);
        let verdict = nest_start(b, NFTA_DATA_VERDICT);
        put_attr(b, NFTA_VERDICT_CODE, &code.to_be_bytes());
        if let Some(c) = chain {
            put_str(b, NFTA_VERDICT_CHAIN, c);
        }
        nest_end(b, verdict);
        nest_end(b, data);
    });
}

/// The rule's expressions, each an `NFTA_LIST_ELEM` (the caller opens `NFTA_RULE_EXPRESSIONS`);
/// `port_set`: the id of the anonymous set made for its ports in the same batch.
pub(super) fn put_rule(buf: &mut Vec<u8>, rule: &Rule, port_set: Option<u32>) {
    for m in &rule.matches {
        put_match(buf, m, port_set);
    }
    put_verdict(buf, &rule.verdict);
}

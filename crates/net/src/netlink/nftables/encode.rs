//! The bytes of one nf_tables batch (pure): `NFNL_MSG_BATCH_BEGIN`, the messages of each
//! [`Op`] in order — one `NFT_MSG_DELSETELEM` or `NFT_MSG_NEWSETELEM` per set and verb (split
//! when its element list would outgrow an attribute's 16-bit length), the sets, chains and
//! rules of `objects.rs` — then `NFNL_MSG_BATCH_END`.
//!
//! Layout (linux/netlink.h, linux/netfilter/nfnetlink.h, nf_tables.h): each message is an
//! `nlmsghdr` (host order) and an `nfgenmsg` (family, `NFNETLINK_V0`, `res_id` big-endian),
//! then attributes; nested ones carry `NLA_F_NESTED` as nft's do. A key is the address as the
//! kernel holds an `ipv4_addr`/`ipv6_addr` (4 or 16 bytes, network order); a verdict's code is
//! big-endian.

use std::net::IpAddr;

use super::objects::{put_op, Op};
use super::{Element, Verb};

/// `NLMSG_MIN_TYPE`: the batch markers' types (nfnetlink.h).
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
/// The nf_tables subsystem: the batch's `res_id`, and a message type's high byte.
pub(super) const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNETLINK_V0: u8 = 0;
/// `enum nf_tables_msg_types`.
pub(super) const NFT_MSG_NEWSETELEM: u16 = 12;
const NFT_MSG_DELSETELEM: u16 = 14;
/// `enum nft_set_elem_list_attributes`.
pub(super) const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
pub(super) const NFTA_SET_ELEM_LIST_SET: u16 = 2;
pub(super) const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
/// `enum nft_list_attributes`.
pub(super) const NFTA_LIST_ELEM: u16 = 1;
/// `enum nft_set_elem_attributes`.
pub(super) const NFTA_SET_ELEM_KEY: u16 = 1;
const NFTA_SET_ELEM_DATA: u16 = 2;
/// `enum nft_data_attributes`.
pub(super) const NFTA_DATA_VALUE: u16 = 1;
pub(super) const NFTA_DATA_VERDICT: u16 = 2;
/// `enum nft_verdict_attributes`.
pub(super) const NFTA_VERDICT_CODE: u16 = 1;
pub(super) const NFTA_VERDICT_CHAIN: u16 = 2;
/// `enum nft_verdicts`: `NFT_JUMP = -3`.
pub(super) const NFT_JUMP: i32 = -3;
/// linux/netlink.h.
const NLA_F_NESTED: u16 = 0x8000;
pub(super) const NLM_F_REQUEST: u16 = 0x1;
pub(super) const NLM_F_ACK: u16 = 0x4;
pub(super) const NLM_F_EXCL: u16 = 0x200;
pub(super) const NLM_F_CREATE: u16 = 0x400;
/// `AF_UNSPEC`: the batch markers' family.
const AF_UNSPEC: u8 = 0;

/// An attribute's length is 16 bits: a message's element list stays below this many bytes.
const ELEMENTS_BUDGET: usize = 60_000;

/// A big-endian `u32` attribute (nf_tables' numbers are all network order).
pub(super) fn put_u32(buf: &mut Vec<u8>, ty: u16, v: u32) {
    put_attr(buf, ty, &v.to_be_bytes());
}

/// A batch's sequence numbers (never 0) and the ids of the sets it makes.
pub(super) struct Counter {
    next: u32,
    set_ids: u32,
}

impl Counter {
    pub(super) fn take(&mut self) -> u32 {
        let s = self.next;
        self.next = self.next.wrapping_add(1).max(1);
        s
    }

    pub(super) fn set_id(&mut self) -> u32 {
        self.set_ids += 1;
        self.set_ids
    }
}

/// One message of a batch: its sequence number, which op it carries, and where
/// each of its elements starts (byte offset from the message's header), to name the element
/// the kernel's extended ack points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Sent {
    pub(super) seq: u32,
    pub(super) change: usize,
    pub(super) elements: Vec<(usize, usize)>,
}

/// A batch's bytes and what each element message carries.
#[derive(Debug)]
pub(super) struct Batch {
    pub(super) bytes: Vec<u8>,
    pub(super) begin_seq: u32,
    pub(super) sent: Vec<Sent>,
}

fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// The 16-bit length field of an attribute `len` bytes long.
///
/// # Panics
/// When `len` does not fit. Every list that could outgrow it is split before (element lists
/// by [`ELEMENTS_BUDGET`], interval and port sets by their chunks), so a longer one is a bug
/// here; written modulo 2^16 the kernel would read a truncated list and keep part of a set
/// without an error. [`super::ElementWriter::apply`] turns it into a refused batch.
fn attr_len(len: usize) -> [u8; 2] {
    match u16::try_from(len) {
        Ok(l) => l.to_ne_bytes(),
        Err(_) => panic!("nf_tables attribute of {len} bytes: over 16 bits, not split"),
    }
}

pub(super) fn put_attr(buf: &mut Vec<u8>, ty: u16, payload: &[u8]) {
    buf.extend_from_slice(&attr_len(4 + payload.len()));
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(align(buf.len()), 0);
}

pub(super) fn put_str(buf: &mut Vec<u8>, ty: u16, s: &str) {
    let mut z = Vec::with_capacity(s.len() + 1);
    z.extend_from_slice(s.as_bytes());
    z.push(0);
    put_attr(buf, ty, &z);
}

/// Opens a nested attribute; [`nest_end`] writes its length.
pub(super) fn nest_start(buf: &mut Vec<u8>, ty: u16) -> usize {
    let at = buf.len();
    buf.extend_from_slice(&[0, 0]);
    buf.extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
    at
}

/// Writes the length of the nest [`nest_start`] opened at `at`.
///
/// # Panics
/// As [`attr_len`].
pub(super) fn nest_end(buf: &mut [u8], at: usize) {
    let len = attr_len(buf.len() - at);
    buf[at..at + 2].copy_from_slice(&len);
}

/// An `nlmsghdr` with its length left 0 ([`message_end`] writes it) and an `nfgenmsg`.
pub(super) fn message_start(
    buf: &mut Vec<u8>,
    ty: u16,
    flags: u16,
    seq: u32,
    family: u8,
    res_id: u16,
) {
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&[family, NFNETLINK_V0]);
    buf.extend_from_slice(&res_id.to_be_bytes());
}

pub(super) fn message_end(buf: &mut [u8], at: usize) {
    let len = (buf.len() - at) as u32;
    buf[at..at + 4].copy_from_slice(&len.to_ne_bytes());
}

/// The key's bytes as the kernel holds an `ipv4_addr` or `ipv6_addr`: network order.
pub(super) fn key_bytes(ip: &IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// One `NFTA_LIST_ELEM`: the key and, for a verdict map's element, `jump <chain>`.
fn put_element(buf: &mut Vec<u8>, e: &Element) {
    let elem = nest_start(buf, NFTA_LIST_ELEM);
    let key = nest_start(buf, NFTA_SET_ELEM_KEY);
    put_attr(buf, NFTA_DATA_VALUE, &key_bytes(&e.key));
    nest_end(buf, key);
    if let Some(chain) = &e.jump {
        let data = nest_start(buf, NFTA_SET_ELEM_DATA);
        let verdict = nest_start(buf, NFTA_DATA_VERDICT);
        put_attr(buf, NFTA_VERDICT_CODE, &NFT_JUMP.to_be_bytes());
        put_str(buf, NFTA_VERDICT_CHAIN, chain);
        nest_end(buf, verdict);
        nest_end(buf, data);
    }
    nest_end(buf, elem);
}

/// The flags of a change's messages: an add fails on an element already there (`EEXIST`), a
/// delete on one that is not (`ENOENT`); acked (`batch` keeps the ack on the last message only).
fn flags(verb: Verb) -> (u16, u16) {
    match verb {
        Verb::Add => (
            NFT_MSG_NEWSETELEM,
            NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK,
        ),
        Verb::Delete => (NFT_MSG_DELSETELEM, NLM_F_REQUEST | NLM_F_ACK),
    }
}

/// The batch of `ops` on table `family`/`table`, sequence numbers from `seq`.
pub(super) fn batch(family: u8, table: &str, ops: &[Op], seq: u32) -> Batch {
    let mut buf = Vec::with_capacity(256);
    let mut counter = Counter {
        next: seq,
        set_ids: 0,
    };
    let begin_seq = counter.take();
    let res_id = NFNL_SUBSYS_NFTABLES;
    message_start(
        &mut buf,
        NFNL_MSG_BATCH_BEGIN,
        NLM_F_REQUEST,
        begin_seq,
        AF_UNSPEC,
        res_id,
    );
    message_end(&mut buf, 0);
    let mut sent = Vec::new();
    let mut headers = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let Op::Elements(change) = op else {
            let mut started = Vec::new();
            put_op(&mut buf, op, family, table, &mut counter, &mut started);
            for (at, seq) in started {
                headers.push(at);
                sent.push(Sent {
                    seq,
                    change: i,
                    elements: Vec::new(),
                });
            }
            continue;
        };
        let (kind, flags) = flags(change.verb);
        let mut rest = &change.elements[..];
        while !rest.is_empty() {
            let s = counter.take();
            let at = buf.len();
            headers.push(at);
            message_start(
                &mut buf,
                NFNL_SUBSYS_NFTABLES << 8 | kind,
                flags,
                s,
                family,
                0,
            );
            put_str(&mut buf, NFTA_SET_ELEM_LIST_TABLE, table);
            put_str(&mut buf, NFTA_SET_ELEM_LIST_SET, &change.set);
            let list = nest_start(&mut buf, NFTA_SET_ELEM_LIST_ELEMENTS);
            let mut offsets = Vec::new();
            let mut used = 0;
            while let Some((e, tail)) = rest.split_first() {
                if used > 0 && buf.len() - list > ELEMENTS_BUDGET {
                    break;
                }
                offsets.push((buf.len() - at, used));
                put_element(&mut buf, e);
                used += 1;
                rest = tail;
            }
            nest_end(&mut buf, list);
            message_end(&mut buf, at);
            let first = change.elements.len() - rest.len() - used;
            let elements = offsets.into_iter().map(|(o, k)| (o, first + k)).collect();
            sent.push(Sent {
                seq: s,
                change: i,
                elements,
            });
        }
    }
    // Only the last message asks for an ack: the kernel answers a refused message
    // whether asked or not, and holds every answer in the socket's receive buffer until the
    // batch is done (about 800 bytes each, of a buffer capped by net.core.rmem_max: thousands
    // of acks overflowed it, ENOBUFS, for a batch the kernel had committed).
    for at in headers.iter().rev().skip(1) {
        let flags = u16::from_ne_bytes([buf[at + 6], buf[at + 7]]) & !NLM_F_ACK;
        buf[at + 6..at + 8].copy_from_slice(&flags.to_ne_bytes());
    }
    let at = buf.len();
    message_start(
        &mut buf,
        NFNL_MSG_BATCH_END,
        NLM_F_REQUEST,
        counter.take(),
        AF_UNSPEC,
        res_id,
    );
    message_end(&mut buf, at);
    Batch {
        bytes: buf,
        begin_seq,
        sent,
    }
}

/// The element of `sent` the kernel's extended-ack offset `offset` points into (the last one
/// starting at or before it), as an index into its change's elements.
pub(super) fn element_at(sent: &Sent, offset: usize) -> Option<usize> {
    sent.elements
        .iter()
        .take_while(|(start, _)| *start <= offset)
        .last()
        .map(|(_, k)| *k)
}

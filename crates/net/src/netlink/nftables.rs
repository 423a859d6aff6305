//! Changes to an existing nf_tables table written over netlink, without the `nft` tool: one
//! batch (`NFNL_MSG_BATCH_BEGIN` … `NFNL_MSG_BATCH_END`) of [`Op`]s — named sets (plain, or
//! interval with their ranges: `objects/interval.rs`) and regular chains made, rules appended (`rule.rs`, with the anonymous set a rule's ports need:
//! `objects.rs`), element deletes and adds, chains and sets removed — atomic as an `nft -f`
//! transaction is (the kernel aborts all of it when one message fails). Why: an exec of nft
//! costs 3–8 ms of CPU and 4–14 ms of wall time per transaction, most of a NetworkPolicy
//! change's way to the kernel (decision 0022).
//!
//! Written from the kernel's headers (`linux/netfilter/nf_tables.h`, `nfnetlink.h`) and the
//! bytes nft 1.0.6 sends (its expressions, set flags and user data, so `nft list` shows the
//! same table whichever wrote it); no code of libnftnl or nftables (GPL). Only what tern's
//! tables need: keys of type `ipv4_addr` or `ipv6_addr`, for verdict maps `jump <chain>`, the
//! rules of `rule.rs`.
//!
//! Invariants: the batch's last message is acked and every refused one answers with its
//! errno (the kernel goes on through the batch, then answers all of it before `sendmsg`
//! returns); [`ElementWriter::write`] returns once the last one's answer arrived; a failure
//! names the set, the element (from the extended ack's offset) and the errno, and the kernel
//! then applied none of the batch.

mod encode;
mod objects;
mod rule;

pub use objects::{Op, SetKey};
pub use rule::{Match, Rule, Verdict};

use std::cell::Cell;
use std::net::IpAddr;
use std::time::Duration;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

use crate::error::{Error, Result};

/// `NFPROTO_INET` (linux/netfilter.h): a table of family `inet`.
pub const NFPROTO_INET: u8 = 1;

/// `NLMSG_ERROR` and the error message's flags (linux/netlink.h).
const NLMSG_ERROR: u16 = 2;
const NLM_F_ACK_TLVS: u16 = 0x200;
/// `enum nlmsgerr_attrs`: the kernel's message, and the offset of the attribute it blames.
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLMSGERR_ATTR_OFFS: u16 = 2;

/// How long a batch's acks may take: the kernel answers before `sendmsg` returns, so only a
/// lost answer waits this long.
const ACK_WAIT: Duration = Duration::from_secs(5);
/// The receive buffer: the last message's ack and the refusals (a refusal is about 800 bytes of
/// buffer in the kernel's accounting).
const RECEIVE_BUFFER: usize = 1 << 20;
/// A larger batch raises the socket's send buffer first (the whole batch is one `sendmsg`).
const SEND_BUFFER: usize = 200_000;

/// Deleting or adding elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `NFT_MSG_DELSETELEM`: each element must be present (else `ENOENT`).
    Delete,
    /// `NFT_MSG_NEWSETELEM` with `NLM_F_EXCL`: each element must be absent (else `EEXIST`).
    Add,
}

/// One element: its key, and for a verdict map the chain it jumps to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// The key (`ipv4_addr` or `ipv6_addr`, as the set's type says).
    pub key: IpAddr,
    /// `Some(chain)`: a verdict map's `jump chain`.
    pub jump: Option<String>,
}

/// Elements of one named set (or map) to delete or add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetChange {
    /// Delete or add.
    pub verb: Verb,
    /// The set's name.
    pub set: String,
    /// The elements.
    pub elements: Vec<Element>,
}

/// A `NETLINK_NETFILTER` socket, bound to the network namespace it was opened in, that writes
/// elements of one table.
///
/// Not `Sync`: one writer serves one thread at a time (sequence numbers are a `Cell`).
#[derive(Debug)]
pub struct ElementWriter {
    socket: Socket,
    family: u8,
    table: String,
    seq: Cell<u32>,
}

fn io(op: &str, e: &std::io::Error) -> Error {
    Error::Netlink {
        op: format!("nf_tables socket: {op}"),
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        advice: None,
    }
}

impl ElementWriter {
    /// Opens a socket in the calling thread's network namespace for table `family`/`table`.
    ///
    /// # Errors
    /// [`Error::Netlink`] when the socket cannot be made or configured.
    pub fn new(family: u8, table: &str) -> Result<ElementWriter> {
        let mut socket = Socket::new(NETLINK_NETFILTER).map_err(|e| io("create", &e))?;
        socket.bind_auto().map_err(|e| io("bind", &e))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(|e| io("connect", &e))?;
        socket
            .set_ext_ack(true)
            .map_err(|e| io("extended ack", &e))?;
        socket.set_cap_ack(true).map_err(|e| io("cap acks", &e))?;
        socket
            .set_rx_buf_sz(RECEIVE_BUFFER)
            .map_err(|e| io("receive buffer", &e))?;
        let wait = TimeVal::new(ACK_WAIT.as_secs() as _, 0);
        setsockopt(&socket, sockopt::ReceiveTimeout, &wait)
            .map_err(|e| io("receive timeout", &std::io::Error::from(e)))?;
        Ok(ElementWriter {
            socket,
            family,
            table: table.to_owned(),
            seq: Cell::new(1),
        })
    }

    /// Deletes and adds `changes` in one batch, in their order (deletes first, as a table's
    /// update needs: a key whose verdict changed is deleted, then added).
    ///
    /// # Errors
    /// [`Error::Netlink`] naming the set and element the kernel refused (the batch then did
    /// nothing), or the socket's errno; [`Error::NetlinkProtocol`] for an answer that cannot be
    /// read.
    pub fn write(&self, changes: &[SetChange]) -> Result<()> {
        let ops: Vec<Op> = changes.iter().cloned().map(Op::Elements).collect();
        self.apply(&ops)
    }

    /// Makes `ops` in one batch, in their order: sets and chains made, rules appended,
    /// elements moved, chains and sets removed (the caller orders them as nft's script would:
    /// what a rule or element names exists before it, nothing is removed while named).
    ///
    /// # Errors
    /// As [`ElementWriter::write`]; a refused set, chain or rule is named.
    pub fn apply(&self, ops: &[Op]) -> Result<()> {
        let empty = |op: &Op| matches!(op, Op::Elements(c) if c.elements.is_empty());
        if ops.iter().all(empty) {
            return Ok(());
        }
        // The encoder is pure: a list it failed to split (its one panic) refuses the batch,
        // and the caller's nft fallback, which has no 16-bit limit, writes the change.
        let (family, table, seq) = (self.family, self.table.as_str(), self.seq.get());
        let encoded = std::panic::catch_unwind(|| encode::batch(family, table, ops, seq));
        let b = encoded.map_err(|_| Error::NetlinkProtocol {
            op: "nf_tables batch".into(),
            reason: "an attribute outgrew its 16-bit length (not split): nothing sent".into(),
        })?;
        let last = b.sent.last().map_or(b.begin_seq, |s| s.seq);
        self.seq.set(last.wrapping_add(2).max(1));
        if b.bytes.len() > SEND_BUFFER {
            // As root the force variant passes the system's cap; else the send says EMSGSIZE.
            let _ = setsockopt(&self.socket, sockopt::SndBufForce, &(b.bytes.len() * 2));
        }
        let sent = self.socket.send(&b.bytes, 0).map_err(|e| io("send", &e))?;
        if sent != b.bytes.len() {
            return Err(Error::NetlinkProtocol {
                op: "nf_tables batch".into(),
                reason: format!("sent {sent} of {} bytes", b.bytes.len()),
            });
        }
        self.acks(&b, ops)
    }

    /// Reads the batch's answers until the last message's; the first refusal wins.
    fn acks(&self, b: &encode::Batch, ops: &[Op]) -> Result<()> {
        let mut waiting = b.sent.last().map(|s| s.seq);
        let mut refused = None;
        while waiting.is_some() {
            let (buf, _) = self
                .socket
                .recv_from_full()
                .map_err(|e| io("receive", &e))?;
            for ack in acks(&buf)? {
                if ack.seq == b.begin_seq && ack.errno != 0 {
                    return Err(batch_error(&ack));
                }
                if !b.sent.iter().any(|s| s.seq == ack.seq) {
                    continue; // an answer to an earlier batch
                }
                if waiting == Some(ack.seq) {
                    waiting = None;
                }
                if ack.errno != 0 && refused.is_none() {
                    refused = Some(refusal(b, ops, &ack));
                }
            }
        }
        refused.map_or(Ok(()), Err)
    }
}

/// One `NLMSG_ERROR` answer: its sequence number, errno (0: an ack) and extended-ack parts.
#[derive(Debug)]
struct Ack {
    seq: u32,
    errno: i32,
    message: Option<String>,
    offset: Option<usize>,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The `NLMSG_ERROR` messages of one datagram. With `NETLINK_CAP_ACK` an error carries the
/// errno, the request's 16-byte header, then (flag `NLM_F_ACK_TLVS`) the extended-ack TLVs.
fn acks(buf: &[u8]) -> Result<Vec<Ack>> {
    let bad = |reason: &str| Error::NetlinkProtocol {
        op: "nf_tables batch".into(),
        reason: reason.into(),
    };
    let mut out = Vec::new();
    let mut at = 0;
    while at + 16 <= buf.len() {
        let len = u32_at(buf, at).ok_or_else(|| bad("short header"))? as usize;
        if len < 16 || at + len > buf.len() {
            return Err(bad("a message's length runs past the datagram"));
        }
        let msg = &buf[at..at + len];
        let (ty, flags) = (u16_at(msg, 4).unwrap_or(0), u16_at(msg, 6).unwrap_or(0));
        if ty == NLMSG_ERROR {
            let code = u32_at(msg, 16).ok_or_else(|| bad("short error"))? as i32;
            let seq = u32_at(msg, 28).ok_or_else(|| bad("short error"))?;
            let mut ack = Ack {
                seq,
                errno: -code,
                message: None,
                offset: None,
            };
            if flags & NLM_F_ACK_TLVS != 0 {
                read_tlvs(msg.get(36..).unwrap_or(&[]), &mut ack);
            }
            out.push(ack);
        }
        at += (len + 3) & !3;
    }
    Ok(out)
}

fn read_tlvs(mut rest: &[u8], ack: &mut Ack) {
    while let (Some(len), Some(ty)) = (u16_at(rest, 0), u16_at(rest, 2)) {
        let len = len as usize;
        if len < 4 || len > rest.len() {
            return;
        }
        let value = &rest[4..len];
        match ty & 0x3fff {
            NLMSGERR_ATTR_MSG => {
                let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
                ack.message = Some(String::from_utf8_lossy(&value[..end]).into_owned());
            }
            NLMSGERR_ATTR_OFFS => ack.offset = u32_at(value, 0).map(|o| o as usize),
            _ => {}
        }
        rest = &rest[((len + 3) & !3).min(rest.len())..];
    }
}

fn with_kernel_text(op: String, ack: &Ack) -> String {
    match &ack.message {
        Some(m) if !m.is_empty() => format!("{op} (kernel says: {m})"),
        _ => op,
    }
}

fn batch_error(ack: &Ack) -> Error {
    Error::Netlink {
        op: with_kernel_text("nf_tables batch".into(), ack),
        errno: ack.errno,
        advice: None,
    }
}

/// What a refused message of the batch did: a set's, chain's or rule's op, or an element
/// change (its set, verb and element).
fn refusal(b: &encode::Batch, ops: &[Op], ack: &Ack) -> Error {
    let sent = b.sent.iter().find(|s| s.seq == ack.seq);
    let op = match (sent, sent.and_then(|s| ops.get(s.change))) {
        (_, Some(Op::NewSet { name, .. } | Op::NewIntervalSet { name, .. })) => {
            format!("make set {name}")
        }
        (_, Some(Op::NewChain(name))) => format!("make chain {name}"),
        (_, Some(Op::AddRule { chain, rule })) => format!("add rule to chain {chain}: {rule:?}"),
        (_, Some(Op::DeleteChain(name))) => format!("delete chain {name}"),
        (_, Some(Op::DeleteSet(name))) => format!("delete set {name}"),
        (Some(s), Some(Op::Elements(c))) => {
            let verb = match c.verb {
                Verb::Add => "add",
                Verb::Delete => "delete",
            };
            let element = ack
                .offset
                .and_then(|o| encode::element_at(s, o))
                .and_then(|k| c.elements.get(k));
            match element {
                Some(e) => format!("{verb} element {} of set {}", element_text(e), c.set),
                None => format!("{verb} {} elements of set {}", c.elements.len(), c.set),
            }
        }
        _ => "nf_tables batch".to_owned(),
    };
    Error::Netlink {
        op: with_kernel_text(op, ack),
        errno: ack.errno,
        advice: None,
    }
}

fn element_text(e: &Element) -> String {
    match &e.jump {
        Some(chain) => format!("{} : jump {chain}", e.key),
        None => e.key.to_string(),
    }
}

#[cfg(test)]
mod tests;

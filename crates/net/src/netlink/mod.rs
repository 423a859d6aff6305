//! Typed rtnetlink operations over a synchronous `NETLINK_ROUTE` socket (netlink-packet-route
//! over netlink-sys; no async runtime, see DESIGN.md).
//!
//! Invariants:
//! - A [`Handle`]'s socket belongs to the network namespace it was *opened* in, whichever thread
//!   uses it later: [`Handle::in_netns`] opens it on a thread inside the target namespace (via
//!   [`NetNs::run_in`]) and returns it to the caller, as netavark does.
//! - Strict checking (`NETLINK_GET_STRICT_CHK`) and extended acks are enabled; the kernel's
//!   extended-ack message, when present, is appended to the error's advice.
//! - Dumps are retried from the start when the kernel flags them `NLM_F_DUMP_INTR` (the
//!   table changed while it was being dumped).
//! - Every failure is an [`Error::Netlink`] carrying the operation and the errno.

mod address;
mod link;
pub mod nftables;
mod route;
mod vxlan;

use std::cell::Cell;
use std::os::fd::AsRawFd;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_DUMP,
    NLM_F_DUMP_INTR, NLM_F_MULTIPART, NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

pub use address::Address;
pub use link::{format_mac, parse_mac, Link};
pub use route::{KernelRoute, RouteScope};
pub use vxlan::{FdbEntry, Neighbour, VxlanInfo, VxlanSpec};

use crate::error::{Error, Result};
use crate::netns::NetNs;

/// How many times a dump interrupted by a concurrent change (`NLM_F_DUMP_INTR`) is restarted.
const DUMP_RETRIES: usize = 10;

/// `NLMSGERR_ATTR_MSG` from linux/netlink.h: the extended-ack message string.
const NLMSGERR_ATTR_MSG: u16 = 1;

/// An IP address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4 (`AF_INET`).
    V4,
    /// IPv6 (`AF_INET6`).
    V6,
}

impl Family {
    /// The family of an address.
    pub fn of(ip: &std::net::IpAddr) -> Family {
        if ip.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }

    fn to_nl(self) -> netlink_packet_route::AddressFamily {
        match self {
            Family::V4 => netlink_packet_route::AddressFamily::Inet,
            Family::V6 => netlink_packet_route::AddressFamily::Inet6,
        }
    }
}

/// A `NETLINK_ROUTE` socket bound to one network namespace, with typed operations.
///
/// Not `Sync`: one handle serves one thread at a time (sequence numbers are a `Cell`).
#[derive(Debug)]
pub struct Handle {
    socket: Socket,
    seq: Cell<u32>,
}

impl Handle {
    /// Opens a socket in the calling thread's network namespace.
    ///
    /// # Errors
    /// [`Error::Netlink`] when the socket cannot be created, bound or configured.
    pub fn new() -> Result<Handle> {
        let io = |op: &str, e: std::io::Error| Error::Netlink {
            op: format!("netlink socket: {op}"),
            errno: e.raw_os_error().unwrap_or(libc::EIO),
            advice: None,
        };
        let mut socket = Socket::new(NETLINK_ROUTE).map_err(|e| io("create", e))?;
        socket.bind_auto().map_err(|e| io("bind", e))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(|e| io("connect", e))?;
        socket
            .set_netlink_get_strict_chk(true)
            .map_err(|e| io("enable strict checking", e))?;
        socket
            .set_ext_ack(true)
            .map_err(|e| io("enable extended ack", e))?;
        // Acks carry only the request header, not the whole request: smaller answers.
        socket.set_cap_ack(true).map_err(|e| io("cap acks", e))?;
        Ok(Handle {
            socket,
            seq: Cell::new(1),
        })
    }

    /// Opens a socket inside `netns` ([`NetNs::run_in`]: on a thread that entered it and ended,
    /// or on the calling thread, which came back) and returns it for use from the calling
    /// thread. Every operation of the handle then acts in `netns`.
    ///
    /// # Errors
    /// [`Error::Setns`] when the namespace cannot be entered; as [`Handle::new`] otherwise.
    pub fn in_netns(netns: &NetNs) -> Result<Handle> {
        netns.run_in(Handle::new)?
    }

    fn next_seq(&self) -> u32 {
        let seq = self.seq.get().wrapping_add(1).max(1);
        self.seq.set(seq);
        seq
    }

    fn send(&self, op: &str, msg: RouteNetlinkMessage, flags: u16) -> Result<u32> {
        let seq = self.next_seq();
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        packet.finalize();
        let mut buf = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut buf);
        let sent = self.socket.send(&buf, 0).map_err(|e| os_error(op, &e))?;
        if sent != buf.len() {
            return Err(Error::NetlinkProtocol {
                op: op.to_string(),
                reason: format!("sent {sent} of {} bytes", buf.len()),
            });
        }
        Ok(seq)
    }

    /// Receives the answers to request `seq`, calling `each` on every message until the final
    /// one. Returns whether a multipart answer was flagged `NLM_F_DUMP_INTR`.
    fn receive(
        &self,
        op: &str,
        seq: u32,
        mut each: impl FnMut(RouteNetlinkMessage),
        advice: Option<&'static str>,
    ) -> Result<bool> {
        let mut interrupted = false;
        loop {
            let (buf, _) = self.socket.recv_from_full().map_err(|e| os_error(op, &e))?;
            let mut offset = 0;
            while offset < buf.len() {
                let packet = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&buf[offset..])
                    .map_err(|e| Error::NetlinkProtocol {
                        op: op.to_string(),
                        reason: e.to_string(),
                    })?;
                let len = packet.header.length as usize;
                if len == 0 {
                    return Err(Error::NetlinkProtocol {
                        op: op.to_string(),
                        reason: "zero-length message".into(),
                    });
                }
                offset += (len + 3) & !3;
                if packet.header.sequence_number != seq {
                    continue; // a late answer to an earlier request; not ours
                }
                if packet.header.flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                let flags = packet.header.flags;
                match packet.payload {
                    NetlinkPayload::InnerMessage(m) => {
                        each(m);
                        if flags & NLM_F_MULTIPART == 0 {
                            // A single answer (e.g. RTM_GETLINK by name); an ack does not follow.
                            return Ok(interrupted);
                        }
                    }
                    NetlinkPayload::Done(done) => {
                        if done.code < 0 {
                            return Err(netlink_error(op, -done.code, advice, None));
                        }
                        return Ok(interrupted);
                    }
                    NetlinkPayload::Error(err) => {
                        return match err.code {
                            None => Ok(interrupted),
                            Some(code) => {
                                let ext = if flags & NLM_F_ACK_TLVS != 0 {
                                    ext_ack_message(&err.header)
                                } else {
                                    None
                                };
                                Err(netlink_error(op, -code.get(), advice, ext))
                            }
                        };
                    }
                    NetlinkPayload::Noop => {}
                    NetlinkPayload::Overrun(_) => {
                        return Err(Error::NetlinkProtocol {
                            op: op.to_string(),
                            reason: "overrun".into(),
                        })
                    }
                    _ => {}
                }
            }
        }
    }

    /// Sends a change request and waits for its ack.
    pub(crate) fn request(
        &self,
        op: &str,
        msg: RouteNetlinkMessage,
        flags: u16,
        advice: Option<&'static str>,
    ) -> Result<()> {
        let kind = kind(&msg);
        let seq = self.send(op, msg, flags | NLM_F_ACK)?;
        let r = self.receive(op, seq, |_| {}, advice);
        tern_node::phase::mark(kind);
        r.map(drop)
    }

    /// Sends a get request answered by one message (not a dump).
    pub(crate) fn get_one(
        &self,
        op: &str,
        msg: RouteNetlinkMessage,
    ) -> Result<Option<RouteNetlinkMessage>> {
        let kind = kind(&msg);
        let seq = self.send(op, msg, 0)?;
        let mut answer = None;
        let r = self.receive(op, seq, |m| answer = Some(m), None);
        tern_node::phase::mark(kind);
        r.map(|_| answer)
    }

    /// Dumps a table, restarting when the kernel flags the dump as interrupted.
    pub(crate) fn dump(
        &self,
        op: &str,
        make: impl Fn() -> RouteNetlinkMessage,
        advice: Option<&'static str>,
    ) -> Result<Vec<RouteNetlinkMessage>> {
        for _ in 0..DUMP_RETRIES {
            let seq = self.send(op, make(), NLM_F_DUMP)?;
            let mut all = Vec::new();
            let interrupted = self.receive(op, seq, |m| all.push(m), advice);
            tern_node::phase::mark("nl:dump");
            if !interrupted? {
                return Ok(all);
            }
            tracing::debug!(
                op,
                "netlink dump interrupted by a concurrent change; retrying"
            );
        }
        Err(netlink_error(
            op,
            libc::EINTR,
            Some("the table kept changing during the dump; try again"),
            None,
        ))
    }

    /// The raw socket descriptor (for diagnostics).
    pub fn as_raw_fd(&self) -> i32 {
        self.socket.as_raw_fd()
    }
}

/// The phase name of a request (`nl:<message type>`), for [`tern_node::phase`].
fn kind(msg: &RouteNetlinkMessage) -> &'static str {
    use RouteNetlinkMessage as M;
    match msg {
        M::NewLink(_) => "nl:RTM_NEWLINK",
        M::DelLink(_) => "nl:RTM_DELLINK",
        M::GetLink(_) => "nl:RTM_GETLINK",
        M::SetLink(_) => "nl:RTM_SETLINK",
        M::NewAddress(_) => "nl:RTM_NEWADDR",
        M::DelAddress(_) => "nl:RTM_DELADDR",
        M::GetAddress(_) => "nl:RTM_GETADDR",
        M::NewRoute(_) => "nl:RTM_NEWROUTE",
        M::DelRoute(_) => "nl:RTM_DELROUTE",
        M::GetRoute(_) => "nl:RTM_GETROUTE",
        M::NewNeighbour(_) => "nl:RTM_NEWNEIGH",
        M::DelNeighbour(_) => "nl:RTM_DELNEIGH",
        M::GetNeighbour(_) => "nl:RTM_GETNEIGH",
        _ => "nl:other",
    }
}

fn os_error(op: &str, e: &std::io::Error) -> Error {
    Error::Netlink {
        op: op.to_string(),
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        advice: None,
    }
}

/// Builds an [`Error::Netlink`]; the kernel's extended-ack text, if any, joins the advice.
fn netlink_error(op: &str, errno: i32, advice: Option<&'static str>, ext: Option<String>) -> Error {
    let op = match ext {
        Some(text) if !text.is_empty() => format!("{op} (kernel says: {text})"),
        _ => op.to_string(),
    };
    Error::Netlink {
        op,
        errno,
        advice: advice.or_else(|| generic_advice(errno)),
    }
}

fn generic_advice(errno: i32) -> Option<&'static str> {
    match errno {
        libc::EPERM => Some("needs CAP_NET_ADMIN in the network namespace's user namespace"),
        _ => None,
    }
}

/// Advice for IPv6 operations: the kernel answers EAFNOSUPPORT when IPv6 is compiled out or
/// disabled with `ipv6.disable=1`, and EACCES when `net.ipv6.conf.<if>.disable_ipv6=1`
/// (netavark records the same pair).
pub(crate) fn ipv6_advice(family: Family, errno: i32) -> Option<&'static str> {
    match (family, errno) {
        (Family::V6, libc::EAFNOSUPPORT) | (Family::V6, libc::EACCES) => Some(
            "is IPv6 enabled? check the ipv6.disable boot option and net.ipv6.conf.*.disable_ipv6",
        ),
        _ => None,
    }
}

/// Extracts `NLMSGERR_ATTR_MSG` from an error payload: with `NETLINK_CAP_ACK` the payload
/// after the errno is the request's 16-byte header, then the TLVs (linux/netlink.h).
fn ext_ack_message(payload: &[u8]) -> Option<String> {
    let mut rest = payload.get(16..)?;
    while rest.len() >= 4 {
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let ty = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
        if len < 4 || len > rest.len() {
            return None;
        }
        if ty == NLMSGERR_ATTR_MSG {
            let text = &rest[4..len];
            let end = text.iter().position(|b| *b == 0).unwrap_or(text.len());
            return Some(String::from_utf8_lossy(&text[..end]).into_owned());
        }
        rest = &rest[((len + 3) & !3).min(rest.len())..];
    }
    None
}

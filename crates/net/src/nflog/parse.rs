//! nfnetlink_log messages and the packets they carry, read from bytes (pure): the datagrams the
//! kernel sends a socket bound to a log group ([`packets`]), the ack of a config request
//! ([`ack`]), and the flow a logged packet's network and transport headers name ([`Flow::of`]).
//!
//! Source: linux/netfilter/nfnetlink_log.h (`NFULNL_MSG_PACKET`, `NFULA_*`), linux/netlink.h
//! (`nlmsghdr`, `nlattr`, `NLMSG_ERROR`/`NLMSG_DONE`), linux/netfilter/nfnetlink.h (`nfgenmsg`,
//! whose `res_id` is the group, big-endian). Netlink headers are in host order; the attributes
//! nfnetlink_log fills are big-endian.
//!
//! Invariant: every length is checked before it is read; a malformed message is an error (or,
//! inside a good datagram, skipped), never a panic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, SystemTime};

/// `NFNL_SUBSYS_ULOG`: nfnetlink_log's subsystem, the high byte of its message types.
pub const NFNL_SUBSYS_ULOG: u16 = 4;
/// `NFULNL_MSG_PACKET`: a logged packet.
pub const NFULNL_MSG_PACKET: u16 = 0;
/// `NFULNL_MSG_CONFIG`: a config request (bind, copy mode...).
pub const NFULNL_MSG_CONFIG: u16 = 1;

const NLMSG_HDRLEN: usize = 16;
const NFGENMSG_LEN: usize = 4;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// nlattr type bits that are flags, not the type (`NLA_F_NESTED`, `NLA_F_NET_BYTEORDER`).
const NLA_TYPE_MASK: u16 = 0x3fff;

const NFULA_TIMESTAMP: u16 = 3;
const NFULA_IFINDEX_INDEV: u16 = 4;
const NFULA_IFINDEX_OUTDEV: u16 = 5;
const NFULA_PAYLOAD: u16 = 9;
const NFULA_PREFIX: u16 = 10;

/// A malformed datagram.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed nfnetlink_log datagram: {0}")]
pub struct Malformed(pub &'static str);

/// One packet nfnetlink_log delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedPacket {
    /// The log group (`nfgenmsg.res_id`).
    pub group: u16,
    /// `NFULA_PREFIX`, the rule's `log prefix` (without its NUL).
    pub prefix: String,
    /// `NFULA_TIMESTAMP`, when the packet had one (a forwarded packet often has none).
    pub timestamp: Option<SystemTime>,
    /// `NFULA_IFINDEX_INDEV`.
    pub in_ifindex: Option<u32>,
    /// `NFULA_IFINDEX_OUTDEV`.
    pub out_ifindex: Option<u32>,
    /// `NFULA_PAYLOAD`: the packet from its network header, up to the copy range.
    pub payload: Vec<u8>,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn be32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// The netlink messages of a datagram: (type, flags, sequence, body after the header).
fn messages(buf: &[u8]) -> impl Iterator<Item = Result<(u16, u16, u32, &[u8]), Malformed>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= buf.len() {
            return None;
        }
        let msg = (|| {
            let len = u32_at(buf, at).ok_or(Malformed("short netlink header"))? as usize;
            if len < NLMSG_HDRLEN || at + len > buf.len() {
                return Err(Malformed("netlink length out of bounds"));
            }
            let ty = u16_at(buf, at + 4).ok_or(Malformed("short netlink header"))?;
            let flags = u16_at(buf, at + 6).ok_or(Malformed("short netlink header"))?;
            let seq = u32_at(buf, at + 8).ok_or(Malformed("short netlink header"))?;
            Ok((ty, flags, seq, &buf[at + NLMSG_HDRLEN..at + len], len))
        })();
        match msg {
            Ok((ty, flags, seq, body, len)) => {
                at += align4(len);
                Some(Ok((ty, flags, seq, body)))
            }
            Err(e) => {
                at = buf.len();
                Some(Err(e))
            }
        }
    })
}

/// The attributes of a body: (type without flag bits, value).
fn attributes(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = usize::from(u16_at(b, 0)?);
        let ty = u16_at(b, 2)? & NLA_TYPE_MASK;
        if len < 4 || len > b.len() {
            return None;
        }
        let value = &b[4..len];
        b = b.get(align4(len)..).unwrap_or_default();
        Some((ty, value))
    })
}

/// The packets of one datagram from a socket bound to a log group; messages of other types
/// (`NLMSG_DONE` of a batch, an ack) are skipped.
///
/// # Errors
/// [`Malformed`] when a message's length runs past the datagram, or a packet message has no
/// `nfgenmsg`.
pub fn packets(buf: &[u8]) -> Result<Vec<LoggedPacket>, Malformed> {
    let mut out = Vec::new();
    for m in messages(buf) {
        let (ty, _, _, body) = m?;
        if ty != (NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_PACKET) {
            continue;
        }
        let group = be16_at(body, 2).ok_or(Malformed("short nfgenmsg"))?;
        let mut p = LoggedPacket {
            group,
            prefix: String::new(),
            timestamp: None,
            in_ifindex: None,
            out_ifindex: None,
            payload: Vec::new(),
        };
        for (ty, v) in attributes(&body[NFGENMSG_LEN..]) {
            match ty {
                NFULA_PREFIX => {
                    let text = v.split(|b| *b == 0).next().unwrap_or_default();
                    p.prefix = String::from_utf8_lossy(text).into_owned();
                }
                NFULA_TIMESTAMP => {
                    if let (Some(s), Some(us)) = (be64_at(v, 0), be64_at(v, 8)) {
                        let since = Duration::from_secs(s) + Duration::from_micros(us);
                        p.timestamp = SystemTime::UNIX_EPOCH.checked_add(since);
                    }
                }
                NFULA_IFINDEX_INDEV => p.in_ifindex = be32_at(v, 0),
                NFULA_IFINDEX_OUTDEV => p.out_ifindex = be32_at(v, 0),
                NFULA_PAYLOAD => p.payload = v.to_vec(),
                _ => {}
            }
        }
        out.push(p);
    }
    Ok(out)
}

/// The answer to request `seq` in a datagram: `Some(0)` an ack, `Some(errno)` a refusal (a
/// positive errno), `None` when the datagram holds no answer to it.
///
/// # Errors
/// [`Malformed`] as [`packets`].
pub fn ack(buf: &[u8], seq: u32) -> Result<Option<i32>, Malformed> {
    for m in messages(buf) {
        let (ty, _, s, body) = m?;
        if s != seq {
            continue;
        }
        match ty {
            NLMSG_ERROR => {
                let code = u32_at(body, 0).ok_or(Malformed("short error message"))? as i32;
                return Ok(Some(-code));
            }
            NLMSG_DONE => return Ok(Some(0)),
            _ => {}
        }
    }
    Ok(None)
}

/// A config request to nfnetlink_log for `group`: a netlink header (host order), an
/// `nfgenmsg` (`AF_UNSPEC`, version 0, the group big-endian) and `attrs` as (type, value).
pub fn config_request(seq: u32, group: u16, attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = vec![0u8, 0u8];
    body.extend_from_slice(&group.to_be_bytes());
    for (ty, v) in attrs {
        let len = 4 + v.len();
        body.extend_from_slice(&(len as u16).to_ne_bytes());
        body.extend_from_slice(&ty.to_ne_bytes());
        body.extend_from_slice(v);
        body.resize(align4(body.len()), 0);
    }
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16;
    let mut out = Vec::with_capacity(NLMSG_HDRLEN + body.len());
    out.extend_from_slice(&((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes());
    out.extend_from_slice(&(NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_CONFIG).to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&body);
    out
}

/// A transport protocol as the IP header numbers it.
pub const IPPROTO_TCP: u8 = 6;
/// UDP.
pub const IPPROTO_UDP: u8 = 17;
/// SCTP.
pub const IPPROTO_SCTP: u8 = 132;
/// ICMP.
pub const IPPROTO_ICMP: u8 = 1;
/// ICMPv6.
pub const IPPROTO_ICMPV6: u8 = 58;

/// The flow a packet names: its addresses, transport protocol and ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Flow {
    /// The source address.
    pub src: IpAddr,
    /// The destination address.
    pub dst: IpAddr,
    /// The transport protocol number (`IPPROTO_*`).
    pub protocol: u8,
    /// TCP, UDP and SCTP: the source port.
    pub src_port: Option<u16>,
    /// TCP, UDP and SCTP: the destination port.
    pub dst_port: Option<u16>,
}

impl Flow {
    /// The flow of a packet starting at its IPv4 or IPv6 header (the version nibble says
    /// which); `None` when the header is cut short or not IP. IPv6 extension headers
    /// (hop-by-hop, routing, destination options, fragment) are walked to the transport header.
    pub fn of(packet: &[u8]) -> Option<Flow> {
        let v6 = packet.first()? >> 4 == 6;
        let (src, dst, mut protocol, mut at) = match packet.first()? >> 4 {
            4 => {
                let ihl = usize::from(packet[0] & 0x0f) * 4;
                if ihl < 20 {
                    return None;
                }
                let src: [u8; 4] = packet.get(12..16)?.try_into().ok()?;
                let dst: [u8; 4] = packet.get(16..20)?.try_into().ok()?;
                let fragment_offset = be16_at(packet, 6)? & 0x1fff;
                let proto = *packet.get(9)?;
                let at = if fragment_offset == 0 {
                    ihl
                } else {
                    usize::MAX
                };
                (
                    Ipv4Addr::from(src).into(),
                    Ipv4Addr::from(dst).into(),
                    proto,
                    at,
                )
            }
            6 => {
                let src: [u8; 16] = packet.get(8..24)?.try_into().ok()?;
                let dst: [u8; 16] = packet.get(24..40)?.try_into().ok()?;
                (
                    Ipv6Addr::from(src).into(),
                    Ipv6Addr::from(dst).into(),
                    *packet.get(6)?,
                    40,
                )
            }
            _ => return None,
        };
        // IPv6 extension headers: hop-by-hop 0, routing 43, fragment 44, destination options 60.
        while v6 && matches!(protocol, 0 | 43 | 44 | 60) && at != usize::MAX {
            let next = *packet.get(at)?;
            let len = if protocol == 44 {
                // A fragment that is not the first has no transport header.
                if be16_at(packet, at + 2)? & 0xfff8 != 0 {
                    at = usize::MAX;
                }
                8
            } else {
                (usize::from(*packet.get(at + 1)?) + 1) * 8
            };
            protocol = next;
            at = at.saturating_add(len);
        }
        let ports = match protocol {
            IPPROTO_TCP | IPPROTO_UDP | IPPROTO_SCTP if at != usize::MAX => {
                be16_at(packet, at).zip(be16_at(packet, at + 2))
            }
            _ => None,
        };
        Some(Flow {
            src,
            dst,
            protocol,
            src_port: ports.map(|p| p.0),
            dst_port: ports.map(|p| p.1),
        })
    }

    /// The protocol's name as NetworkPolicy spells it (`TCP`, `UDP`, `SCTP`), else `ICMP`,
    /// `ICMPv6` or the number.
    pub fn protocol_name(&self) -> String {
        match self.protocol {
            IPPROTO_TCP => "TCP".into(),
            IPPROTO_UDP => "UDP".into(),
            IPPROTO_SCTP => "SCTP".into(),
            IPPROTO_ICMP => "ICMP".into(),
            IPPROTO_ICMPV6 => "ICMPv6".into(),
            n => n.to_string(),
        }
    }
}

#[cfg(test)]
mod tests;

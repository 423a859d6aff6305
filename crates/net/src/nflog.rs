//! A socket bound to one nfnetlink_log group: what nftables' `log group N` rules send, read
//! synchronously (tern-agent's denied-flow log, `--network-policy-log-denied`).
//!
//! Opened in the calling thread's network namespace, as every netlink socket here: log groups
//! are per network namespace (the kernel keeps nfnetlink_log instances per netns), so the socket
//! receives what the rules of its own netns log. One group has one listener: binding a group
//! another socket holds fails with `EPERM`. The kernel drops the binding when the socket closes.
//!
//! Configuration (linux/netfilter/nfnetlink_log.h): `NFULNL_CFG_CMD_BIND`; copy mode
//! `NFULNL_COPY_PACKET` with a small range (the headers, not the data); a queue threshold and
//! flush timeout so packets arrive in small batches within a tenth of a second; a receive
//! buffer that absorbs a burst. A full buffer loses packets (`ENOBUFS` on the next receive):
//! counted, not fatal.

mod parse;

use std::time::Duration;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket, SocketAddr};
use nix::sys::socket::{setsockopt, sockopt::ReceiveTimeout};
use nix::sys::time::TimeVal;

pub use parse::{ack, config_request, packets, Flow, LoggedPacket, Malformed};
pub use parse::{IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP};

use crate::error::{Error, Result};

const NFULA_CFG_CMD: u16 = 1;
const NFULA_CFG_MODE: u16 = 2;
const NFULA_CFG_NLBUFSIZ: u16 = 3;
const NFULA_CFG_TIMEOUT: u16 = 4;
const NFULA_CFG_QTHRESH: u16 = 5;
const NFULNL_CFG_CMD_BIND: u8 = 1;
const NFULNL_COPY_PACKET: u8 = 2;

/// Bytes of each packet copied: an IPv6 header with a few extension headers and the ports.
pub const COPY_RANGE: u32 = 128;
/// Packets the kernel batches before sending (or [`FLUSH_TIMEOUT_CS`] passes).
const QUEUE_THRESHOLD: u32 = 16;
/// The batch's longest wait, hundredths of a second.
const FLUSH_TIMEOUT_CS: u32 = 10;
/// The kernel's batch buffer, bytes.
const KERNEL_BATCH: u32 = 16 * 1024;
/// The socket's receive buffer, bytes: a second of a few thousand logged packets.
const RECEIVE_BUFFER: usize = 1024 * 1024;

/// What one receive gave.
#[derive(Debug)]
pub enum Received {
    /// Packets (possibly none: a datagram of other messages).
    Packets(Vec<LoggedPacket>),
    /// The receive timeout passed with nothing.
    Timeout,
    /// The receive buffer overflowed: the kernel dropped packets meant for us.
    Overflow,
}

/// A socket bound to one nfnetlink_log group.
#[derive(Debug)]
pub struct LogSocket {
    socket: Socket,
    group: u16,
    buf: Vec<u8>,
}

fn io(op: String, e: &std::io::Error) -> Error {
    Error::Netlink {
        op,
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        advice: None,
    }
}

impl LogSocket {
    /// Binds `group` in the calling thread's network namespace; receives wait at most
    /// `timeout` (so the reader can look for a stop).
    ///
    /// # Errors
    /// [`Error::Netlink`] when the socket cannot be made or the kernel refuses the bind
    /// (`EPERM`: another listener holds the group, or no `CAP_NET_ADMIN`).
    pub fn bind(group: u16, timeout: Duration) -> Result<LogSocket> {
        let op = |what: &str| format!("nfnetlink_log group {group}: {what}");
        let mut socket = Socket::new(NETLINK_NETFILTER).map_err(|e| io(op("create"), &e))?;
        socket.bind_auto().map_err(|e| io(op("bind"), &e))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(|e| io(op("connect"), &e))?;
        let _ = socket.set_rx_buf_sz(RECEIVE_BUFFER);
        let tv = TimeVal::new(timeout.as_secs() as i64, i64::from(timeout.subsec_micros()));
        setsockopt(&socket, ReceiveTimeout, &tv).map_err(|e| Error::Netlink {
            op: op("receive timeout"),
            errno: e as i32,
            advice: None,
        })?;
        let mut s = LogSocket {
            socket,
            group,
            buf: Vec::with_capacity(64 * 1024),
        };
        let mut mode = COPY_RANGE.to_be_bytes().to_vec();
        mode.extend_from_slice(&[NFULNL_COPY_PACKET, 0]);
        let config: [(u16, Vec<u8>); 5] = [
            (NFULA_CFG_CMD, vec![NFULNL_CFG_CMD_BIND]),
            (NFULA_CFG_MODE, mode),
            (NFULA_CFG_NLBUFSIZ, KERNEL_BATCH.to_be_bytes().to_vec()),
            (NFULA_CFG_QTHRESH, QUEUE_THRESHOLD.to_be_bytes().to_vec()),
            (NFULA_CFG_TIMEOUT, FLUSH_TIMEOUT_CS.to_be_bytes().to_vec()),
        ];
        for (seq, attr) in (1..).zip(config) {
            let what = match attr.0 {
                NFULA_CFG_CMD => "bind",
                _ => "configure",
            };
            s.request(seq, &[attr], &op(what))?;
        }
        Ok(s)
    }

    /// The group bound.
    pub fn group(&self) -> u16 {
        self.group
    }

    /// Sends one config request and waits for its ack.
    fn request(&mut self, seq: u32, attrs: &[(u16, Vec<u8>)], op: &str) -> Result<()> {
        let msg = config_request(seq, self.group, attrs);
        self.socket
            .send(&msg, 0)
            .map_err(|e| io(op.to_owned(), &e))?;
        loop {
            self.buf.clear();
            self.socket
                .recv(&mut self.buf, 0)
                .map_err(|e| io(op.to_owned(), &e))?;
            let answer = ack(&self.buf, seq).map_err(|e| Error::NetlinkProtocol {
                op: op.to_owned(),
                reason: e.to_string(),
            })?;
            match answer {
                Some(0) => return Ok(()),
                Some(errno) => {
                    // nfulnl_recv_config answers EPERM both when another socket holds the
                    // group (`inst->peer_portid != portid`) and without CAP_NET_ADMIN (seen on
                    // 6.18: a second bind of a held group, as root, gets EPERM, not EBUSY).
                    let advice = (errno == libc::EPERM).then_some(
                        "another listener (ulogd, a second agent) holds this nfnetlink_log group, or the process lacks CAP_NET_ADMIN: stop the other listener or choose another group",
                    );
                    return Err(Error::Netlink {
                        op: op.to_owned(),
                        errno,
                        advice,
                    });
                }
                None => continue,
            }
        }
    }

    /// Waits for the next datagram (at most the timeout given to [`LogSocket::bind`]).
    ///
    /// # Errors
    /// [`Error::Netlink`] when the receive fails otherwise; [`Error::NetlinkProtocol`] when
    /// the datagram is malformed.
    pub fn receive(&mut self) -> Result<Received> {
        self.buf.clear();
        match self.socket.recv(&mut self.buf, 0) {
            Ok(_) => {}
            Err(e) => {
                return match e.raw_os_error() {
                    Some(libc::EAGAIN | libc::EINTR) => Ok(Received::Timeout),
                    Some(libc::ENOBUFS) => Ok(Received::Overflow),
                    _ => Err(io(
                        format!("nfnetlink_log group {}: receive", self.group),
                        &e,
                    )),
                };
            }
        }
        packets(&self.buf)
            .map(Received::Packets)
            .map_err(|e| Error::NetlinkProtocol {
                op: format!("nfnetlink_log group {}: receive", self.group),
                reason: e.to_string(),
            })
    }
}

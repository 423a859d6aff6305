//! A listener of nf_tables' notifications in each agent's netns: a NETLINK_NETFILTER socket
//! joined to NFNLGRP_NFTABLES ([`super::nft_events`]), read by a thread that stamps every
//! datagram on receipt (epoch seconds) and folds its events into transactions (one ends with
//! NFT_MSG_NEWGEN): when it began and ended, whether it replaced `inet tern_netpol`, dropped a
//! set, and which marker addresses (the fixtures' `10.251.*`, the changing policy's
//! `172.16.*`/`172.17.*`, the ADD phase's `10.202.*`) it added or deleted, as nft prints them (an
//! interval set's start/end pair as `a-b` or a network).
//!
//! It replaced `nft monitor`, which (nft 1.0.6) reads the whole ruleset before it subscribes (over
//! 120 s at shape A's ≈ 450,000 elements), and which, having lost the first table's transaction
//! to ENOBUFS, never learned its sets' types and printed none of their later elements. This
//! listener needs no types: a key of 4 or 16 bytes is an address. A receive buffer overflow
//! (ENOBUFS: the first table, hundreds of thousands of messages, may exceed it) is counted and
//! read past; later transactions are small.
//!
//! Invariant: a transaction of another table (the readiness probe's) is recorded, not `ours`.
//! The thread ends when the [`Monitor`] drops (a receive timeout lets it see the stop).

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;
use tern_net::netns::NetNs;

use super::nft_events::{address, before, events, interval, Event, NFNLGRP_NFTABLES};
use crate::cluster::api::now;
use crate::Res;

/// The agent's table and the probe's.
const OURS: &str = "tern_netpol";
const PROBE: &str = "tern_np_probe";
/// The socket's receive buffer (SO_RCVBUFFORCE): a few thousand changes' worth; the first table
/// may overflow it (counted).
const RECEIVE_BUFFER: usize = 64 << 20;
/// One receive: a datagram of coalesced notifications is at most a few pages.
const DATAGRAM: usize = 1 << 20;

/// One transaction as the kernel announced it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tx {
    pub(crate) start: f64,
    pub(crate) gen: f64,
    pub(crate) ours: bool,
    pub(crate) replace: bool,
    pub(crate) messages: usize,
    pub(crate) added: HashSet<String>,
    pub(crate) deleted: HashSet<String>,
    pub(crate) sets_deleted: bool,
    /// Elements deleted and not added back in the same transaction (which the kernel commits
    /// at once: a map entry replaced is a delete and an add) that are no marker's — a pod,
    /// namespace or policy the changes did not touch — and the first few of them.
    pub(crate) other_deleted: usize,
    pub(crate) other_sample: Vec<String>,
    /// Such elements while the transaction is open.
    pub(crate) other_gone: HashSet<String>,
}

/// An interval's start, waiting for its end key (the next element of the same set and verb).
#[derive(Debug)]
struct Start {
    set: String,
    deleted: bool,
    key: IpAddr,
}

#[derive(Default)]
struct State {
    txs: Vec<Tx>,
    cur: Option<Tx>,
    start: Option<Start>,
    probe_seen: bool,
    overflows: u64,
}

/// One agent's listener.
pub(crate) struct Monitor {
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<()>>,
}

const MARKS: [&str; 4] = ["10.251.", "172.16.", "172.17.", "10.202."];

/// An IPv4 address as a number.
fn v4(s: &str) -> Option<u32> {
    s.parse::<std::net::Ipv4Addr>().ok().map(u32::from)
}

/// Whether the element `token` (an address, a range `a-b` or a network) is `mark` or, for an
/// address mark, holds it (the engine merges adjacent addresses into one interval element).
fn holds(token: &str, mark: &str) -> bool {
    if token == mark {
        return true;
    }
    let Some(m) = v4(mark) else {
        return false;
    };
    if let Some((a, b)) = token.split_once('-') {
        return matches!((v4(a), v4(b)), (Some(a), Some(b)) if a <= m && m <= b);
    }
    if let Some((net, len)) = token.split_once('/') {
        if let (Some(n), Ok(len)) = (v4(net), len.parse::<u32>()) {
            let mask = u32::MAX.checked_shl(32 - len.min(32)).unwrap_or(0);
            return n & mask == m & mask;
        }
    }
    false
}

/// Notes `token` in TX when it is a marker's; counts a delete of any other.
fn record(tx: &mut Tx, token: String, deleted: bool) {
    if MARKS.iter().any(|m| token.starts_with(m)) {
        if deleted {
            tx.deleted.insert(token);
        } else {
            tx.added.insert(token);
        }
    } else if deleted {
        tx.other_gone.insert(token);
    } else if !tx.other_gone.is_empty() {
        tx.other_gone.remove(&token);
    }
}

/// Counts the elements a closing transaction deleted and did not add back.
fn close(tx: &mut Tx) {
    tx.other_deleted = tx.other_gone.len();
    let mut gone: Vec<String> = tx.other_gone.drain().collect();
    gone.sort_unstable();
    gone.truncate(5);
    tx.other_sample = gone;
}

/// An interval start that no end followed: a plain set's element.
fn settle(st: &mut State) {
    if let (Some(s), Some(tx)) = (st.start.take(), st.cur.as_mut()) {
        record(tx, s.key.to_string(), s.deleted);
    }
}

fn elem(st: &mut State, set: String, deleted: bool, key: &[u8], end: bool) {
    let Some(addr) = address(key) else {
        return settle(st);
    };
    if !end {
        settle(st);
        st.start = Some(Start {
            set,
            deleted,
            key: addr,
        });
        return;
    }
    match st.start.take() {
        Some(s) if s.set == set && s.deleted == deleted => {
            if let Some(tx) = st.cur.as_mut() {
                record(tx, interval(s.key, before(addr)), deleted);
            }
        }
        // An end with no start: the 0.0.0.0 end that closes "nothing below" an interval set.
        other => {
            st.start = other;
            settle(st);
        }
    }
}

fn fold(st: &mut State, ts: f64, ev: Event) {
    let tx = st.cur.get_or_insert_with(|| Tx {
        start: ts,
        ..Tx::default()
    });
    tx.messages += 1;
    match ev {
        Event::Gen => {
            settle(st);
            if let Some(mut done) = st.cur.take() {
                done.gen = ts;
                close(&mut done);
                st.txs.push(done);
            }
        }
        Event::Table { table, deleted } => {
            st.probe_seen |= table == PROBE;
            if table == OURS {
                tx.ours = true;
                tx.replace |= !deleted;
            }
        }
        Event::Set { table, deleted, .. } if table == OURS => {
            tx.ours = true;
            // The incremental engine drops a set no rule names any more whole, elements and all.
            tx.sets_deleted |= deleted;
        }
        Event::ChainOrRule { table } if table == OURS => tx.ours = true,
        Event::Elem {
            table,
            set,
            deleted,
            key,
            end,
        } if table == OURS => {
            tx.ours = true;
            elem(st, set, deleted, &key, end);
        }
        _ => {}
    }
}

/// A socket joined to nf_tables' group in NS's network namespace, its receives timing out.
fn listener(ns: &str) -> Res<Socket> {
    let netns = NetNs::open(format!("/run/netns/{ns}")).map_err(|e| e.to_string())?;
    let made = netns.run_in(|| -> Res<Socket> {
        let mut s = Socket::new(NETLINK_NETFILTER).map_err(|e| format!("socket: {e}"))?;
        s.bind_auto().map_err(|e| format!("bind: {e}"))?;
        s.add_membership(NFNLGRP_NFTABLES)
            .map_err(|e| format!("join NFNLGRP_NFTABLES: {e}"))?;
        Ok(s)
    });
    let s = made.map_err(|e| e.to_string())??;
    if setsockopt(&s, sockopt::RcvBufForce, &RECEIVE_BUFFER).is_err() {
        let _ = s.set_rx_buf_sz(RECEIVE_BUFFER);
    }
    setsockopt(&s, sockopt::ReceiveTimeout, &TimeVal::new(0, 200_000))
        .map_err(|e| format!("receive timeout: {e}"))?;
    Ok(s)
}

/// Reads S until STOP, folding each datagram's events into ST.
fn read(s: Socket, st: Arc<Mutex<State>>, stop: Arc<AtomicBool>) {
    let mut buf: Vec<u8> = Vec::with_capacity(DATAGRAM);
    while !stop.load(Ordering::Relaxed) {
        buf.clear();
        match s.recv(&mut buf, 0) {
            Ok(_) => {
                let ts = now();
                let evs = events(&buf);
                if let Ok(mut g) = st.lock() {
                    for ev in evs {
                        fold(&mut g, ts, ev);
                    }
                }
            }
            Err(e) => match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => {}
                Some(libc::ENOBUFS) => {
                    if let Ok(mut g) = st.lock() {
                        g.overflows += 1;
                    }
                }
                _ => return,
            },
        }
    }
}

impl Monitor {
    /// Starts the listener in NS and returns once it saw a probe table's transaction there.
    pub(crate) fn start(ns: &str) -> Res<Self> {
        let s = listener(ns).map_err(|e| format!("nf_tables listener in {ns}: {e}"))?;
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, halt) = (Arc::clone(&state), Arc::clone(&stop));
        let reader = Some(thread::spawn(move || read(s, st, halt)));
        let m = Monitor {
            state,
            stop,
            reader,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            let _ = std::process::Command::new("ip")
                .args(["netns", "exec", ns, "nft"])
                .arg(format!("add table inet {PROBE}; delete table inet {PROBE}"))
                .status();
            thread::sleep(Duration::from_millis(50));
            if m.state.lock().map(|g| g.probe_seen).unwrap_or(false) {
                return Ok(m);
            }
        }
        Err(format!("nf_tables listener in {ns}: no probe seen in 30 s"))
    }

    /// Receive buffer overflows so far (each lost an unknown number of messages).
    pub(crate) fn overflows(&self) -> u64 {
        self.state.lock().map(|g| g.overflows).unwrap_or(0)
    }

    /// The transactions of the agent's table that began at or after `t0`.
    pub(crate) fn since(&self, t0: f64) -> Vec<Tx> {
        self.state
            .lock()
            .map(|g| {
                g.txs
                    .iter()
                    .filter(|t| t.ours && t.start >= t0)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first transaction at or after `t0` that shows `mark` added (`present`) or gone (a
    /// replace without it, or a delete of it).
    pub(crate) fn find(&self, t0: f64, mark: &str, present: bool) -> Option<Tx> {
        self.state.lock().ok().and_then(|g| {
            g.txs
                .iter()
                .filter(|t| t.ours && t.start >= t0)
                .find(|t| {
                    let added = t.added.iter().any(|e| holds(e, mark));
                    if present {
                        added
                    } else {
                        ((t.replace || t.sets_deleted) && !added)
                            || t.deleted.iter().any(|e| holds(e, mark))
                    }
                })
                .cloned()
        })
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

#[cfg(test)]
#[path = "monitor_tests.rs"]
mod tests;

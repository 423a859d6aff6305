//! `--network-policy-log-denied`: denied connections, named. The table's per-pod chains log the
//! first packet of each connection they drop to an nfnetlink_log group (`tern_netpol::ruleset`,
//! rate-limited in the kernel); this thread reads the group, names each end from the store (a
//! pod `namespace/name`, else the address) with the policies that isolate the end whose chain
//! dropped it, and writes one structured log line per denied flow and counts it in
//! `tern_agent_network_policy_denied_total{namespace,policy,direction}`.
//!
//! A flow is its addresses, protocol and ports: a client retrying (a SYN retransmitted, a DNS
//! query resent) sends the same flow again, and the chain logs it again (a dropped connection
//! is never confirmed, so each retry is `ct state new`); [`Recent`] folds those into the first
//! for [`REPEAT_WINDOW`].
//!
//! The thread that runs it is `report.rs` (it holds the store; this file does not).
//!
//! Invariants: the counter's series are bounded ([`DeniedCounts`]); the flows remembered are
//! bounded ([`Recent`]).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime};

use tern_net::nflog::{Flow, LogSocket, Received};
use tern_netpol::compile::Dir;
use tern_netpol::ruleset::direction_of_prefix;
use tern_netpol::{AsPod, Engine};
use tracing::info;

/// How long a flow logged again counts as the same denied flow (a TCP client's SYN retries
/// span about a minute: 1 + 2 + 4 + 8 + 16 + 32 s).
pub const REPEAT_WINDOW: Duration = Duration::from_secs(90);
/// Flows remembered for [`REPEAT_WINDOW`] at most; past it the oldest are forgotten.
const RECENT_CAPACITY: usize = 4096;
/// How long a receive waits before looking for a stop.
pub(crate) const RECEIVE_TIMEOUT: Duration = Duration::from_millis(250);

/// One packet a chain logged: when, which direction's chain, and the flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logged {
    /// The kernel's time of the packet, else when it was received.
    pub time: SystemTime,
    /// The direction of the chain that dropped it.
    pub direction: Dir,
    /// Its addresses, protocol and ports.
    pub flow: Flow,
}

/// One end of a denied flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// A pod the store knows, by `namespace/name`.
    Pod(String),
    /// An address no pod holds.
    Address(IpAddr),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Pod(k) => f.write_str(k),
            End::Address(ip) => write!(f, "{ip}"),
        }
    }
}

/// A denied flow, named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeniedFlow {
    /// The packet.
    pub logged: Logged,
    /// The source.
    pub from: End,
    /// The destination.
    pub to: End,
    /// The NetworkPolicies (`namespace/name`) isolating the end whose chain dropped it (the
    /// destination for ingress, the source for egress): none of their rules allows the flow.
    /// Empty when the table judged an address the store no longer isolates (a change in
    /// flight).
    pub policies: Vec<String>,
}

fn end<P: AsPod>(engine: &Engine<P>, ip: IpAddr) -> End {
    match engine.pod_by_ip(ip) {
        Some(p) => End::Pod(format!("{}/{}", p.as_pod().namespace, p.as_pod().name)),
        None => End::Address(ip),
    }
}

/// Names a logged packet's ends and the policies that denied it, from `engine` (one that logs:
/// `Engine::logging`).
pub fn describe<P: AsPod>(engine: &Engine<P>, logged: Logged) -> DeniedFlow {
    let judged = match logged.direction {
        Dir::Ingress => logged.flow.dst,
        Dir::Egress => logged.flow.src,
    };
    let (from, to) = (end(engine, logged.flow.src), end(engine, logged.flow.dst));
    let policies = engine
        .isolated_by(logged.direction, judged)
        .map(|(_, p)| p.into_iter().map(str::to_owned).collect())
        .unwrap_or_default();
    DeniedFlow {
        logged,
        from,
        to,
        policies,
    }
}

impl DeniedFlow {
    /// The direction as NetworkPolicy spells it.
    pub fn direction(&self) -> &'static str {
        match self.logged.direction {
            Dir::Ingress => "ingress",
            Dir::Egress => "egress",
        }
    }

    /// Writes the flow's log line.
    pub fn log(&self) {
        let f = &self.logged.flow;
        let secs = self
            .logged
            .time
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        info!(
            time = %tern_kube::time::format_rfc3339(secs),
            from = %self.from,
            to = %self.to,
            protocol = %f.protocol_name(),
            port = %f.dst_port.map_or_else(String::new, |p| p.to_string()),
            direction = %self.direction(),
            policies = %self.policies.join(","),
            "network policy: denied"
        );
    }
}

/// Flows logged within [`REPEAT_WINDOW`]: a retry is not a new denied flow.
#[derive(Debug, Default)]
pub struct Recent {
    seen: HashMap<(Dir, Flow), Instant>,
}

impl Recent {
    /// Whether `flow` in `dir` is new (not seen within the window) at `now`; remembers it.
    pub fn is_new(&mut self, dir: Dir, flow: Flow, now: Instant) -> bool {
        if let Some(at) = self.seen.get(&(dir, flow)) {
            if now.saturating_duration_since(*at) < REPEAT_WINDOW {
                return false;
            }
        }
        if self.seen.len() >= RECENT_CAPACITY {
            self.seen
                .retain(|_, at| now.saturating_duration_since(*at) < REPEAT_WINDOW);
            if self.seen.len() >= RECENT_CAPACITY {
                // A flood of distinct flows: forget them all rather than scan for the oldest.
                self.seen.clear();
            }
        }
        self.seen.insert((dir, flow), now);
        true
    }
}

/// What the reader saw, for the tests and the agent's metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReaderStats {
    /// Packets received from the group (ours or not).
    pub packets: u64,
    /// Of those, retries of a flow already logged.
    pub repeats: u64,
    /// Packets not ours (another prefix) or not IP.
    pub foreign: u64,
    /// Receive buffer overflows (packets the kernel could not deliver).
    pub overflows: u64,
}

/// The log group's socket and what it has seen.
#[derive(Debug)]
pub struct DeniedReader {
    socket: LogSocket,
    recent: Recent,
    /// Counts so far.
    pub stats: ReaderStats,
}

impl DeniedReader {
    /// Binds `group` in the calling thread's network namespace.
    ///
    /// # Errors
    /// As [`LogSocket::bind`].
    pub fn bind(group: u16) -> tern_net::Result<DeniedReader> {
        Ok(DeniedReader {
            socket: LogSocket::bind(group, RECEIVE_TIMEOUT)?,
            recent: Recent::default(),
            stats: ReaderStats::default(),
        })
    }

    /// Waits (a quarter of a second at most) for the next batch; its new denied flows.
    ///
    /// # Errors
    /// As [`LogSocket::receive`].
    pub fn receive(&mut self) -> tern_net::Result<Vec<Logged>> {
        let packets = match self.socket.receive()? {
            Received::Packets(p) => p,
            Received::Timeout => return Ok(Vec::new()),
            Received::Overflow => {
                self.stats.overflows += 1;
                return Ok(Vec::new());
            }
        };
        let now = (Instant::now(), SystemTime::now());
        let mut out = Vec::new();
        for p in packets {
            self.stats.packets += 1;
            let (Some(direction), Some(flow)) =
                (direction_of_prefix(&p.prefix), Flow::of(&p.payload))
            else {
                self.stats.foreign += 1;
                continue;
            };
            if !self.recent.is_new(direction, flow, now.0) {
                self.stats.repeats += 1;
                continue;
            }
            out.push(Logged {
                time: p.timestamp.unwrap_or(now.1),
                direction,
                flow,
            });
        }
        Ok(out)
    }
}

/// Denied flows counted by (namespace, policy, direction): one series per policy that
/// isolated a denied end, so at most the policies in force on this node, twice. A bound on top
/// ([`DeniedCounts::MAX_SERIES`]) keeps a churn of short-lived policies from growing it: past
/// it, a new policy is counted as `namespace="_other",policy="_other"`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeniedCounts(pub BTreeMap<(String, String, &'static str), u64>);

impl DeniedCounts {
    /// The most series kept.
    pub const MAX_SERIES: usize = 1000;

    /// Counts `flow` once for each policy that denied it (none named: `policy=""`).
    pub fn count(&mut self, flow: &DeniedFlow) {
        let dir = flow.direction();
        let unnamed = [String::new()];
        let policies = if flow.policies.is_empty() {
            &unnamed[..]
        } else {
            &flow.policies[..]
        };
        for key in policies {
            let (ns, name) = key.split_once('/').unwrap_or(("", key));
            let mut series = (ns.to_owned(), name.to_owned(), dir);
            if !self.0.contains_key(&series) && self.0.len() >= Self::MAX_SERIES {
                series = ("_other".into(), "_other".into(), dir);
            }
            *self.0.entry(series).or_insert(0) += 1;
        }
    }
}

#[cfg(test)]
mod tests;

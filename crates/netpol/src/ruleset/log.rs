//! Denied connections logged (`tern-agent run --network-policy-log-denied`): in front of each
//! per-pod chain's `drop`, a rule that sends the first packet of a denied connection to
//! nfnetlink_log, where tern-agent reads it and names the pods and policies.
//!
//! - `ct state new`: the first packet only (the base chains accepted `established,related`
//!   before; a dropped connection is never confirmed, so a client's retransmitted SYN is `new`
//!   again and logged again: the agent folds those into one flow);
//! - `limit name "log_denied"`: one named limit object for the whole table, so the node logs
//!   at most `rate` packets a second (with a burst of as many) however many chains drop; a
//!   packet over the limit is still dropped, only not logged (the log rule and `drop` are two
//!   rules: a limit that does not match must not skip the drop);
//! - `log prefix "tern-netpol denied ingress" group N`: the prefix carries the direction, so
//!   the agent knows which end's policies denied without guessing (nfnetlink_log carries up to
//!   64 bytes of it as `NFULA_PREFIX`).
//!
//! Invariant: off, the table is exactly what it was before this existed; on, only the per-pod
//! chains (their last rules, hence their names) and the limit object differ.

use std::fmt::Write as _;

use crate::compile::Dir;

/// The named limit object every log rule shares.
pub const LOG_LIMIT: &str = "log_denied";

/// What every log prefix starts with; the direction follows ([`log_prefix`]).
pub const LOG_PREFIX_STEM: &str = "tern-netpol denied ";

/// The nfnetlink_log group tern-agent listens on unless told otherwise: not 0 (iptables' and
/// ulogd's default), nor kube-router's 100, nor Calico's 1 and 2.
pub const DEFAULT_LOG_GROUP: u16 = 4242;

/// The default node-wide rate of logged packets, per second.
pub const DEFAULT_LOG_RATE: u32 = 100;

/// How denied connections are logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogDenied {
    /// The nfnetlink_log group (`log group N`) the agent binds.
    pub group: u16,
    /// Logged packets per second across the node, and the burst (`limit rate N/second burst N
    /// packets`).
    pub rate: u32,
}

impl Default for LogDenied {
    fn default() -> LogDenied {
        LogDenied {
            group: DEFAULT_LOG_GROUP,
            rate: DEFAULT_LOG_RATE,
        }
    }
}

/// The prefix of what `dir`'s chains log.
pub fn log_prefix(dir: Dir) -> String {
    let d = match dir {
        Dir::Ingress => "ingress",
        Dir::Egress => "egress",
    };
    format!("{LOG_PREFIX_STEM}{d}")
}

/// The direction a logged packet's prefix names (`None`: not one of ours).
pub fn direction_of_prefix(prefix: &str) -> Option<Dir> {
    match prefix.strip_prefix(LOG_PREFIX_STEM)? {
        "ingress" => Some(Dir::Ingress),
        "egress" => Some(Dir::Egress),
        _ => None,
    }
}

impl LogDenied {
    /// The rule in front of a `dir` chain's `drop`.
    pub fn rule(self, dir: Dir) -> String {
        format!(
            "ct state new limit name \"{LOG_LIMIT}\" log prefix \"{}\" group {}",
            log_prefix(dir),
            self.group
        )
    }

    /// The limit object's declaration, inside the table.
    pub(super) fn write_limit(self, out: &mut String) {
        let _ = writeln!(
            out,
            "\tlimit {LOG_LIMIT} {{ rate {}/second burst {} packets }}",
            self.rate, self.rate
        );
    }
}

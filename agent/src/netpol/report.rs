//! The denied-flow thread (`--network-policy-log-denied`): binds the table's log group
//! (`denied.rs`: the reader, naming, counting) and, batch by batch, names the new denied flows
//! from the store, writes their log lines and counts them in [`NetpolStats`](super::NetpolStats).
//!
//! Invariants: the store's lock is held only to name a batch, never across a receive; a socket
//! that cannot be bound is logged and retried, it never stops the agent or the table.

use std::time::Duration;

use tracing::{info, warn};

use super::denied::{describe, DeniedFlow, DeniedReader, RECEIVE_TIMEOUT};
use super::store::Shared;

/// The reader thread: binds the group (retrying), then names and reports each batch's new
/// denied flows until the controller stops.
pub(crate) fn run(s: &Shared, group: u16) {
    let stopped = || s.stop.is_stopped();
    let Some(mut reader) = bind_until(group, Duration::from_secs(10), &stopped) else {
        return;
    };
    while !stopped() {
        let batch = match reader.receive() {
            Ok(b) => b,
            Err(e) => {
                warn!(group, error = %e, "network policy: cannot read denied flows");
                std::thread::sleep(RECEIVE_TIMEOUT);
                continue;
            }
        };
        let flows: Vec<DeniedFlow> = if batch.is_empty() {
            Vec::new()
        } else {
            let st = s.store();
            batch.into_iter().map(|l| describe(&st.engine, l)).collect()
        };
        flows.iter().for_each(DeniedFlow::log);
        let mut stats = s.stats();
        flows.iter().for_each(|f| stats.denied.count(f));
        stats.denied_reader = reader.stats.clone();
    }
}

/// Binds `group`, retrying every `retry` until it binds or `stopped` says so; logs each
/// failure once per kind of error.
pub(crate) fn bind_until(
    group: u16,
    retry: Duration,
    stopped: &dyn Fn() -> bool,
) -> Option<DeniedReader> {
    let mut last: Option<i32> = None;
    while !stopped() {
        match DeniedReader::bind(group) {
            Ok(r) => {
                info!(
                    group,
                    "network policy: logging denied flows from nfnetlink_log"
                );
                return Some(r);
            }
            Err(e) => {
                if last != e.errno() {
                    warn!(group, error = %e, "network policy: cannot read denied flows; retrying");
                    last = e.errno();
                }
                std::thread::sleep(retry);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;

//! The drift check, on a thread of its own: it lists the table once a period and asks the syncer
//! for a restore (a replace) when the table lists differently from the last period's listing
//! with no transaction of ours in between: someone else changed it.
//!
//! Why a thread: at fleet scale a node's table holds hundreds of thousands of elements and one
//! listing takes nft seconds of CPU (about 3 s for 400,000 elements), tens of seconds of wall
//! time on a loaded node; in the syncer it held every change and admission behind it.
//! Why spaced: the next listing waits at least [`SPACING`] times the last one's wall time (and
//! the resync period), so the check takes at most a fiftieth of a core however big the table (at
//! ten times, a 400,000-element table's listing kept an idle agent at 10-15 % of a core).
//!
//! Invariant: a listing that overlapped a transaction of ours (or that followed one since the
//! reference was taken) never counts as drift; the syncer alone writes the table.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tern_net::nft::Nft;
use tern_netpol::ruleset::{FAMILY, TABLE};
use tracing::{debug, warn};

use crate::netpol::store::Shared;

pub(crate) use state::DriftState;

pub(crate) mod state;

/// The next listing waits at least this many times the last one's wall time.
const SPACING: u32 = 50;

/// The table as the kernel lists it now (`None` when it cannot be listed).
fn listing(nft: &Nft) -> Option<String> {
    nft.list_table(FAMILY, TABLE).unwrap_or_else(|e| {
        warn!(error = %e, "network policy: cannot list the table");
        None
    })
}

/// The check's memory: the last listing that overlapped no transaction of ours, and the epoch
/// it was taken at.
#[derive(Debug, Default)]
pub(crate) struct Check {
    reference: Option<(u64, Option<String>)>,
}

impl Check {
    /// One listing; true when it shows someone else's change since the reference.
    pub(crate) fn drifted(&mut self, state: &DriftState, nft: &Nft) -> bool {
        let before = state.epoch.load(Ordering::SeqCst);
        if before % 2 == 1 || !state.ours() {
            self.reference = None;
            return false;
        }
        let now = listing(nft);
        if state.epoch.load(Ordering::SeqCst) != before {
            self.reference = None;
            return false;
        }
        let drifted =
            matches!(&self.reference, Some((epoch, listed)) if *epoch == before && *listed != now);
        self.reference = if drifted { None } else { Some((before, now)) };
        drifted
    }
}

/// How long to wait before the next listing: the resync period, or [`SPACING`] times the last
/// listing's wall time when that is longer.
pub(crate) fn next_wait(resync: Duration, last_listing: Duration) -> Duration {
    resync.max(last_listing * SPACING)
}

/// The drift check's thread: runs until the controller stops.
pub(crate) fn run(s: &Shared, nft: &Nft) {
    let mut check = Check::default();
    let mut wait = s.cfg.resync;
    while !s.stop.sleep(wait) {
        if crate::uninstall::uninstalling(&s.run.kubeconfig) {
            return;
        }
        let started = Instant::now();
        if check.drifted(&s.drift, nft) {
            warn!(
                table = TABLE,
                "network policy: the table was changed by someone else; restoring it"
            );
            s.drift.restore.store(true, Ordering::SeqCst);
            s.notify();
        }
        let took = started.elapsed();
        wait = next_wait(s.cfg.resync, took);
        debug!(listing_seconds = took.as_secs_f64(), next_in = ?wait, "network policy: drift check");
    }
}

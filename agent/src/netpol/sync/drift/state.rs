//! What the syncer and the drift check share: a file of its own so that the store, which holds
//! it, and the drift check, which reads the store, import no circle.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What the syncer and the drift check share.
#[derive(Debug, Default)]
pub(crate) struct DriftState {
    /// Moved by 1 as a transaction of ours starts and by 1 as it ends: odd while one runs.
    pub(super) epoch: AtomicU64,
    /// The kernel holds the syncer's last table (false at start and after a refused one).
    ours: AtomicBool,
    /// Set by the check: someone else changed the table; the syncer replaces it and clears it.
    pub(super) restore: AtomicBool,
}

impl DriftState {
    /// The syncer is about to send a transaction.
    pub(crate) fn transaction_starts(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// The syncer's transaction ended; `ours`: the kernel now holds the syncer's table.
    pub(crate) fn transaction_ended(&self, ours: bool) {
        self.ours.store(ours, Ordering::SeqCst);
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether the kernel holds the syncer's last table.
    pub(crate) fn ours(&self) -> bool {
        self.ours.load(Ordering::SeqCst)
    }

    /// Takes the check's request for a restore (true once per request).
    pub(crate) fn take_restore(&self) -> bool {
        self.restore.swap(false, Ordering::SeqCst)
    }
}

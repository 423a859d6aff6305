//! A stop flag a background thread sleeps on: set once, it ends every pending and later sleep.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Shared by a controller thread (egress NAT, node routes) and its owner, who stops it.
#[derive(Debug, Default)]
pub(crate) struct StopSignal {
    stop: AtomicBool,
    wake: Condvar,
    sleep: Mutex<()>,
}

impl StopSignal {
    /// True once [`StopSignal::stop`] was called.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Sleeps up to `d`, less when stopping; true when stopping.
    pub(crate) fn sleep(&self, d: Duration) -> bool {
        let g = self
            .sleep
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.is_stopped() {
            return true;
        }
        let _g = self.wake.wait_timeout(g, d);
        self.is_stopped()
    }

    /// Sets the flag and wakes every sleeper (under the lock, so none misses it).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _g = self.sleep.lock();
        self.wake.notify_all();
    }
}

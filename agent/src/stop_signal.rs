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

    /// Sleeps up to `d`, less when stopping or once `woken()` holds; true when stopping.
    /// `woken` is read under the sleep lock, so a [`StopSignal::wake`] after its condition became
    /// true is never missed.
    pub(crate) fn sleep_unless(&self, d: Duration, woken: impl Fn() -> bool) -> bool {
        let deadline = std::time::Instant::now() + d;
        let mut g = self
            .sleep
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if self.is_stopped() {
                return true;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if woken() || left.is_zero() {
                return false;
            }
            g = self
                .wake
                .wait_timeout(g, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// Wakes every sleeper without stopping it (its `woken` condition changed).
    pub(crate) fn wake(&self) {
        let _g = self.sleep.lock();
        self.wake.notify_all();
    }

    /// Sets the flag and wakes every sleeper (under the lock, so none misses it).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _g = self.sleep.lock();
        self.wake.notify_all();
    }
}

//! The wall-clock seam. The refresher reads wall time only through [`WallClock`] so tests can
//! jump it (suspend/resume, NTP step) while sleeps stay on the monotonic clock.
//!
//! Invariant: [`SystemClock`] is the only implementation used outside tests.

use std::sync::atomic::{AtomicI64, Ordering};

/// Wall-clock time in Unix milliseconds.
pub trait WallClock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// Whole seconds since the Unix epoch.
    fn now_secs(&self) -> i64 {
        self.now_ms().div_euclid(1000)
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

/// The system clock plus an offset that tests move.
#[derive(Debug, Default)]
pub struct OffsetClock {
    offset_ms: AtomicI64,
}

impl OffsetClock {
    /// Moves this clock by `secs` (may be negative).
    pub fn advance_secs(&self, secs: i64) {
        self.offset_ms.fetch_add(secs * 1000, Ordering::SeqCst);
    }
}

impl WallClock for OffsetClock {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms() + self.offset_ms.load(Ordering::SeqCst)
    }
}

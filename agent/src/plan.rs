//! The refresher's decisions as a state machine over wall-clock times: after each attempt, when
//! the next one is due. The agent's refresher and the fleet simulation
//! (`examples/simulate.rs`) both drive this same type, so the simulation's figures are the
//! agent's behaviour.
//!
//! Invariant: no clock is read here; times come in as Unix milliseconds, delays go out as
//! [`Duration`]s from [`crate::schedule`]'s functions.

use std::time::Duration;

use crate::schedule::{backoff_delay, refresh_delay, Policy, Rng};

/// What one node's refresher knows between attempts.
#[derive(Debug, Clone)]
pub struct Planner {
    policy: Policy,
    rng: Rng,
    failures: u32,
    expiry_ms: Option<i64>,
}

impl Planner {
    /// A planner with no token yet.
    pub fn new(policy: Policy, rng: Rng) -> Self {
        Planner {
            policy,
            rng,
            failures: 0,
            expiry_ms: None,
        }
    }

    /// Consecutive failed attempts since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// `status.expirationTimestamp` of the current token in Unix milliseconds, if any.
    pub fn expiry_ms(&self) -> Option<i64> {
        self.expiry_ms
    }

    /// How long the current token stays valid at `now_ms` (`None` once expired or with none).
    pub fn time_left(&self, now_ms: i64) -> Option<Duration> {
        self.expiry_ms
            .map(|x| x - now_ms)
            .filter(|ms| *ms > 0)
            .map(|ms| Duration::from_millis(ms.unsigned_abs()))
    }

    /// A refresh succeeded at `now_ms` with `status.expirationTimestamp` = `expiry_s` (Unix s):
    /// returns the lifetime the server granted from now, and the delay to the next refresh.
    pub fn succeeded(&mut self, now_ms: i64, expiry_s: i64) -> (Duration, Duration) {
        self.failures = 0;
        let expiry_ms = expiry_s.saturating_mul(1000);
        self.expiry_ms = Some(expiry_ms);
        let lifetime = Duration::from_millis(u64::try_from(expiry_ms - now_ms).unwrap_or(0));
        let delay = refresh_delay(&self.policy, lifetime, self.rng.unit());
        (lifetime, delay)
    }

    /// An attempt failed at `now_ms`, with the server's `Retry-After` if it sent one: returns the
    /// delay to the next attempt.
    pub fn failed(&mut self, now_ms: i64, retry_after: Option<Duration>) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let left = self.time_left(now_ms);
        backoff_delay(
            &self.policy,
            self.failures,
            left,
            retry_after,
            self.rng.unit(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_resets_failures_and_schedules_before_expiry() {
        let mut p = Planner::new(Policy::default(), Rng::seeded(1));
        let now = 1_000_000_000_000;
        assert!(p.failed(now, None) <= Duration::from_secs(1));
        assert_eq!(p.failures(), 1);
        let (life, next) = p.succeeded(now, now / 1000 + 3600);
        assert_eq!(life, Duration::from_secs(3600));
        assert!(next >= Duration::from_secs(900) && next < Duration::from_secs(1800));
        assert_eq!(p.failures(), 0);
        assert_eq!(p.time_left(now + 3_600_000), None, "expired at expiry");
        assert_eq!(p.time_left(now + 1_000), Some(Duration::from_secs(3599)));
    }
}

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

    /// A refresh succeeded at `now_ms` with `status.expirationTimestamp` = `expiry_s` (Unix s) and
    /// the lifetime the server granted (`spec.expirationSeconds` of the answer, when it sent one):
    /// returns the lifetime the schedule uses, and the delay to the next refresh.
    ///
    /// The lifetime is the expiry minus now by this node's clock, unless that is less than half
    /// the granted lifetime: then this clock runs ahead of the server's, and scheduling from it
    /// would refresh every [`crate::schedule::MIN_DELAY`]; the granted lifetime is used instead.
    pub fn succeeded(
        &mut self,
        now_ms: i64,
        expiry_s: i64,
        granted_s: Option<i64>,
    ) -> (Duration, Duration) {
        self.failures = 0;
        let expiry_ms = expiry_s.saturating_mul(1000);
        self.expiry_ms = Some(expiry_ms);
        let by_clock = expiry_ms - now_ms;
        let lifetime_ms = match granted_s.map(|g| g.saturating_mul(1000)) {
            Some(g) if by_clock < g / 2 => g,
            _ => by_clock,
        };
        let lifetime = Duration::from_millis(u64::try_from(lifetime_ms).unwrap_or(0));
        let delay = refresh_delay(&self.policy, lifetime, self.rng.unit());
        (lifetime, delay)
    }

    /// Whether this node's clock at `now_ms` puts the current token's expiry less than half the
    /// `granted_s` lifetime away right after minting (the clock runs ahead of the server's).
    pub fn clock_ahead(now_ms: i64, expiry_s: i64, granted_s: Option<i64>) -> bool {
        granted_s.is_some_and(|g| expiry_s.saturating_mul(1000) - now_ms < g.saturating_mul(500))
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
        let (life, next) = p.succeeded(now, now / 1000 + 3600, Some(3600));
        assert_eq!(life, Duration::from_secs(3600));
        assert!(next > Duration::from_secs(2520) && next <= Duration::from_secs(2880));
        assert!(life - next >= crate::schedule::MIN_MARGIN);
        assert_eq!(p.failures(), 0);
        assert_eq!(p.time_left(now + 3_600_000), None, "expired at expiry");
        assert_eq!(p.time_left(now + 1_000), Some(Duration::from_secs(3599)));
    }

    #[test]
    fn a_clock_ahead_of_the_server_schedules_from_the_granted_lifetime() {
        let mut p = Planner::new(Policy::default(), Rng::seeded(2));
        let server_now = 1_000_000_000;
        let node_ms = (server_now + 7200) * 1000; // two hours ahead
        let expiry = server_now + 3600;
        assert!(Planner::clock_ahead(node_ms, expiry, Some(3600)));
        let (life, next) = p.succeeded(node_ms, expiry, Some(3600));
        assert_eq!(life, Duration::from_secs(3600));
        assert!(next > Duration::from_secs(2520), "{next:?}");
        // Without a granted lifetime there is nothing better than the clock.
        let (life, _) = p.succeeded(node_ms, expiry, None);
        assert_eq!(life, Duration::ZERO);
        assert!(!Planner::clock_ahead(server_now * 1000, expiry, Some(3600)));
    }
}

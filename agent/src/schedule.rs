//! Pure scheduling arithmetic for the token refresher: when to refresh after a success, how long
//! to back off after a failure, and a small seeded PRNG.
//!
//! Invariants: no function here reads a clock or sleeps; every delay is ≥ [`MIN_DELAY`]; a
//! success schedules the next refresh strictly before the returned expiry, at most at
//! [`REFRESH_LATEST`] of the lifetime and, when the lifetime is at least twice [`MIN_MARGIN`],
//! with at least [`MIN_MARGIN`] left; a failure's delay is
//! uniform in `[ceiling/2, ceiling]` (floored at [`MIN_DELAY`], never below the server's
//! `Retry-After`), where the ceiling is `min(cap, max(time_left/2, cap/8))` while the current
//! token is valid
//! and `min(cap, base·2^(n−1))` without one.

use std::time::Duration;

/// The smallest delay ever scheduled, so that no path can spin.
pub const MIN_DELAY: Duration = Duration::from_millis(100);

/// The latest point of a token's life at which a refresh is scheduled: 80 %, as the kubelet
/// rotates projected tokens (`pkg/kubelet/token/token_manager.go`).
pub const REFRESH_LATEST: f64 = 0.8;

/// The jitter window before that point, as a share of the lifetime: a refresh falls uniformly in
/// the tenth of the lifetime before it (70–80 % for a 1 h token), so a fleet minted together
/// spreads out, and the mean interval stays 3/4 of the lifetime (1.85 TokenRequests/s for 5,000
/// nodes with 1 h tokens, where one per lifetime is 1.39/s).
pub const REFRESH_SPREAD: f64 = 0.1;

/// The least time a scheduled refresh leaves before expiry (an API server outage shorter than this
/// never lets a token expire), for every lifetime of at least twice this; a shorter lifetime
/// keeps half of it instead. A 1 h token keeps 12–18 min.
pub const MIN_MARGIN: Duration = Duration::from_secs(600);

/// Scheduling settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `CNI_TOKEN_REFRESH_DURATION`: refresh after this long (plus up to 100 % jitter) instead of
    /// at 70–80 % of the lifetime; never later than the default's latest point.
    pub refresh_override: Option<Duration>,
    /// First backoff ceiling.
    pub backoff_base: Duration,
    /// Largest backoff ceiling (default 4 min: with a request deadline of 10 s, a node is fresh
    /// within 5 min of the server's return).
    pub backoff_cap: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            refresh_override: None,
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(240),
        }
    }
}

/// Delay until the next refresh after a success.
///
/// `lifetime` is the returned `status.expirationTimestamp` minus the wall-clock now (the real
/// lifetime, after any server cap); `u` is uniform in `[0, 1)`. The latest point is
/// `min(lifetime·REFRESH_LATEST, lifetime − MIN_MARGIN)`, never below `lifetime/2`; the default
/// delay is uniform in `(latest − lifetime·REFRESH_SPREAD, latest]`: 2,520–2,880 s for 1 h,
/// 16.8–19.2 h for 24 h. With an override `d`: `d · (1 + u)`, at most the latest point. Either way
/// strictly before expiry, so a refresh (and retries) happen while the token is valid.
pub fn refresh_delay(policy: &Policy, lifetime: Duration, u: f64) -> Duration {
    let u = u.clamp(0.0, 1.0);
    let latest = lifetime
        .mul_f64(REFRESH_LATEST)
        .min(lifetime.saturating_sub(MIN_MARGIN))
        .max(lifetime / 2);
    let delay = match policy.refresh_override {
        Some(d) => d.mul_f64(1.0 + u).min(latest),
        None => latest.saturating_sub(lifetime.mul_f64(REFRESH_SPREAD * u)),
    };
    delay.max(MIN_DELAY)
}

/// Delay before retrying after the `failures`-th consecutive failure (1 for the first).
///
/// `time_left` is how long the current token stays valid (`None` or zero when there is none or it
/// expired); `retry_after` is the server's `Retry-After`; `u` is uniform in `[0, 1)`.
///
/// The ceiling is `min(cap, max(time_left/2, cap/8))` while a token is valid — there is time, so
/// the retries are spread over it rather than rushed, the cap bounds how long after the server's
/// return a node waits, and the floor (30 s by default) stops the halving from becoming a burst of
/// quick retries in a token's last minute when an outage outlasts it — and `min(cap, base·2^(n−1))` without one (start-up, or expired). The delay is
/// uniform in `[ceiling/2, ceiling]` (equal jitter: spread, yet never a burst of near-zero
/// waits), at least [`MIN_DELAY`] and at least `retry_after`.
pub fn backoff_delay(
    policy: &Policy,
    failures: u32,
    time_left: Option<Duration>,
    retry_after: Option<Duration>,
    u: f64,
) -> Duration {
    let ceiling = match time_left.filter(|l| !l.is_zero()) {
        Some(left) => policy
            .backoff_cap
            .min((left / 2).max(policy.backoff_cap / 8)),
        None => {
            let exp = failures.saturating_sub(1).min(30);
            policy
                .backoff_base
                .saturating_mul(1u32 << exp)
                .min(policy.backoff_cap)
        }
    };
    let delay = ceiling
        .mul_f64(0.5 + u.clamp(0.0, 1.0) / 2.0)
        .max(MIN_DELAY);
    match retry_after {
        Some(ra) => delay.max(ra),
        None => delay,
    }
}

/// SplitMix64: a tiny, seedable PRNG for jitter (not for secrets).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator with a fixed seed (tests, simulation).
    pub fn seeded(seed: u64) -> Self {
        Rng(seed)
    }

    /// A generator seeded from the clock, the process id and a stack address.
    pub fn from_entropy() -> Self {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let local = 0u8;
        Rng(t ^ (u64::from(std::process::id()) << 32) ^ (std::ptr::addr_of!(local) as u64))
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Duration = Duration::from_secs(3600);

    #[test]
    fn refresh_is_at_seventy_to_eighty_percent_of_the_real_lifetime() {
        let p = Policy::default();
        assert_eq!(refresh_delay(&p, 24 * H, 0.0), H.mul_f64(19.2));
        assert_eq!(refresh_delay(&p, 24 * H, 0.5), H.mul_f64(18.0));
        // A clamped 1 h token: 2,520-2,880 s after minting, from the returned expiry, so
        // 12-18 min are left when the refresh is due.
        assert_eq!(refresh_delay(&p, H, 0.0), Duration::from_secs(2880));
        assert_eq!(refresh_delay(&p, H, 0.5), Duration::from_secs(2700));
        let mut rng = Rng::seeded(7);
        let ds: Vec<Duration> = (0..10_000)
            .map(|_| refresh_delay(&p, H, rng.unit()))
            .collect();
        assert!(ds
            .iter()
            .all(|d| *d > Duration::from_secs(2520) && *d <= Duration::from_secs(2880)));
        assert!(ds.iter().all(|d| H - *d >= MIN_MARGIN));
        let mean = ds.iter().sum::<Duration>() / 10_000;
        // 5,000 nodes over the mean interval: at most 2.0 TokenRequests/s (1.85 at 2,700 s).
        assert!(
            mean > Duration::from_secs(2680) && mean < Duration::from_secs(2720),
            "{mean:?}"
        );
        assert!(5000.0 / mean.as_secs_f64() <= 2.0);
        // The extended token's status (3607 s) is scheduled like any other.
        let ext = Duration::from_secs(3607);
        assert!(ext - refresh_delay(&p, ext, 0.0) >= MIN_MARGIN);
    }

    #[test]
    fn short_lifetimes_keep_the_margin_or_half_of_the_lifetime() {
        let p = Policy::default();
        let min = Duration::from_secs(60);
        // 40 min: 80 % would leave 8 min; the 10 min margin wins (27-30 min).
        assert_eq!(refresh_delay(&p, 40 * min, 0.0), 30 * min);
        assert_eq!(refresh_delay(&p, 40 * min, 1.0), 26 * min);
        // 10 min (the API's shortest token): half of it is kept instead (4-5 min).
        assert_eq!(refresh_delay(&p, 10 * min, 0.0), 5 * min);
        assert_eq!(refresh_delay(&p, 10 * min, 1.0), 4 * min);
        assert_eq!(refresh_delay(&p, Duration::ZERO, 0.0), MIN_DELAY);
        for l in [1u32, 5, 10, 19, 20, 21, 30, 59, 60, 600, 1440] {
            for u in [0.0, 0.3, 0.999_999] {
                let life = l * min;
                let d = refresh_delay(&p, life, u);
                assert!(d < life, "{l} min, u {u}: {d:?}");
                assert!(
                    life - d >= MIN_MARGIN.min(life / 2),
                    "{l} min, u {u}: {d:?}"
                );
            }
        }
    }

    #[test]
    fn override_is_used_but_kept_before_expiry() {
        let p = Policy {
            refresh_override: Some(Duration::from_secs(600)),
            ..Policy::default()
        };
        assert_eq!(refresh_delay(&p, 24 * H, 0.0), Duration::from_secs(600));
        assert_eq!(refresh_delay(&p, 24 * H, 0.5), Duration::from_secs(900));
        let p = Policy {
            refresh_override: Some(10 * H),
            ..Policy::default()
        };
        assert_eq!(refresh_delay(&p, H, 0.0), H.mul_f64(0.8));
        assert_eq!(refresh_delay(&p, Duration::ZERO, 0.0), MIN_DELAY);
    }

    #[test]
    fn without_a_token_backoff_grows_to_the_cap_with_equal_jitter() {
        let p = Policy::default();
        let cap = Duration::from_secs(240);
        assert_eq!(
            backoff_delay(&p, 1, None, None, 0.0),
            Duration::from_millis(500)
        );
        assert_eq!(
            backoff_delay(&p, 4, None, None, 0.5),
            Duration::from_secs(6)
        );
        assert_eq!(backoff_delay(&p, 20, None, None, 1.0), cap);
        assert_eq!(backoff_delay(&p, u32::MAX, None, None, 1.0), cap);
        let tiny = Policy {
            backoff_base: Duration::from_millis(10),
            ..Policy::default()
        };
        assert_eq!(backoff_delay(&tiny, 1, None, None, 0.0), MIN_DELAY);
        // Equal jitter: spread over [cap/2, cap], never below half the ceiling.
        let mut rng = Rng::seeded(1);
        let ds: Vec<Duration> = (0..1000)
            .map(|_| backoff_delay(&p, 12, None, None, rng.unit()))
            .collect();
        assert!(ds.iter().all(|d| *d >= cap / 2 && *d <= cap));
        assert!(
            ds.iter().any(|d| *d < Duration::from_secs(130))
                && ds.iter().any(|d| *d > Duration::from_secs(230))
        );
        let mean = ds.iter().sum::<Duration>() / 1000;
        assert!(
            mean > Duration::from_secs(170) && mean < Duration::from_secs(190),
            "{mean:?}"
        );
    }

    #[test]
    fn with_a_valid_token_retries_are_spread_over_the_time_left() {
        let p = Policy::default();
        // Plenty of time left: the first retry already waits 2-4 min, no burst of quick ones.
        let hour = Some(Duration::from_secs(1800));
        assert_eq!(
            backoff_delay(&p, 1, hour, None, 0.0),
            Duration::from_secs(120)
        );
        assert_eq!(
            backoff_delay(&p, 1, hour, None, 1.0),
            Duration::from_secs(240)
        );
        // Near expiry: at most half the time left, so some retries land before it.
        let left = Some(Duration::from_secs(100));
        assert_eq!(
            backoff_delay(&p, 20, left, None, 1.0),
            Duration::from_secs(50)
        );
        assert_eq!(
            backoff_delay(&p, 1, left, None, 0.0),
            Duration::from_secs(25)
        );
        // In the token's last minute: no halving below cap/8 (a 15-30 s spacing), so an outage
        // that outlasts the token costs a few retries per node, not a dozen.
        let last = Some(Duration::from_secs(20));
        assert_eq!(
            backoff_delay(&p, 30, last, None, 1.0),
            Duration::from_secs(30)
        );
        assert_eq!(
            backoff_delay(&p, 30, Some(Duration::from_millis(10)), None, 0.0),
            Duration::from_secs(15)
        );
        // Expired (zero left): the growth from the base applies.
        assert_eq!(
            backoff_delay(&p, 20, Some(Duration::ZERO), None, 1.0),
            Duration::from_secs(240)
        );
    }

    #[test]
    fn retry_after_is_a_floor() {
        let p = Policy::default();
        assert_eq!(
            backoff_delay(&p, 1, None, Some(Duration::from_secs(32)), 0.1),
            Duration::from_secs(32)
        );
        assert_eq!(
            backoff_delay(&p, 20, None, Some(Duration::from_secs(2)), 1.0),
            Duration::from_secs(240)
        );
    }

    #[test]
    fn rng_is_uniformish_and_seeded() {
        let (mut a, mut b) = (Rng::seeded(3), Rng::seeded(3));
        assert_eq!(a.next_u64(), b.next_u64());
        let mean: f64 = (0..10_000).map(|_| a.unit()).sum::<f64>() / 10_000.0;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }
}

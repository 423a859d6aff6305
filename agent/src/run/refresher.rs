//! The refresher thread: the one place that makes TokenRequests, on the plan of
//! [`crate::plan::Planner`], and records each outcome for the channel and the endpoints.
//!
//! Invariant: every pass of the loop (a wake-up at least every `wall_check`, an attempt bounded
//! by `request_timeout`) stamps the heartbeat `/livez` reads, so only a stuck loop goes stale.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tern_kube::channel::Outcome;
use tern_kube::time::format_rfc3339;
use tern_kube::{KubeError, TokenRequestStatus};
use tracing::{debug, info, warn};

use super::{lock, Shared};
use crate::mint::mint_observed;
use crate::plan::Planner;
use crate::schedule::Rng;

/// Wall time may run ahead of the monotonic schedule by this much before it counts as a jump.
const WALL_SLACK_MS: i64 = 1000;

/// Why a refresh failed, for logs and `tern_agent_refresh_failures_total{cause}`.
fn cause(e: &KubeError) -> &'static str {
    match e {
        KubeError::Io { op: "read", .. } => "credentials",
        KubeError::Io { .. } => "write",
        other => other.cause_label(),
    }
}

/// The TokenRequest's result for `tern_agent_token_requests_total{result}`.
fn request_result(r: Result<(), &KubeError>) -> &'static str {
    match r {
        Ok(()) => "success",
        Err(KubeError::Unauthorized | KubeError::Forbidden { .. }) => "unauthorized",
        Err(KubeError::TooManyRequests { .. }) => "throttled",
        Err(KubeError::ServerError { .. } | KubeError::Connect(_)) => "unavailable",
        Err(KubeError::Timeout(_)) => "timeout",
        Err(_) => "error",
    }
}

/// One refresh: the TokenRequest (timed and counted), then the kubeconfig write.
fn attempt(s: &Shared) -> Result<TokenRequestStatus, KubeError> {
    let minted = mint_observed(&s.cfg.token_target(), |took, result| {
        s.latency.observe(took.as_secs_f64());
        *lock(&s.snap)
            .token_requests
            .entry(request_result(result))
            .or_insert(0) += 1;
    })?;
    minted.write(&s.cfg.kubeconfig)?;
    Ok(minted.status)
}

/// The refresher loop: waits for a trigger, refreshes, schedules the next attempt, records the
/// outcome for the endpoints and the channel; returns when the agent stops.
pub(super) fn refresher(s: &Shared) {
    let mut plan = Planner::new(s.cfg.policy.clone(), Rng::from_entropy());
    let mut due = Due {
        mono: Instant::now(),
        wall: s.clock.now_ms(),
    };
    let mut first = true;
    loop {
        let Some(trigger) = wait_for_trigger(s, &plan, &due, first) else {
            return;
        };
        first = false;
        debug!(trigger, "refreshing CNI token");
        let result = attempt(s);
        s.beat();
        let wall_now = s.clock.now_ms();
        let (delay, outcome, not_before) = match &result {
            Ok(st) => (
                succeeded(s, &mut plan, trigger, wall_now, st),
                refreshed(st),
                None,
            ),
            Err(e) => {
                let retry_after = e.retry_after().map(Duration::from_secs);
                (
                    failed(&mut plan, trigger, wall_now, retry_after, e),
                    Outcome::Failed {
                        reason: format!("{}: {e}", cause(e)),
                    },
                    retry_after.map(|r| Instant::now() + r),
                )
            }
        };
        due = Due {
            mono: Instant::now() + delay,
            wall: wall_now + i64::try_from(delay.as_millis()).unwrap_or(i64::MAX / 2),
        };
        record(s, &plan, trigger, wall_now, due.wall, &result);
        let mut g = lock(&s.coord);
        g.generation += 1;
        g.last_outcome = outcome;
        g.in_flight = false;
        g.not_before = not_before;
        s.cv.notify_all();
    }
}

/// When the next refresh is due, on the monotonic clock and on the wall clock (ms).
struct Due {
    mono: Instant,
    wall: i64,
}

/// Waits until a refresh is due or asked for, stamping the heartbeat on every wake-up; the
/// trigger (`startup`, `retry`, `timer`, `channel`, `clock`) with the attempt marked in flight,
/// or `None` when the agent stops.
fn wait_for_trigger(s: &Shared, plan: &Planner, due: &Due, first: bool) -> Option<&'static str> {
    let mut g = lock(&s.coord);
    let trigger = loop {
        s.beat();
        if s.stop.load(Ordering::SeqCst) {
            return None;
        }
        if g.pending_channel {
            break "channel";
        }
        let now = Instant::now();
        if now >= due.mono {
            break if first {
                "startup"
            } else if plan.failures() > 0 {
                "retry"
            } else {
                "timer"
            };
        }
        let wall = s.clock.now_ms();
        if wall >= due.wall + WALL_SLACK_MS {
            info!(
                ahead_seconds = (wall - due.wall) / 1000,
                "clock jump seen: wall-clock time passed the scheduled refresh; refreshing now"
            );
            break "clock";
        }
        let wait = (due.mono - now).min(s.cfg.wall_check);
        g =
            s.cv.wait_timeout(g, wait)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
    };
    g.pending_channel = false;
    g.in_flight = true;
    Some(trigger)
}

/// A refresh succeeded: plans the next one from the token's expiry and logs it; the delay.
fn succeeded(
    s: &Shared,
    plan: &mut Planner,
    trigger: &str,
    wall_now: i64,
    st: &TokenRequestStatus,
) -> Duration {
    let (lifetime, delay) = plan.succeeded(wall_now, st.expiration_timestamp, st.granted_seconds);
    if Planner::clock_ahead(wall_now, st.expiration_timestamp, st.granted_seconds) {
        warn!(
            expires_at = %format_rfc3339(st.expiration_timestamp),
            granted_seconds = st.granted_seconds,
            "this node's clock is ahead of the API server's: the new token looks nearly expired; scheduling from the granted lifetime (check NTP)"
        );
    }
    for w in &st.warnings {
        info!(warning = %w, "API server shortened the token lifetime");
    }
    info!(
        trigger,
        expires_at = %format_rfc3339(st.expiration_timestamp),
        lifetime_seconds = lifetime.as_secs(),
        next_refresh_in_seconds = delay.as_secs(),
        kubeconfig = %s.cfg.kubeconfig.display(),
        "refreshed CNI token and wrote kubeconfig; next refresh scheduled"
    );
    delay
}

/// The channel's outcome of a successful refresh.
fn refreshed(st: &TokenRequestStatus) -> Outcome {
    Outcome::Refreshed {
        expires_at: format_rfc3339(st.expiration_timestamp),
    }
}

/// A refresh failed: backs off (at least `retry_after`) and logs it; the delay.
fn failed(
    plan: &mut Planner,
    trigger: &str,
    wall_now: i64,
    retry_after: Option<Duration>,
    e: &KubeError,
) -> Duration {
    let delay = plan.failed(wall_now, retry_after);
    warn!(
        trigger,
        cause = cause(e),
        error = %e,
        consecutive_failures = plan.failures(),
        retry_after_seconds = retry_after.map(|d| d.as_secs()),
        backoff_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        token_expires_at = plan.expiry_ms().map(|x| format_rfc3339(x / 1000)),
        "token refresh failed; backing off"
    );
    delay
}

/// Records an attempt in the snapshot the endpoints read.
fn record(
    s: &Shared,
    plan: &Planner,
    trigger: &'static str,
    wall_now: i64,
    due_wall: i64,
    result: &Result<TokenRequestStatus, KubeError>,
) {
    let mut snap = lock(&s.snap);
    snap.consecutive_failures = plan.failures();
    snap.next_attempt = Some(due_wall.div_euclid(1000));
    match result {
        Ok(st) => {
            snap.token_expiry = Some(st.expiration_timestamp);
            snap.last_success = Some(wall_now.div_euclid(1000));
            snap.granted_seconds = st.granted_seconds;
            *snap.refreshes.entry(trigger).or_insert(0) += 1;
        }
        Err(e) => *snap.failures.entry(cause(e)).or_insert(0) += 1,
    }
}

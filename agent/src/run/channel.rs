//! The agent channel's server side: the private Unix socket, one short-lived thread per
//! connection, coalescing and rate-limiting of refresh requests before they reach the
//! refresher, and pod admissions handed to the NetworkPolicy controller (`admitPod`).

use std::io::BufReader;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tern_kube::channel::{read_request, write_outcome, CodecError, Outcome, Request, MAX_LINE};
use tracing::{debug, info};

use super::{lock, Shared};
use crate::netpol::admit::AdmitRequest;

/// Most channel connections served at once; more are answered "busy".
const MAX_CHANNEL_CONNS: usize = 512;

pub(super) fn bind_socket(path: &std::path::Path) -> anyhow::Result<UnixListener> {
    let dir = path.parent().context("socket path has no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("chmod 0700 {}", dir.display()))?;
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            anyhow::bail!("another agent is already listening on {}", path.display());
        }
        std::fs::remove_file(path)
            .with_context(|| format!("remove stale socket {}", path.display()))?;
    }
    let l = UnixListener::bind(path).with_context(|| format!("bind {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 0600 {}", path.display()))?;
    Ok(l)
}

/// Serves one channel request: coalesce, rate-limit, or start a refresh and wait for it.
fn channel_refresh(s: &Shared, reason: &str) -> Outcome {
    let mut g = lock(&s.coord);
    let now = Instant::now();
    let secs_until =
        |t: Instant| (t.saturating_duration_since(now).as_millis().div_ceil(1000) as u64).max(1);
    if g.in_flight || g.pending_channel {
        debug!(reason, "channel request joins the refresh in progress");
    } else if let Some(nb) = g.not_before.filter(|nb| *nb > now) {
        return Outcome::RateLimited {
            retry_after_seconds: secs_until(nb),
        };
    } else if let Some(t) = g
        .last_channel_trigger
        .filter(|t| now.duration_since(*t) < s.cfg.channel_min_interval)
    {
        let wait = secs_until(t + s.cfg.channel_min_interval);
        info!(
            reason,
            retry_after_seconds = wait,
            "channel refresh request rate-limited"
        );
        return Outcome::RateLimited {
            retry_after_seconds: wait,
        };
    } else {
        info!(reason, "refresh requested over the agent channel");
        g.pending_channel = true;
        g.last_channel_trigger = Some(now);
        s.cv.notify_all();
    }
    let target = g.generation + 1;
    let until = now + s.cfg.request_timeout + Duration::from_secs(5);
    while g.generation < target {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || s.stop.load(Ordering::SeqCst) {
            return Outcome::Failed {
                reason: "refresh still in progress".into(),
            };
        }
        g =
            s.cv.wait_timeout(g, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
    }
    g.last_outcome.clone()
}

/// Serves an `admitPod` request: the NetworkPolicy controller admits the pod, waiting at most
/// `wait_ms` less a margin for the answer to reach the plugin.
fn channel_admit(s: &Shared, req: AdmitRequest, wait_ms: u64) -> Outcome {
    let Some(admission) = &s.admission else {
        return Outcome::Failed {
            reason: "this agent does not enforce NetworkPolicy (tern-agent run --network-policy is false): remove networkPolicy from tern's netconf, or turn it on".into(),
        };
    };
    let wait = Duration::from_millis(wait_ms.min(MAX_ADMIT_WAIT_MS));
    admission.admit(&req, wait.saturating_sub(ANSWER_MARGIN))
}

/// Longest admission wait served (ms): the plugin's `waitSeconds` maximum.
const MAX_ADMIT_WAIT_MS: u64 = 300_000;
/// Taken off an admission's wait so that a `failed` answer reaches the plugin before its own
/// deadline.
const ANSWER_MARGIN: Duration = Duration::from_millis(100);

fn outcome_label(o: &Outcome) -> &'static str {
    match o {
        Outcome::Refreshed { .. } => "refreshed",
        Outcome::Admitted { .. } => "admitted",
        Outcome::RateLimited { .. } => "rate_limited",
        Outcome::Failed { .. } => "failed",
        Outcome::Error { .. } => "error",
    }
}

fn serve_channel_conn(s: &Shared, stream: UnixStream) {
    let _ = stream.set_read_timeout(Some(s.cfg.channel_read_timeout));
    let _ = stream.set_write_timeout(Some(s.cfg.channel_read_timeout));
    let outcome = match read_request(&mut BufReader::new(&stream), MAX_LINE) {
        Ok(Request::Refresh { reason }) => channel_refresh(s, &reason),
        Ok(Request::AdmitPod {
            namespace,
            name,
            uid,
            ips,
            wait_ms,
        }) => channel_admit(
            s,
            AdmitRequest {
                namespace,
                name,
                uid,
                ips,
            },
            wait_ms,
        ),
        Err(e) => {
            let reason = match &e {
                CodecError::Io(io)
                    if matches!(
                        io.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    format!(
                        "no complete request line within {:?}",
                        s.cfg.channel_read_timeout
                    )
                }
                other => other.to_string(),
            };
            debug!(%reason, "bad channel request");
            Outcome::Error { reason }
        }
    };
    *lock(&s.snap)
        .channel
        .entry(outcome_label(&outcome))
        .or_insert(0) += 1;
    let mut w = &stream;
    let _ = write_outcome(&mut w, &outcome);
}

pub(super) fn channel_server(s: &Arc<Shared>, listener: UnixListener) {
    for conn in listener.incoming() {
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = conn else { continue };
        if s.channel_conns.fetch_add(1, Ordering::SeqCst) >= MAX_CHANNEL_CONNS {
            s.channel_conns.fetch_sub(1, Ordering::SeqCst);
            let mut w = &stream;
            let _ = write_outcome(
                &mut w,
                &Outcome::Error {
                    reason: "agent busy".into(),
                },
            );
            continue;
        }
        let s2 = Arc::clone(s);
        let spawned = std::thread::Builder::new()
            .name("channel-conn".into())
            .spawn(move || {
                serve_channel_conn(&s2, stream);
                s2.channel_conns.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            s.channel_conns.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

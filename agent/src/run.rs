//! `tern-agent run`: the refresher thread, the agent channel server and the health/metrics
//! server, sharing one state.
//!
//! Threading model: one refresher thread owns the schedule and makes every TokenRequest; channel
//! connections and HTTP requests each get a short-lived thread that only reads state or asks the
//! refresher for work through [`Coord`]. Sleeps use the monotonic clock (condvar timeouts); the
//! wall clock (through [`WallClock`]) is compared with the schedule at least every
//! `wall_check`, so a suspend or clock jump triggers a refresh without an API call to notice it.
//!
//! Invariants: at most one TokenRequest is in flight; concurrent channel requests are coalesced
//! into the refresh in flight (or the one they start); channel-triggered refreshes start at most
//! once per `channel_min_interval` and never before a server `Retry-After` has passed; a channel
//! connection that is slow, malformed or oversized is answered with an error by its own thread
//! and cannot delay anything else; a failed kubeconfig write is a failed refresh; no log line,
//! metric or channel answer contains a token.

use std::collections::BTreeMap;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tern_kube::channel::{read_request, write_outcome, CodecError, Outcome, Request, MAX_LINE};
use tern_kube::kubeconfig::{self, ClientConfig, TlsTrust};
use tern_kube::time::format_rfc3339;
use tern_kube::{
    write_atomic, BearerToken, Client, KubeError, TokenRequestSpec, TokenRequestStatus,
};
use tracing::{debug, info, warn};

use crate::clock::WallClock;
use crate::config::RunConfig;
use crate::schedule::{backoff_delay, refresh_delay, Rng};

/// Wall time may run ahead of the monotonic schedule by this much before it counts as a jump.
const WALL_SLACK_MS: i64 = 1000;
/// Most channel connections served at once; more are answered "busy".
const MAX_CHANNEL_CONNS: usize = 512;

/// Coordination between channel requests and the refresher.
#[derive(Debug)]
struct Coord {
    pending_channel: bool,
    in_flight: bool,
    generation: u64,
    last_outcome: Outcome,
    last_channel_trigger: Option<Instant>,
    not_before: Option<Instant>,
}

/// A snapshot of the agent's state (also what `/metrics` renders).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// `status.expirationTimestamp` of the current token (Unix s).
    pub token_expiry: Option<i64>,
    /// When the last refresh succeeded (Unix s).
    pub last_success: Option<i64>,
    /// When the next attempt is due (Unix s, wall clock).
    pub next_attempt: Option<i64>,
    /// Consecutive failed attempts.
    pub consecutive_failures: u32,
    /// Successful refreshes by trigger (`startup`, `timer`, `retry`, `clock`, `channel`).
    pub refreshes: BTreeMap<&'static str, u64>,
    /// Failed refreshes by cause (`timeout`, `unauthorized`, `write`, ...).
    pub failures: BTreeMap<&'static str, u64>,
    /// Channel requests by outcome.
    pub channel: BTreeMap<&'static str, u64>,
    /// Lifetime granted by the server for the current token (s).
    pub granted_seconds: Option<i64>,
}

struct Shared {
    cfg: RunConfig,
    clock: Arc<dyn WallClock>,
    coord: Mutex<Coord>,
    cv: Condvar,
    snap: Mutex<Snapshot>,
    stop: AtomicBool,
    channel_conns: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running agent. Dropping it without [`Agent::shutdown`] leaves its threads running.
pub struct Agent {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    http_addr: SocketAddr,
}

impl Agent {
    /// Binds the channel socket (directory 0700, socket 0600) and the health/metrics listener,
    /// then starts the refresher (which refreshes at once) and the servers.
    ///
    /// # Errors
    /// The socket directory cannot be made private, another agent already listens on the socket,
    /// or an address cannot be bound.
    pub fn start(cfg: RunConfig, clock: Arc<dyn WallClock>) -> anyhow::Result<Agent> {
        let unix = bind_socket(&cfg.socket)?;
        let http = TcpListener::bind(cfg.listen)
            .with_context(|| format!("bind health/metrics on {}", cfg.listen))?;
        let http_addr = http.local_addr()?;
        let shared = Arc::new(Shared {
            cfg,
            clock,
            coord: Mutex::new(Coord {
                pending_channel: false,
                in_flight: false,
                generation: 0,
                last_outcome: Outcome::Failed {
                    reason: "no refresh yet".into(),
                },
                last_channel_trigger: None,
                not_before: None,
            }),
            cv: Condvar::new(),
            snap: Mutex::new(Snapshot::default()),
            stop: AtomicBool::new(false),
            channel_conns: AtomicUsize::new(0),
        });
        info!(
            api_server = %shared.cfg.api_server,
            namespace = %shared.cfg.namespace,
            service_account = %shared.cfg.cni_service_account,
            kubeconfig = %shared.cfg.kubeconfig.display(),
            socket = %shared.cfg.socket.display(),
            listen = %http_addr,
            "tern-agent starting"
        );
        let mut threads = Vec::new();
        let s = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("refresher".into())
                .spawn(move || refresher(&s))?,
        );
        let s = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("channel".into())
                .spawn(move || channel_server(&s, unix))?,
        );
        let s = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("http".into())
                .spawn(move || http_server(&s, http))?,
        );
        Ok(Agent {
            shared,
            threads,
            http_addr,
        })
    }

    /// The bound health/metrics address.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// Current state.
    pub fn snapshot(&self) -> Snapshot {
        lock(&self.shared.snap).clone()
    }

    /// Stops every thread, removes the socket, and waits for them.
    pub fn shutdown(self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _g = lock(&self.shared.coord);
            self.shared.cv.notify_all();
        }
        let _ = UnixStream::connect(&self.shared.cfg.socket);
        let _ = TcpStream::connect(self.http_addr);
        for t in self.threads {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.shared.cfg.socket);
        info!("tern-agent stopped");
    }
}

fn bind_socket(path: &std::path::Path) -> anyhow::Result<UnixListener> {
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

/// One refresh: TokenRequest with the agent's own (re-read) credentials, then the atomic write
/// of the kubeconfig (mode 0600) to `cfg.kubeconfig`.
///
/// # Errors
/// Reading the credentials, the TokenRequest, or the write failed.
pub fn refresh_once(cfg: &RunConfig) -> Result<TokenRequestStatus, KubeError> {
    let m = mint_kubeconfig(cfg)?;
    m.write(&cfg.kubeconfig)?;
    Ok(m.status)
}

/// A freshly minted CNI token and the kubeconfig text carrying it, not yet on disk. It has no
/// `Debug`/`Display`: the text holds the token and is only ever written, by [`Self::write`].
pub struct MintedKubeconfig {
    /// The TokenRequest's status (expiry, granted lifetime, warnings).
    pub status: TokenRequestStatus,
    text: String,
}

impl MintedKubeconfig {
    /// Writes the kubeconfig atomically with mode 0600.
    ///
    /// # Errors
    /// [`KubeError::Io`] naming the file; the previous file is then unchanged.
    pub fn write(&self, path: &std::path::Path) -> Result<(), KubeError> {
        write_atomic(path, self.text.as_bytes(), 0o600)
    }
}

/// TokenRequest for the CNI service account with the agent's own (re-read) credentials; the
/// kubeconfig is rendered in memory, not written. `install` uses it to hold the token before it
/// touches the host.
///
/// # Errors
/// Reading the credentials or the TokenRequest failed.
pub fn mint_kubeconfig(cfg: &RunConfig) -> Result<MintedKubeconfig, KubeError> {
    let (client, ca) = in_cluster_client(cfg)?;
    let spec = TokenRequestSpec {
        audiences: Vec::new(),
        expiration_seconds: Some(i64::try_from(cfg.token_lifetime.as_secs()).unwrap_or(86_400)),
        bound_object_ref: None,
    };
    let status = client.create_token(
        &cfg.namespace,
        &cfg.cni_service_account,
        &spec,
        cfg.request_timeout,
    )?;
    let text = kubeconfig::render(&cfg.api_server, &ca, &status.token);
    Ok(MintedKubeconfig { status, text })
}

/// A client with the agent's own in-cluster credentials (token and CA re-read now), and the CA.
///
/// # Errors
/// The token or CA file cannot be read, or the CA holds no certificate.
pub fn in_cluster_client(cfg: &RunConfig) -> Result<(Client, Vec<u8>), KubeError> {
    let token_path = cfg.sa_dir.join("token");
    let ca_path = cfg.sa_dir.join("ca.crt");
    let own = std::fs::read_to_string(&token_path).map_err(|source| KubeError::Io {
        op: "read",
        path: token_path,
        source,
    })?;
    let ca = std::fs::read(&ca_path).map_err(|source| KubeError::Io {
        op: "read",
        path: ca_path,
        source,
    })?;
    let client = Client::new(&ClientConfig {
        source: cfg.sa_dir.clone(),
        server: cfg.api_server.clone(),
        trust: TlsTrust::CaPem(ca.clone()),
        tls_server_name: None,
        token: BearerToken::new(own),
    })?;
    Ok((client, ca))
}

fn cause(e: &KubeError) -> &'static str {
    match e {
        KubeError::Io { op: "read", .. } => "credentials",
        KubeError::Io { .. } => "write",
        other => other.cause_label(),
    }
}

fn refresher(s: &Shared) {
    let cfg = &s.cfg;
    let mut rng = Rng::from_entropy();
    let mut due_mono = Instant::now();
    let mut due_wall = s.clock.now_ms();
    let mut failures: u32 = 0;
    let mut expiry: Option<i64> = None;
    let mut first = true;
    loop {
        let trigger = {
            let mut g = lock(&s.coord);
            let trigger = loop {
                if s.stop.load(Ordering::SeqCst) {
                    return;
                }
                if g.pending_channel {
                    break "channel";
                }
                let now = Instant::now();
                if now >= due_mono {
                    break if first {
                        "startup"
                    } else if failures > 0 {
                        "retry"
                    } else {
                        "timer"
                    };
                }
                let wall = s.clock.now_ms();
                if wall >= due_wall + WALL_SLACK_MS {
                    info!(
                        ahead_seconds = (wall - due_wall) / 1000,
                        "clock jump seen: wall-clock time passed the scheduled refresh; refreshing now"
                    );
                    break "clock";
                }
                let wait = (due_mono - now).min(cfg.wall_check);
                g =
                    s.cv.wait_timeout(g, wait)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0);
            };
            g.pending_channel = false;
            g.in_flight = true;
            trigger
        };
        first = false;
        debug!(trigger, "refreshing CNI token");
        let result = refresh_once(cfg);
        let wall_now = s.clock.now_ms();
        let (delay, outcome, not_before) = match &result {
            Ok(st) => {
                failures = 0;
                expiry = Some(st.expiration_timestamp);
                let lifetime = Duration::from_millis(
                    u64::try_from(st.expiration_timestamp * 1000 - wall_now).unwrap_or(0),
                );
                let delay = refresh_delay(&cfg.policy, lifetime, rng.unit());
                for w in &st.warnings {
                    info!(warning = %w, "API server shortened the token lifetime");
                }
                info!(
                    trigger,
                    expires_at = %format_rfc3339(st.expiration_timestamp),
                    lifetime_seconds = lifetime.as_secs(),
                    next_refresh_in_seconds = delay.as_secs(),
                    kubeconfig = %cfg.kubeconfig.display(),
                    "refreshed CNI token and wrote kubeconfig; next refresh scheduled"
                );
                (
                    delay,
                    Outcome::Refreshed {
                        expires_at: format_rfc3339(st.expiration_timestamp),
                    },
                    None,
                )
            }
            Err(e) => {
                failures += 1;
                let time_left = expiry
                    .map(|x| x * 1000 - wall_now)
                    .filter(|ms| *ms > 0)
                    .map(|ms| Duration::from_millis(ms.unsigned_abs()));
                let retry_after = e.retry_after().map(Duration::from_secs);
                let delay =
                    backoff_delay(&cfg.policy, failures, time_left, retry_after, rng.unit());
                warn!(
                    trigger,
                    cause = cause(e),
                    error = %e,
                    consecutive_failures = failures,
                    retry_after_seconds = retry_after.map(|d| d.as_secs()),
                    backoff_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    token_expires_at = expiry.map(format_rfc3339),
                    "token refresh failed; backing off"
                );
                (
                    delay,
                    Outcome::Failed {
                        reason: format!("{}: {e}", cause(e)),
                    },
                    retry_after.map(|r| Instant::now() + r),
                )
            }
        };
        due_mono = Instant::now() + delay;
        due_wall = wall_now + i64::try_from(delay.as_millis()).unwrap_or(i64::MAX / 2);
        {
            let mut snap = lock(&s.snap);
            snap.consecutive_failures = failures;
            snap.next_attempt = Some(due_wall.div_euclid(1000));
            match &result {
                Ok(st) => {
                    snap.token_expiry = Some(st.expiration_timestamp);
                    snap.last_success = Some(wall_now.div_euclid(1000));
                    snap.granted_seconds = st.granted_seconds;
                    *snap.refreshes.entry(trigger).or_insert(0) += 1;
                }
                Err(e) => *snap.failures.entry(cause(e)).or_insert(0) += 1,
            }
        }
        let mut g = lock(&s.coord);
        g.generation += 1;
        g.last_outcome = outcome;
        g.in_flight = false;
        g.not_before = not_before;
        s.cv.notify_all();
    }
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

fn outcome_label(o: &Outcome) -> &'static str {
    match o {
        Outcome::Refreshed { .. } => "refreshed",
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

fn channel_server(s: &Arc<Shared>, listener: UnixListener) {
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

/// `/healthz`: healthy while the token is valid and the next attempt is due before it expires.
fn health(s: &Shared) -> (u16, String) {
    let snap = lock(&s.snap).clone();
    let now = s.clock.now_secs();
    match (snap.token_expiry, snap.next_attempt) {
        (None, _) => (503, "no token written yet\n".into()),
        (Some(exp), _) if exp <= now => {
            (503, format!("token expired at {}\n", format_rfc3339(exp)))
        }
        (Some(exp), Some(next)) if next >= exp => (
            503,
            format!(
                "token expires at {} before the next attempt at {}\n",
                format_rfc3339(exp),
                format_rfc3339(next)
            ),
        ),
        (Some(exp), _) => (
            200,
            format!("ok: token valid until {}\n", format_rfc3339(exp)),
        ),
    }
}

/// `/metrics` in the Prometheus text format.
fn metrics(s: &Shared) -> String {
    let snap = lock(&s.snap).clone();
    let mut o = String::new();
    let mut gauge = |name: &str, help: &str, v: Option<i64>| {
        o.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
        if let Some(v) = v {
            o.push_str(&format!("{name} {v}\n"));
        }
    };
    gauge(
        "tern_agent_token_expiry_timestamp_seconds",
        "Expiry of the CNI token in the kubeconfig (Unix seconds).",
        snap.token_expiry,
    );
    gauge(
        "tern_agent_last_success_timestamp_seconds",
        "Time of the last successful refresh (Unix seconds).",
        snap.last_success,
    );
    gauge(
        "tern_agent_next_attempt_timestamp_seconds",
        "When the next refresh attempt is due (Unix seconds).",
        snap.next_attempt,
    );
    gauge(
        "tern_agent_consecutive_failures",
        "Refresh attempts failed in a row.",
        Some(i64::from(snap.consecutive_failures)),
    );
    gauge(
        "tern_agent_token_granted_seconds",
        "Lifetime the API server granted for the current token.",
        snap.granted_seconds,
    );
    let mut counter = |name: &str, help: &str, label: &str, m: &BTreeMap<&'static str, u64>| {
        o.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n"));
        for (k, v) in m {
            o.push_str(&format!("{name}{{{label}=\"{k}\"}} {v}\n"));
        }
    };
    counter(
        "tern_agent_refreshes_total",
        "Successful token refreshes by trigger.",
        "trigger",
        &snap.refreshes,
    );
    counter(
        "tern_agent_refresh_failures_total",
        "Failed token refreshes by cause.",
        "cause",
        &snap.failures,
    );
    counter(
        "tern_agent_channel_requests_total",
        "Agent channel requests by outcome.",
        "outcome",
        &snap.channel,
    );
    o
}

fn serve_http_conn(s: &Shared, mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let line = String::from_utf8_lossy(&buf);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (code, ctype, body) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/healthz") => {
            let (c, b) = health(s);
            (c, "text/plain; charset=utf-8", b)
        }
        ("GET", "/metrics") => (200, "text/plain; version=0.0.4; charset=utf-8", metrics(s)),
        _ => (404, "text/plain; charset=utf-8", "not found\n".into()),
    };
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        _ => "Service Unavailable",
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn http_server(s: &Arc<Shared>, listener: TcpListener) {
    for conn in listener.incoming() {
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = conn else { continue };
        let s2 = Arc::clone(s);
        let _ = std::thread::Builder::new()
            .name("http-conn".into())
            .spawn(move || serve_http_conn(&s2, stream));
    }
}

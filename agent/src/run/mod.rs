//! `tern-agent run`: the refresher thread, the agent channel server and the probe/metrics
//! server, sharing one state.
//!
//! Files: the refresher loop (`refresher.rs`), the agent channel (`channel.rs`), the plugins'
//! verb reports (`verbs.rs`) and the endpoints (`http.rs`, `metrics.rs`); this file holds the
//! shared state and starts and stops the threads.
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
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use prometheus_client::metrics::histogram::Histogram;
use tern_kube::channel::Outcome;
use tracing::info;

use crate::clock::WallClock;
use crate::config::RunConfig;

mod channel;
mod http;
pub(crate) mod metrics;
mod refresher;
pub mod verbs;

pub use crate::mint::{in_cluster_client, mint_kubeconfig, refresh_once, MintedKubeconfig};

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
    /// TokenRequests sent, by result (`success`, `unauthorized`, `throttled`, `unavailable`,
    /// `timeout`, `error`).
    pub token_requests: BTreeMap<&'static str, u64>,
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
    /// TokenRequest latency (seconds).
    latency: Histogram,
    /// When the refresher last made progress (monotonic): what `/livez` checks.
    heartbeat: Mutex<Instant>,
    /// The route controller's counters, with `--node-routes`.
    routes: Option<RouteStatsFn>,
    /// The NetworkPolicy controller's counters, with `--network-policy`.
    netpol: Option<NetpolStatsFn>,
    /// Pod admission for tern's ADD (`admitPod`), with `--network-policy`.
    admission: Option<crate::netpol::PodAdmission>,
    /// The plugins' verb counts and durations.
    verbs: verbs::VerbMetrics,
}

type RouteStatsFn = Arc<dyn Fn() -> crate::routes::RouteStats + Send + Sync>;
type NetpolStatsFn = Arc<dyn Fn() -> crate::netpol::NetpolStats + Send + Sync>;

/// Upper bounds of the TokenRequest latency buckets (seconds), up to the default request deadline.
const LATENCY_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

impl Shared {
    /// Records that the refresher made progress now.
    fn beat(&self) {
        *lock(&self.heartbeat) = Instant::now();
    }

    /// How long the refresher may go without progress before it counts as stuck: two wall
    /// checks plus two request deadlines (a pass waits at most one wall check; an attempt is
    /// bounded by one request deadline and a local write).
    fn stall_limit(&self) -> Duration {
        (self.cfg.wall_check + self.cfg.request_timeout) * 2
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The node controllers `cfg` turns on: node routes, egress NAT, NetworkPolicy, and the
/// follower of this node's podCIDRs when the conflist or the egress NAT derive from them.
fn start_controllers(cfg: &RunConfig) -> anyhow::Result<Controllers> {
    let egress_from_node = cfg
        .egress
        .as_ref()
        .is_some_and(|e| matches!(e.pod, crate::egress::PodRanges::FromNode(_)));
    let node_name = cfg
        .node_name
        .clone()
        .filter(|_| cfg.pod_cidrs_conflist.is_some() || egress_from_node);
    let own_cidrs = node_name
        .as_ref()
        .map(|_| Arc::new(crate::node_cidrs::NodeCidrs::default()));
    let routes = match cfg.routes.clone() {
        Some(rc) => Some(crate::routes::RouteController::start(
            cfg.controller_settings(),
            rc,
            own_cidrs.clone(),
        )?),
        None => None,
    };
    let follower = match (node_name, &own_cidrs) {
        // With the route controller publishing and no conflist to keep, nothing is left to do.
        (Some(node_name), Some(cells)) if routes.is_none() || cfg.pod_cidrs_conflist.is_some() => {
            Some(crate::node_cidrs::Follower::start(
                cfg.controller_settings(),
                crate::node_cidrs::FollowConfig {
                    node_name,
                    conflist: cfg.pod_cidrs_conflist.clone(),
                    poll: routes.is_none().then_some(cfg.watch_timeout),
                },
                Arc::clone(cells),
            )?)
        }
        _ => None,
    };
    let egress = match cfg.egress.clone() {
        Some(ec) => Some(crate::egress::EgressNat::start(
            cfg.controller_settings(),
            ec,
            own_cidrs,
        )?),
        None => None,
    };
    let netpol = match cfg.netpol.clone() {
        Some(nc) => Some(crate::netpol::NetpolController::start(
            cfg.controller_settings(),
            nc,
        )?),
        None => None,
    };
    Ok((routes, egress, netpol, follower))
}

type Controllers = (
    Option<crate::routes::RouteController>,
    Option<crate::egress::EgressNat>,
    Option<crate::netpol::NetpolController>,
    Option<crate::node_cidrs::Follower>,
);

/// A running agent. Dropping it without [`Agent::shutdown`] leaves its threads running.
pub struct Agent {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    http_addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    http_stop: tokio::sync::oneshot::Sender<()>,
    routes: Option<crate::routes::RouteController>,
    verb_receiver: verbs::VerbReceiver,
    egress: Option<crate::egress::EgressNat>,
    netpol: Option<crate::netpol::NetpolController>,
    follower: Option<crate::node_cidrs::Follower>,
}

impl Agent {
    /// Binds the channel socket (directory 0700, socket 0600), the verb report socket, the
    /// health/metrics listener and, with `--metrics-address`, the metrics listener, then starts
    /// the refresher (which refreshes at once) and the servers.
    ///
    /// # Errors
    /// The socket directory cannot be made private, another agent already listens on the socket,
    /// or an address or socket cannot be bound.
    pub fn start(cfg: RunConfig, clock: Arc<dyn WallClock>) -> anyhow::Result<Agent> {
        let unix = channel::bind_socket(&cfg.socket)?;
        let http = TcpListener::bind(cfg.listen)
            .with_context(|| format!("bind health/metrics on {}", cfg.listen))?;
        let http_addr = http.local_addr()?;
        let metrics_listener = match cfg.metrics_address {
            Some(a) => {
                Some(TcpListener::bind(a).with_context(|| format!("bind --metrics-address {a}"))?)
            }
            None => None,
        };
        let metrics_addr = metrics_listener
            .as_ref()
            .map(TcpListener::local_addr)
            .transpose()?;
        let verb_metrics = verbs::VerbMetrics::default();
        let verb_receiver = verbs::VerbReceiver::start(&cfg.metrics_socket, verb_metrics.clone())?;
        let (routes, egress, netpol, follower) = start_controllers(&cfg)?;
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
            latency: Histogram::new(LATENCY_BUCKETS),
            heartbeat: Mutex::new(Instant::now()),
            routes: routes
                .as_ref()
                .map(crate::routes::RouteController::stats_source),
            netpol: netpol
                .as_ref()
                .map(crate::netpol::NetpolController::stats_source),
            admission: netpol
                .as_ref()
                .map(crate::netpol::NetpolController::admission),
            verbs: verb_metrics,
        });
        info!(
            api_server = %shared.cfg.api_server,
            namespace = %shared.cfg.namespace,
            service_account = %shared.cfg.cni_service_account,
            kubeconfig = %shared.cfg.kubeconfig.display(),
            socket = %shared.cfg.socket.display(),
            listen = %http_addr,
            metrics_address = ?metrics_addr,
            metrics_socket = %shared.cfg.metrics_socket.display(),
            version = tern_node::version::version(),
            "tern-agent starting"
        );
        let mut threads = Vec::new();
        let s = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("refresher".into())
                .spawn(move || refresher::refresher(&s))?,
        );
        let s = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("channel".into())
                .spawn(move || channel::channel_server(&s, unix))?,
        );
        let s = Arc::clone(&shared);
        let (http_stop, stopped) = tokio::sync::oneshot::channel();
        threads.push(
            std::thread::Builder::new()
                .name("http".into())
                .spawn(move || http::http_server(s, http, metrics_listener, stopped))?,
        );
        Ok(Agent {
            shared,
            threads,
            http_addr,
            metrics_addr,
            http_stop,
            routes,
            verb_receiver,
            egress,
            netpol,
            follower,
        })
    }

    /// The bound health/metrics address.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The bound `--metrics-address`, when given.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Current state.
    pub fn snapshot(&self) -> Snapshot {
        lock(&self.shared.snap).clone()
    }

    /// The route controller's counters (`None` without `--node-routes`).
    pub fn route_stats(&self) -> Option<crate::routes::RouteStats> {
        self.routes
            .as_ref()
            .map(crate::routes::RouteController::stats)
    }

    /// Stops every thread, removes the socket, and waits for them; routes, the egress NAT
    /// table and the NetworkPolicy table stay.
    pub fn shutdown(self) {
        if let Some(r) = self.routes {
            r.stop();
        }
        if let Some(e) = self.egress {
            e.stop();
        }
        if let Some(n) = self.netpol {
            n.stop();
        }
        if let Some(f) = self.follower {
            f.stop();
        }
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _g = lock(&self.shared.coord);
            self.shared.cv.notify_all();
        }
        let _ = UnixStream::connect(&self.shared.cfg.socket);
        let _ = self.http_stop.send(());
        self.verb_receiver.stop();
        for t in self.threads {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.shared.cfg.socket);
        info!("tern-agent stopped");
    }
}

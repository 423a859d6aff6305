//! `tern-agent run --node-routes[=host-gw|vxlan]`: routing between nodes. One thread lists and
//! watches Nodes and keeps one route per other node's podCIDR in this node's main table: via
//! that node's InternalIP (host-gw, nodes on one L2 segment), or through one VXLAN device with
//! a neighbour and an FDB entry per other node (vxlan, nodes on any routed network).
//!
//! Files: the desired routes (`desired.rs`, pure), the kernel side (`kernel.rs`), the data
//! paths behind one seam (`datapath.rs`: host-gw in `host_gw.rs`, VXLAN's device, neighbours and
//! FDB in `vxlan.rs`), the Node watch's subscriber that reconciles (`consumer.rs`, on the agent's
//! one watch layer, `tern-watch`), the metrics (`metrics.rs`); this file holds the settings, the
//! counters, the choice of data path and starting and stopping the thread.
//!
//! Invariants: the kernel is reconciled after the first list (adding what is missing, removing
//! tern's stale routes and entries) and after every change; nothing but a Node's change or
//! disappearance removes a route, so an API server that is down or a watch that breaks leaves
//! the routes as they are.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use clap::Args;

use crate::args::parse_duration;
use crate::mint::ControllerSettings;

mod consumer;
mod datapath;
pub mod desired;
mod host_gw;
pub mod kernel;
pub mod metrics;
pub mod vxlan;

pub use kernel::TERN_PROTOCOL;

/// The flags of `tern-agent run` for node routes.
#[derive(Debug, Clone, Args)]
pub struct RouteArgs {
    /// Route every other node's podCIDRs: `host-gw` (the default of a bare --node-routes) via
    /// its InternalIP, nodes on one L2 segment; `vxlan` through a VXLAN device, nodes on any
    /// routed network (needs list/watch nodes, and patch nodes/status for vxlan)
    #[arg(
        long,
        value_enum,
        value_name = "MODE",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "host-gw"
    )]
    pub node_routes: Option<RouteMode>,
    /// The VXLAN network identifier of --node-routes=vxlan (the same on every node)
    #[arg(long, value_name = "VNI", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16_777_215))]
    pub vxlan_vni: u32,
    /// The UDP port of --node-routes=vxlan (the same on every node; IANA's is 4789)
    #[arg(long, value_name = "PORT", default_value_t = 4789, value_parser = clap::value_parser!(u16).range(1..))]
    pub vxlan_port: u16,
    /// This node's name (the downward API's spec.nodeName), needed by --node-routes,
    /// --pod-cidrs-conflist and the egress NAT's ranges read from the Node
    #[arg(long, value_name = "NAME", env = "NODE_NAME", hide_env_values = true)]
    pub node_name: Option<String>,
    /// How long one node watch lasts before it is renewed (timeoutSeconds)
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub watch_timeout: Duration,
}

/// How packets reach other nodes' pods (`--node-routes=MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RouteMode {
    /// A route per podCIDR via the node's InternalIP: the nodes share one L2 segment.
    HostGw,
    /// A route per podCIDR through tern's VXLAN device: the nodes need only reach each other's
    /// InternalIP over UDP.
    Vxlan,
}

/// The data path of the route controller, with its settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// host-gw.
    HostGw,
    /// VXLAN: the device's VNI and UDP port.
    Vxlan {
        /// `IFLA_VXLAN_ID`.
        vni: u32,
        /// `IFLA_VXLAN_PORT`.
        port: u16,
    },
}

/// The data path of `mode`, chosen once at start: a new mode is one file and one line here.
fn data_path(mode: Mode) -> Box<dyn datapath::DataPath> {
    match mode {
        Mode::HostGw => Box::new(host_gw::HostGw),
        Mode::Vxlan { vni, port } => Box::new(vxlan::Vxlan::new(vni, port)),
    }
}

/// Settings of the route controller.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// This node's `metadata.name`: its own podCIDRs get no route.
    pub node_name: String,
    /// host-gw or VXLAN.
    pub mode: Mode,
    /// `timeoutSeconds` of each watch.
    pub watch_timeout: Duration,
    /// Longest silence on a watch before it counts as dead (bookmarks arrive about every minute).
    pub watch_idle: Duration,
}

impl RouteConfig {
    /// The settings from the flags; `None` without `--node-routes`.
    ///
    /// # Errors
    /// `--node-routes` without a node name, or a watch timeout under 1 s.
    pub fn from_args(a: &RouteArgs) -> anyhow::Result<Option<RouteConfig>> {
        let Some(route_mode) = a.node_routes else {
            return Ok(None);
        };
        let Some(node_name) = a.node_name.clone().filter(|n| !n.is_empty()) else {
            anyhow::bail!(
                "--node-routes needs --node-name or NODE_NAME (the downward API's spec.nodeName)"
            );
        };
        if a.watch_timeout < Duration::from_secs(1) {
            anyhow::bail!("--watch-timeout must be at least 1s");
        }
        let mode = match route_mode {
            RouteMode::HostGw => Mode::HostGw,
            RouteMode::Vxlan => Mode::Vxlan {
                vni: a.vxlan_vni,
                port: a.vxlan_port,
            },
        };
        Ok(Some(RouteConfig {
            node_name,
            mode,
            watch_timeout: a.watch_timeout,
            watch_idle: Duration::from_secs(180),
        }))
    }
}

/// Counters and gauges of the route controller (what `/metrics` renders).
#[derive(Debug, Clone, Default)]
pub struct RouteStats {
    /// Routes of tern's in the table after the last reconcile.
    pub installed: u64,
    /// Routes added, moved, removed, refused, since start.
    pub added: u64,
    /// Routes whose gateway changed.
    pub moved: u64,
    /// Stale routes removed.
    pub removed: u64,
    /// Route operations the kernel refused.
    pub failed: u64,
    /// podCIDRs currently left unrouted, by reason.
    pub skipped: std::collections::BTreeMap<&'static str, u64>,
    /// Full lists made (start-up, 410, errors).
    pub lists: u64,
    /// Watches opened.
    pub watches: u64,
    /// Watch events by type (`added`, `modified`... as applied, `deleted`, `bookmark`, `gone`).
    pub events: std::collections::BTreeMap<&'static str, u64>,
    /// Watch events and listed Nodes whose slim value (`NodeEntry`) changed nothing: dropped.
    pub events_unchanged: u64,
    /// API errors by cause.
    pub api_errors: std::collections::BTreeMap<&'static str, u64>,
    /// Nodes known.
    pub nodes: u64,
    /// Whether the first list has been reconciled.
    pub synced: bool,
    /// With VXLAN: other nodes with a forwarding-database entry after the last reconcile.
    pub vxlan_peers: u64,
    /// With VXLAN: neighbour and FDB entries written or removed, since start (0 on a pass that
    /// finds the kernel as it should be).
    pub vxlan_writes: u64,
    /// With VXLAN: times this node's VTEP MAC was published in its Node annotation.
    pub vxlan_published: u64,
}

pub(crate) struct Shared {
    pub(crate) run: ControllerSettings,
    pub(crate) cfg: RouteConfig,
    pub(crate) stats: Mutex<RouteStats>,
    pub(crate) stop: crate::stop_signal::StopSignal,
    /// Where this node's own podCIDRs are published, as the watch sees them.
    pub(crate) own_cidrs: Option<Arc<crate::node_cidrs::NodeCidrs>>,
    /// The Node reflector's counters (lists, watches, events by type).
    pub(crate) watch: Arc<Mutex<tern_watch::WatchStats>>,
}

impl Shared {
    pub(crate) fn stats(&self) -> std::sync::MutexGuard<'_, RouteStats> {
        self.stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The counters now, the watch's included.
    fn snapshot(&self) -> RouteStats {
        let mut st = self.stats().clone();
        let w = self
            .watch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        st.lists = w.lists;
        st.watches = w.watches;
        st.events.clone_from(&w.events);
        st.events_unchanged = w.unchanged;
        st
    }
}

/// The running route controller.
pub struct RouteController {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    done: std::sync::mpsc::Receiver<()>,
}

impl RouteController {
    /// Starts the controller thread in the calling thread's network namespace. With
    /// `own_cidrs`, every list and change of this node's own Node publishes its podCIDRs there
    /// (the followers of [`crate::node_cidrs`] need no request of their own).
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn start(
        run: ControllerSettings,
        cfg: RouteConfig,
        own_cidrs: Option<Arc<crate::node_cidrs::NodeCidrs>>,
    ) -> anyhow::Result<RouteController> {
        let shared = Arc::new(Shared {
            run,
            cfg,
            stats: Mutex::new(RouteStats::default()),
            stop: crate::stop_signal::StopSignal::default(),
            own_cidrs,
            watch: Arc::default(),
        });
        let s = Arc::clone(&shared);
        let (tx, done) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("node-routes".into())
            .spawn(move || {
                consumer::run(&s);
                let _ = tx.send(());
            })?;
        Ok(RouteController {
            shared,
            thread: Some(thread),
            done,
        })
    }

    /// The counters now.
    pub fn stats(&self) -> RouteStats {
        self.shared.snapshot()
    }

    /// A handle for the metrics endpoint.
    pub fn stats_source(&self) -> Arc<dyn Fn() -> RouteStats + Send + Sync> {
        let s = Arc::clone(&self.shared);
        Arc::new(move || s.snapshot())
    }

    /// Stops the thread and leaves every route in place: pods keep their network across an
    /// agent restart. A thread blocked on an open watch (until its next event, bookmark or
    /// idle deadline) is waited for 2 s, then left to end on its own.
    pub fn stop(mut self) {
        self.shared.stop.stop();
        if self.done.recv_timeout(Duration::from_secs(2)).is_ok() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

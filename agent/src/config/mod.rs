//! `tern-agent run` settings: the [`RunConfig`] type and its defaults; parsing from flags and
//! environment is in `parse.rs`, the checks in `validate.rs`.
//!
//! Invariant: a [`RunConfig`] that exists is valid — the requested lifetime is ≥ 600 s and never
//! exactly 3607 s, the refresh override parses strictly and lies in [1 min, lifetime), the
//! `--listen` address is loopback unless explicitly allowed (`--metrics-address`, serving only
//! `/metrics`, is that explicit choice), and the wall-clock check runs at least once a minute.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::schedule::Policy;

mod parse;
mod validate;

pub use parse::{RunArgs, RUN_ENV_HELP};

use crate::args::{DEFAULT_CNI_SA, DEFAULT_SA_DIR};

/// Default path of the kubeconfig the agent writes.
pub const DEFAULT_KUBECONFIG: &str = "/etc/cni/net.d/tern-kubeconfig";
/// Default health/metrics address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9412";
/// Environment variable behind `--metrics-address`.
pub const METRICS_ADDRESS_ENV: &str = "TERN_METRICS_ADDRESS";
/// Environment variable overriding the refresh interval.
pub const REFRESH_ENV: &str = "CNI_TOKEN_REFRESH_DURATION";

/// Everything `tern-agent run` needs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// API server URL (`https://host:port`), from `KUBERNETES_SERVICE_HOST`/`_PORT` or `--api-server`.
    pub api_server: String,
    /// Directory holding the agent's own `token`, `ca.crt` and `namespace` (re-read per request).
    pub sa_dir: PathBuf,
    /// Namespace of the CNI service account (`POD_NAMESPACE`, else `<sa_dir>/namespace`).
    pub namespace: String,
    /// The CNI service account whose tokens are requested.
    pub cni_service_account: String,
    /// Requested token lifetime (default 24 h).
    pub token_lifetime: Duration,
    /// Refresh and backoff settings.
    pub policy: Policy,
    /// Kubeconfig written for the plugin.
    pub kubeconfig: PathBuf,
    /// Agent channel socket.
    pub socket: PathBuf,
    /// `/healthz` and `/metrics` address.
    pub listen: SocketAddr,
    /// A second address serving `/metrics` only, for a cluster's Prometheus
    /// (`--metrics-address`, `TERN_METRICS_ADDRESS`); `None`: only `listen` serves it.
    pub metrics_address: Option<SocketAddr>,
    /// Where the plugins' verb reports arrive (`--metrics-socket`, default
    /// [`tern_node::report::REPORT_SOCKET`]).
    pub metrics_socket: PathBuf,
    /// Deadline of each API request.
    pub request_timeout: Duration,
    /// How often wall-clock time is compared with the schedule (≤ 60 s).
    pub wall_check: Duration,
    /// Minimum spacing of channel-triggered refreshes (default 30 s).
    pub channel_min_interval: Duration,
    /// Read deadline for one channel request.
    pub channel_read_timeout: Duration,
    /// This node's name (`--node-name`, `NODE_NAME`), when given.
    pub node_name: Option<String>,
    /// The conflist whose IPAM ranges follow this node's `spec.podCIDRs`
    /// (`--pod-cidrs-conflist`, [`crate::node_cidrs`]); `None`: not followed.
    pub pod_cidrs_conflist: Option<PathBuf>,
    /// `timeoutSeconds` of each Node watch, also how often this Node is read when no watch
    /// learns its podCIDRs (`--watch-timeout`).
    pub watch_timeout: Duration,
    /// Node routes (`--node-routes`); `None` when off.
    pub routes: Option<crate::routes::RouteConfig>,
    /// Egress NAT (`--egress-nat`); `None` when off.
    pub egress: Option<crate::egress::EgressConfig>,
    /// NetworkPolicy (`--network-policy`); `None` when off.
    pub netpol: Option<crate::netpol::NetpolConfig>,
}

impl RunConfig {
    /// How the subsystems reach the API server.
    pub fn api(&self) -> crate::mint::ApiAccess {
        crate::mint::ApiAccess {
            api_server: self.api_server.clone(),
            sa_dir: self.sa_dir.clone(),
            request_timeout: self.request_timeout,
        }
    }

    /// What the node controllers (routes, egress NAT) take.
    pub fn controller_settings(&self) -> crate::mint::ControllerSettings {
        crate::mint::ControllerSettings {
            api: self.api(),
            policy: self.policy.clone(),
            kubeconfig: self.kubeconfig.clone(),
        }
    }

    /// What the refresher and install mint tokens for.
    pub fn token_target(&self) -> crate::mint::TokenTarget {
        crate::mint::TokenTarget {
            api: self.api(),
            namespace: self.namespace.clone(),
            cni_service_account: self.cni_service_account.clone(),
            token_lifetime: self.token_lifetime,
            kubeconfig: self.kubeconfig.clone(),
        }
    }

    /// Defaults for everything but the API server and namespace.
    pub fn with_defaults(api_server: String, namespace: String) -> Self {
        RunConfig {
            api_server,
            sa_dir: DEFAULT_SA_DIR.into(),
            namespace,
            cni_service_account: DEFAULT_CNI_SA.into(),
            token_lifetime: Duration::from_secs(24 * 3600),
            policy: Policy::default(),
            kubeconfig: DEFAULT_KUBECONFIG.into(),
            socket: tern_kube::channel::DEFAULT_SOCKET.into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 9412)),
            metrics_address: None,
            metrics_socket: tern_node::report::REPORT_SOCKET.into(),
            request_timeout: crate::mint::DEFAULT_REQUEST_TIMEOUT,
            wall_check: Duration::from_secs(30),
            channel_min_interval: Duration::from_secs(30),
            channel_read_timeout: Duration::from_secs(2),
            node_name: None,
            pod_cidrs_conflist: None,
            watch_timeout: Duration::from_secs(300),
            routes: None,
            egress: None,
            netpol: None,
        }
    }
}

/// An environment of fixed pairs, for the tests of [`RunConfig`]'s parsing and validation.
#[cfg(test)]
pub(crate) mod test_env {
    pub(crate) fn env_of(
        pairs: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }
}

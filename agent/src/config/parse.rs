//! `tern-agent run` settings from the command line and the environment: its flags (clap), the
//! in-cluster API server and namespace, and [`RunConfig::from_args`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{RunConfig, DEFAULT_KUBECONFIG, DEFAULT_LISTEN, METRICS_ADDRESS_ENV, REFRESH_ENV};
use crate::args::{
    api_server_from, namespace_from, parse_duration, parse_subcommand, ApiArgs, CredentialArgs,
    Switch,
};

/// Environment of `tern-agent run` that has no flag, shown under `--help`.
pub const RUN_ENV_HELP: &str = "environment:
  CNI_TOKEN_REFRESH_DURATION   refresh interval instead of 70-80 % of the lifetime
                               (e.g. 10m, 2h; at least 1m, below the token lifetime)
  TERN_LOG                     log level: error, warn, info (default), debug or trace
  TERN_LOG_FORMAT              log lines: text (default) or json
durations: a number with a unit, e.g. 500ms, 30s, 10m, 24h";

/// `tern-agent run` flags.
#[derive(Debug, Clone, Args)]
#[command(after_help = RUN_ENV_HELP)]
pub struct RunArgs {
    /// Credentials and the CNI service account.
    #[command(flatten)]
    pub credentials: CredentialArgs,
    /// Kubeconfig written for the plugin (mode 0600)
    #[arg(long, value_name = "PATH", default_value = DEFAULT_KUBECONFIG)]
    pub kubeconfig: PathBuf,
    /// Agent channel socket
    #[arg(long, value_name = "PATH", default_value = tern_kube::channel::DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Address of /livez, /readyz, /healthz and /metrics
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Allow a non-loopback --listen (true, false, 1 or 0)
    #[arg(long, value_name = "BOOL", default_value = "false")]
    pub allow_non_loopback_listen: Switch,
    /// Also serve /metrics (only) on this address, for Prometheus (IP:PORT, e.g. 0.0.0.0:9413)
    #[arg(
        long,
        value_name = "ADDR",
        env = METRICS_ADDRESS_ENV,
        value_parser = parse_metrics_address
    )]
    pub metrics_address: Option<SocketAddr>,
    /// Unix datagram socket where the plugins report each verb (they send to the default)
    #[arg(long, value_name = "PATH", default_value = tern_node::report::REPORT_SOCKET)]
    pub metrics_socket: PathBuf,
    /// Deadline of each API request
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// First retry ceiling after a failure
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub backoff_base: Duration,
    /// Largest retry ceiling
    #[arg(long, value_name = "DURATION", default_value = "4m", value_parser = parse_duration)]
    pub backoff_cap: Duration,
    /// How often the wall clock is compared with the schedule (at most 1m)
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub wall_check: Duration,
    /// Minimum spacing of channel-triggered refreshes
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub channel_interval: Duration,
    /// The conflist `tern-agent install` wrote, as mounted here: its IPAM ranges (those install
    /// renders from the Node) are rewritten when this node's spec.podCIDRs change (the Node
    /// registered again with new ones); needs --node-name
    #[arg(long, value_name = "FILE")]
    pub pod_cidrs_conflist: Option<PathBuf>,
    /// Node routes.
    #[command(flatten)]
    pub routes: crate::routes::RouteArgs,
    /// Egress NAT.
    #[command(flatten)]
    pub egress: crate::egress::EgressArgs,
    /// NetworkPolicy.
    #[command(flatten)]
    pub netpol: crate::netpol::NetpolArgs,
}

/// Parses `--metrics-address` (or `TERN_METRICS_ADDRESS`): an IP address and a port, IPv6 in
/// brackets.
///
/// # Errors
/// Anything else, quoting it and giving examples.
pub fn parse_metrics_address(v: &str) -> Result<SocketAddr, String> {
    v.parse().map_err(|_| {
        format!("takes IP:PORT such as 0.0.0.0:9413 or [::]:9413, not {v:?} (flag or {METRICS_ADDRESS_ENV})")
    })
}

impl RunConfig {
    /// Builds the configuration from `args` (the flags after `run`), the flags' environment
    /// fallbacks, and the lookup `env` for the in-cluster variables and
    /// `CNI_TOKEN_REFRESH_DURATION`.
    ///
    /// # Errors
    /// A message naming the bad flag or variable and what is accepted.
    pub fn from_args(
        args: &[String],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Self> {
        Self::from_run_args(parse_subcommand::<RunArgs>("run", args)?, env)
    }

    /// Builds the configuration from parsed flags and the lookup `env` (as [`Self::from_args`]).
    ///
    /// # Errors
    /// As [`Self::from_args`].
    pub fn from_run_args(a: RunArgs, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let mut c = RunConfig::from_credentials(&a.credentials, env)?;
        c.kubeconfig = a.kubeconfig;
        c.socket = a.socket;
        c.listen = a.listen;
        c.metrics_address = a.metrics_address;
        c.metrics_socket = a.metrics_socket;
        c.request_timeout = a.request_timeout;
        c.policy.backoff_base = a.backoff_base;
        c.policy.backoff_cap = a.backoff_cap;
        c.wall_check = a.wall_check;
        c.channel_min_interval = a.channel_interval;
        c.routes = crate::routes::RouteConfig::from_args(&a.routes)?;
        c.node_name = a.routes.node_name.clone().filter(|n| !n.is_empty());
        c.pod_cidrs_conflist = a.pod_cidrs_conflist;
        c.watch_timeout = a.routes.watch_timeout;
        if c.pod_cidrs_conflist.is_some() && c.node_name.is_none() {
            anyhow::bail!("--pod-cidrs-conflist needs --node-name or NODE_NAME (the Node whose spec.podCIDRs it follows)");
        }
        c.egress =
            crate::egress::EgressConfig::from_args(&a.egress, a.routes.node_name.as_deref())?;
        let polls_node = c.pod_cidrs_conflist.is_some()
            || c.egress
                .as_ref()
                .is_some_and(|e| matches!(e.pod, crate::egress::PodRanges::FromNode(_)));
        if polls_node && c.watch_timeout < Duration::from_secs(1) {
            // Without --node-routes the follower GETs this Node every --watch-timeout: under
            // 1 s (0 s) that is a busy loop of requests.
            anyhow::bail!("--watch-timeout must be at least 1s");
        }
        c.netpol = crate::netpol::NetpolConfig::from_args(
            &a.netpol,
            a.routes.node_name.as_deref(),
            a.routes.watch_timeout,
        )?;
        if let Some(v) = env(REFRESH_ENV).filter(|v| !v.is_empty()) {
            c.policy.refresh_override =
                Some(parse_duration(&v).map_err(|e| anyhow::anyhow!("{REFRESH_ENV}: {e}"))?);
        }
        c.validate(a.allow_non_loopback_listen.0)?;
        Ok(c)
    }

    /// Defaults plus the credential flags (shared with `install`); not yet validated.
    ///
    /// # Errors
    /// As [`RunConfig::from_api`].
    pub fn from_credentials(
        a: &CredentialArgs,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Self> {
        let mut c = RunConfig::from_api(&a.api, env)?;
        c.cni_service_account.clone_from(&a.service_account);
        c.token_lifetime = a.token_lifetime;
        Ok(c)
    }

    /// Defaults plus the API server flags (shared with `uninstall`); not yet validated.
    ///
    /// # Errors
    /// No API server can be found, or it is not https.
    pub fn from_api(a: &ApiArgs, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let api_server = api_server_from(a.api_server.as_ref(), env)?;
        let namespace = namespace_from(a.namespace.as_ref(), &a.sa_dir);
        let mut c = RunConfig::with_defaults(api_server, namespace);
        c.sa_dir.clone_from(&a.sa_dir);
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::test_env::env_of;

    #[test]
    fn in_cluster_env_and_defaults() {
        let env = env_of(&[
            ("KUBERNETES_SERVICE_HOST", "fd00::1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
        ]);
        let c = RunConfig::from_args(&["--namespace".into(), "tern".into()], &env).unwrap();
        assert_eq!(c.api_server, "https://[fd00::1]:443");
        assert_eq!(c.namespace, "tern");
        assert_eq!(c.token_lifetime, Duration::from_secs(86_400));
        assert_eq!(c.policy.backoff_cap, Duration::from_secs(240));
        assert!(c.listen.ip().is_loopback());
    }

    #[test]
    fn pod_cidrs_conflist_needs_a_node_and_a_watch_timeout_of_1s() {
        let env = env_of(&[
            ("KUBERNETES_SERVICE_HOST", "h"),
            ("KUBERNETES_SERVICE_PORT", "1"),
        ]);
        let parse = |a: &[&str]| {
            let args: Vec<String> = a.iter().map(|s| (*s).to_owned()).collect();
            RunConfig::from_args(&args, &env)
        };
        let follow = |timeout: &str| {
            parse(&[
                "--pod-cidrs-conflist",
                "/c",
                "--node-name",
                "n1",
                "--watch-timeout",
                timeout,
            ])
        };
        // An empty --node-name overrides any NODE_NAME of the test's environment.
        let e = parse(&["--pod-cidrs-conflist", "/c", "--node-name", ""])
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs --node-name"), "{e}");
        // Without --node-routes the follower GETs the Node every --watch-timeout: 0 s would spin.
        let e = follow("0s").unwrap_err().to_string();
        assert!(e.contains("--watch-timeout must be at least 1s"), "{e}");
        let c = follow("1s").unwrap();
        assert_eq!(c.node_name.as_deref(), Some("n1"));
        assert_eq!(c.watch_timeout, Duration::from_secs(1));
        // Nothing polls the Node: the flag means nothing and stays accepted as before.
        assert!(parse(&["--watch-timeout", "0s"]).is_ok());
    }

    #[test]
    fn refresh_override_is_strict() {
        let env = env_of(&[
            ("KUBERNETES_SERVICE_HOST", "h"),
            ("KUBERNETES_SERVICE_PORT", "1"),
            ("CNI_TOKEN_REFRESH_DURATION", "10"),
        ]);
        let e = RunConfig::from_args(&[], &env).unwrap_err().to_string();
        assert!(
            e.contains("CNI_TOKEN_REFRESH_DURATION") && e.contains("such as 10m"),
            "{e}"
        );
        let env = env_of(&[
            ("KUBERNETES_SERVICE_HOST", "h"),
            ("KUBERNETES_SERVICE_PORT", "1"),
            ("CNI_TOKEN_REFRESH_DURATION", "10s"),
        ]);
        assert!(RunConfig::from_args(&[], &env)
            .unwrap_err()
            .to_string()
            .contains("at least 1m"));
        let env = env_of(&[
            ("KUBERNETES_SERVICE_HOST", "h"),
            ("KUBERNETES_SERVICE_PORT", "1"),
            ("CNI_TOKEN_REFRESH_DURATION", "10m"),
        ]);
        assert_eq!(
            RunConfig::from_args(&[], &env)
                .unwrap()
                .policy
                .refresh_override,
            Some(Duration::from_secs(600))
        );
    }
}

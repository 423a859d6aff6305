//! `tern-agent run --network-policy` (and `--cluster-network-policy`): its flags and the
//! controller's settings.

use std::time::Duration;

use clap::Args;
use tern_netpol::ruleset::{LogDenied, DEFAULT_LOG_GROUP, DEFAULT_LOG_RATE};

use crate::args::{parse_duration, Switch};

/// The flags of `tern-agent run` for NetworkPolicy.
#[derive(Debug, Clone, Args)]
pub struct NetpolArgs {
    /// Enforce NetworkPolicy for this node's pods in an nftables table, inet tern_netpol (needs
    /// list/watch pods, namespaces, networkpolicies and --node-name; false when another
    /// enforcer runs; true, false, 1 or 0)
    #[arg(
        long,
        value_name = "BOOL",
        default_value = "false",
        env = "TERN_NETWORK_POLICY"
    )]
    pub network_policy: Switch,
    /// Enforce ClusterNetworkPolicy (policy.networking.k8s.io v1alpha2) too: its Admin tier
    /// before NetworkPolicy and its Baseline tier after, in the same table (needs
    /// --network-policy, the CRD installed and list/watch clusternetworkpolicies and nodes;
    /// true, false, 1 or 0)
    #[arg(
        long,
        value_name = "BOOL",
        default_value = "false",
        env = "TERN_CLUSTER_NETWORK_POLICY"
    )]
    pub cluster_network_policy: Switch,
    /// How often the NetworkPolicy table is compared with what was applied, and restored
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub network_policy_resync: Duration,
    /// Log each denied connection's first packet (rate-limited in the kernel) and report it
    /// with the pods and policies that denied it, one line per flow (true, false, 1 or 0)
    #[arg(
        long,
        value_name = "BOOL",
        default_value = "false",
        env = "TERN_NETWORK_POLICY_LOG_DENIED"
    )]
    pub network_policy_log_denied: Switch,
    /// Denied packets logged per second across the node, at most (the kernel's limit; a flood
    /// over it is still dropped, only not logged)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LOG_RATE,
        value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub network_policy_log_rate: u32,
    /// The nfnetlink_log group denied packets are logged to (one listener per group and node)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LOG_GROUP,
        value_parser = clap::value_parser!(u16).range(1..))]
    pub network_policy_log_group: u16,
}

/// Settings of the NetworkPolicy controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetpolConfig {
    /// This node's name: the pods whose rules it keeps.
    pub node_name: String,
    /// The drift check period.
    pub resync: Duration,
    /// `timeoutSeconds` of each watch.
    pub watch_timeout: Duration,
    /// Longest silence on a watch before it counts as dead.
    pub watch_idle: Duration,
    /// `--cluster-network-policy`: ClusterNetworkPolicies (and the Nodes their peers select)
    /// are watched and enforced too.
    pub cluster: bool,
    /// Denied connections logged (`--network-policy-log-denied`): `None`, off.
    pub log_denied: Option<LogDenied>,
}

impl NetpolConfig {
    /// The settings from the flags; `None` without `--network-policy`.
    ///
    /// # Errors
    /// `--network-policy` without a node name, a resync under 100 ms, or
    /// `--cluster-network-policy` or `--network-policy-log-denied` without `--network-policy`.
    pub fn from_args(
        a: &NetpolArgs,
        node_name: Option<&str>,
        watch_timeout: Duration,
    ) -> anyhow::Result<Option<Self>> {
        if !a.network_policy.0 {
            if a.cluster_network_policy.0 {
                anyhow::bail!("--cluster-network-policy needs --network-policy: ClusterNetworkPolicy is enforced in the NetworkPolicy table, by its controller");
            }
            if a.network_policy_log_denied.0 {
                anyhow::bail!("--network-policy-log-denied needs --network-policy");
            }
            return Ok(None);
        }
        let Some(node) = node_name.filter(|n| !n.is_empty()) else {
            anyhow::bail!("--network-policy needs --node-name or NODE_NAME (the downward API's spec.nodeName)");
        };
        if a.network_policy_resync < Duration::from_millis(100) {
            anyhow::bail!("--network-policy-resync must be at least 100ms");
        }
        Ok(Some(NetpolConfig {
            node_name: node.to_owned(),
            resync: a.network_policy_resync,
            watch_timeout,
            watch_idle: Duration::from_secs(180),
            cluster: a.cluster_network_policy.0,
            log_denied: a.network_policy_log_denied.0.then_some(LogDenied {
                group: a.network_policy_log_group,
                rate: a.network_policy_log_rate,
            }),
        }))
    }
}

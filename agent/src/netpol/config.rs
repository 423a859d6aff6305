//! `tern-agent run --network-policy`: its flags and the controller's settings.

use std::time::Duration;

use clap::Args;

use crate::args::{parse_bool, parse_duration};

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
        value_parser = parse_bool,
        action = clap::ArgAction::Set,
        env = "TERN_NETWORK_POLICY"
    )]
    pub network_policy: bool,
    /// How often the NetworkPolicy table is compared with what was applied, and restored
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub network_policy_resync: Duration,
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
}

impl NetpolConfig {
    /// The settings from the flags; `None` without `--network-policy`.
    ///
    /// # Errors
    /// `--network-policy` without a node name, or a resync under 100 ms.
    pub fn from_args(
        a: &NetpolArgs,
        node_name: Option<&str>,
        watch_timeout: Duration,
    ) -> anyhow::Result<Option<Self>> {
        if !a.network_policy {
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
        }))
    }
}

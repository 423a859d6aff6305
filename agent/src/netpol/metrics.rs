//! The NetworkPolicy controller's metrics, encoded from a [`NetpolStats`] at scrape time
//! (`tern_agent_network_policy_*`).
//!
//! Invariant: rendered only when `--network-policy` is on.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::store::NetpolStats;
use super::store::Unreadable;
use crate::prom::{counter, counters, gauge_u64 as gauge, gauges};

/// A collector over one [`NetpolStats`] snapshot.
#[derive(Debug)]
pub struct NetpolCollector(pub NetpolStats);

impl Collector for NetpolCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        table_state(&mut enc, &self.0)?;
        work_done(&mut enc, &self.0)?;
        denied(&mut enc, &self.0)?;
        if self.0.cluster {
            cluster(&mut enc, &self.0)?;
        }
        Ok(())
    }
}

/// ClusterNetworkPolicy (`--cluster-network-policy`): the policies by tier, those in force on
/// this node, those that cannot be read whole.
fn cluster(e: &mut DescriptorEncoder, s: &NetpolStats) -> fmt::Result {
    gauges(
        e,
        "tern_agent_cluster_network_policy_policies",
        "ClusterNetworkPolicies the agent holds (read whole or failed closed), by tier: Admin (before NetworkPolicy), Baseline (after).",
        "tier",
        ["Admin", "Baseline"]
            .into_iter()
            .map(|t| (t, s.cluster_policies.get(t).copied().unwrap_or(0))),
    )?;
    gauge(
        e,
        "tern_agent_cluster_network_policy_in_force",
        "ClusterNetworkPolicies applying to at least one pod of this node (both tiers), as last compiled.",
        s.cluster_policies_in_force,
    )?;
    gauges(
        e,
        "tern_agent_cluster_network_policy_unreadable_policies",
        "ClusterNetworkPolicies that cannot be read whole, by what became of them: rules (those rules fail closed: an Accept matches nothing, a Deny or Pass denies everything), pod_selector (spec.subject unreadable: it applies to no pod).",
        "reason",
        Unreadable::ALL.iter().map(|r| {
            let label = r.label();
            (
                label,
                s.unreadable_cluster_policies.get(label).copied().unwrap_or(0),
            )
        }),
    )
}

/// Denied flows (`--network-policy-log-denied`; families without series when it is off).
fn denied(e: &mut DescriptorEncoder, s: &NetpolStats) -> fmt::Result {
    let mut family = e.encode_descriptor(
        "tern_agent_network_policy_denied",
        "Denied flows (first packets logged by the table, retries folded), by the namespace and name of each NetworkPolicy isolating the end that denied them and the direction (ingress: the destination's policies, egress: the source's).",
        None,
        MetricType::Counter,
    )?;
    for ((namespace, policy, direction), n) in &s.denied.0 {
        let labels = [
            ("namespace", namespace.as_str()),
            ("policy", policy.as_str()),
            ("direction", *direction),
        ];
        ConstCounter::new(*n).encode(family.encode_family(&labels)?)?;
    }
    let r = &s.denied_reader;
    counters(
        e,
        "tern_agent_network_policy_denied_packets",
        "Packets received from the denied-flow log group, by outcome: flow (a new denied flow), repeat (a retry of one), foreign (not the table's).",
        "outcome",
        [
            ("flow", r.packets.saturating_sub(r.repeats + r.foreign)),
            ("repeat", r.repeats),
            ("foreign", r.foreign),
        ],
    )?;
    counter(
        e,
        "tern_agent_network_policy_denied_overflows",
        "Times the denied-flow socket's buffer overflowed (logged packets lost).",
        r.overflows,
    )
}

/// The table as it stands: synced, its size, the policies it enforces, the last sync's time.
fn table_state(e: &mut DescriptorEncoder, s: &NetpolStats) -> fmt::Result {
    gauge(
        e,
        "tern_agent_network_policy_synced",
        "1 once the table was applied after a full list of Pods, Namespaces and NetworkPolicies.",
        u64::from(s.synced),
    )?;
    gauge(
        e,
        "tern_agent_network_policy_rules",
        "Rules in the per-pod chains of inet tern_netpol.",
        s.size.rules,
    )?;
    gauge(
        e,
        "tern_agent_network_policy_set_elements",
        "Elements of the table's sets and verdict maps.",
        s.size.elements,
    )?;
    gauge(
        e,
        "tern_agent_network_policy_isolated_pods",
        "Pods of this node some NetworkPolicy isolates.",
        s.size.pods,
    )?;
    gauge(
        e,
        "tern_agent_network_policy_policies",
        "NetworkPolicies selecting a pod of this node.",
        s.policies,
    )?;
    ConstGauge::new(s.last_sync_seconds).encode(e.encode_descriptor(
        "tern_agent_network_policy_last_sync_seconds",
        "Duration of the last sync (compile and one nft transaction).",
        None,
        MetricType::Gauge,
    )?)?;
    Ok(())
}

/// What the controller did: syncs, compiles, applies, errors, unchanged events, unreadable
/// policies.
fn work_done(e: &mut DescriptorEncoder, s: &NetpolStats) -> fmt::Result {
    ConstCounter::new(s.sync_seconds_sum).encode(e.encode_descriptor(
        "tern_agent_network_policy_sync_seconds",
        "Time spent in syncs (compile and one nft transaction), seconds.",
        None,
        MetricType::Counter,
    )?)?;
    counter(e, "tern_agent_network_policy_syncs", "Syncs made.", s.syncs)?;
    counter(
        e,
        "tern_agent_network_policy_compiles",
        "Runs of the incremental compiler (one per change of what the compiler reads, not per watch event).",
        s.compiles,
    )?;
    counter(
        e,
        "tern_agent_network_policy_pods_compiled",
        "Local pods whose chains a compile made again (a change costs the pods it touches).",
        s.pods_compiled,
    )?;
    counter(
        e,
        "tern_agent_network_policy_sets_compiled",
        "Peer and endpoint sets whose contents a compile gathered again.",
        s.sets_compiled,
    )?;
    counter(
        e,
        "tern_agent_network_policy_applies",
        "Table changes applied (whole replaces and element updates).",
        s.applies,
    )?;
    counter(
        e,
        "tern_agent_network_policy_updates",
        "Of the applies, element adds and deletes in place of a replace.",
        s.updates,
    )?;
    counters(
        e,
        "tern_agent_network_policy_transactions",
        "Table changes applied, by how they reached the kernel: netlink (element moves, sets, chains and rules: one nf_tables batch written by the agent), nft (a script through an exec of nft).",
        "path",
        [
            ("netlink", s.netlink_updates),
            ("nft", s.applies.saturating_sub(s.netlink_updates)),
        ],
    )?;
    counter(
        e,
        "tern_agent_network_policy_netlink_errors",
        "Updates the kernel refused over netlink (the same update then went through nft).",
        s.netlink_errors,
    )?;
    counter(
            e,
            "tern_agent_network_policy_apply_errors",
            "Table changes the kernel refused (a refused update is followed by a replace; a refused replace leaves the previous table).",
            s.apply_errors,
        )?;
    counter(
        e,
        "tern_agent_network_policy_restores",
        "Tables restored after someone else changed them.",
        s.restores,
    )?;
    counters(
        e,
        "tern_agent_network_policy_api_errors",
        "API errors of the watches, by cause.",
        "cause",
        s.api_errors.iter().map(|(k, v)| (*k, *v)),
    )?;
    counters(
        e,
        "tern_agent_network_policy_decode_errors",
        "Objects that could not be read, by kind.",
        "kind",
        s.decode_errors.iter().map(|(k, v)| (*k, *v)),
    )?;
    counters(
            e,
            "tern_agent_network_policy_events_unchanged",
            "Watch events and listed objects that changed nothing the compiler reads (no compile, no nft transaction), by kind.",
            "kind",
            s.events_unchanged.iter().map(|(k, v)| (*k, *v)),
        )?;
    gauges(
            e,
            "tern_agent_network_policy_unreadable_policies",
            "NetworkPolicies that cannot be read whole, by what became of them: rules (the pods they select are isolated and allowed nothing), pod_selector (nothing can be isolated).",
            "reason",
            Unreadable::ALL.iter().map(|r| {
                let label = r.label();
                (label, s.unreadable_policies.get(label).copied().unwrap_or(0))
            }),
        )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchanged_events_compiles_and_unreadable_policies_are_exposed() {
        let mut stats = NetpolStats {
            compiles: 3,
            pods_compiled: 4,
            sets_compiled: 5,
            ..NetpolStats::default()
        };
        stats.events_unchanged.insert("pods", 50);
        stats
            .denied
            .0
            .insert(("shop".into(), "deny-all".into(), "ingress"), 7);
        stats.denied_reader.packets = 9;
        stats.denied_reader.repeats = 2;
        stats.unreadable_policies.insert("rules", 2);
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(NetpolCollector(stats)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "tern_agent_network_policy_compiles_total 3",
            "tern_agent_network_policy_pods_compiled_total 4",
            "tern_agent_network_policy_sets_compiled_total 5",
            "tern_agent_network_policy_events_unchanged_total{kind=\"pods\"} 50",
            "# TYPE tern_agent_network_policy_unreadable_policies gauge",
            "tern_agent_network_policy_unreadable_policies{reason=\"rules\"} 2",
            "tern_agent_network_policy_unreadable_policies{reason=\"pod_selector\"} 0",
            "tern_agent_network_policy_denied_total{namespace=\"shop\",policy=\"deny-all\",direction=\"ingress\"} 7",
            "tern_agent_network_policy_denied_packets_total{outcome=\"flow\"} 7",
            "tern_agent_network_policy_denied_packets_total{outcome=\"repeat\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(!text.contains("cluster_network_policy"), "{text}");
    }

    #[test]
    fn cluster_policies_are_exposed_by_tier_with_the_flag() {
        let mut stats = NetpolStats {
            cluster: true,
            cluster_policies_in_force: 2,
            ..NetpolStats::default()
        };
        stats.cluster_policies.insert("Admin", 3);
        stats.unreadable_cluster_policies.insert("pod_selector", 1);
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(NetpolCollector(stats)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "tern_agent_cluster_network_policy_policies{tier=\"Admin\"} 3",
            "tern_agent_cluster_network_policy_policies{tier=\"Baseline\"} 0",
            "tern_agent_cluster_network_policy_in_force 2",
            "tern_agent_cluster_network_policy_unreadable_policies{reason=\"pod_selector\"} 1",
            "tern_agent_cluster_network_policy_unreadable_policies{reason=\"rules\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}

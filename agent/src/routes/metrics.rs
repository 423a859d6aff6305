//! The route controller's metrics, encoded by prometheus-client from a [`RouteStats`] at scrape
//! time (`tern_agent_node_routes_*`).
//!
//! Invariant: rendered only when `--node-routes` is on; counters end in `_total` (added by the
//! encoder).

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::RouteStats;
use crate::prom::{counter, gauge_u64 as gauge};

/// The reasons of `tern_agent_node_routes_unrouted`, always all reported.
pub const SKIP_REASONS: [&str; 5] = [
    "not_connected",
    "no_internal_ip",
    "bad_cidr",
    "conflict",
    "no_vtep",
];

/// A collector over one [`RouteStats`] snapshot.
#[derive(Debug)]
pub struct RouteCollector(pub RouteStats);

fn labelled<'a>(
    enc: &mut DescriptorEncoder,
    (name, help, kind): (&str, &str, MetricType),
    label: &str,
    values: impl IntoIterator<Item = (&'a str, u64)>,
) -> fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, kind)?;
    for (k, v) in values {
        let labels = [(label, k)];
        let m = family.encode_family(&labels)?;
        if matches!(kind, MetricType::Gauge) {
            ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)).encode(m)?;
        } else {
            ConstCounter::new(v).encode(m)?;
        }
    }
    Ok(())
}

/// The VXLAN series (0 with host-gw).
fn vxlan(e: &mut DescriptorEncoder, s: &RouteStats) -> fmt::Result {
    gauge(
        e,
        "tern_agent_node_routes_vxlan_peers",
        "With --node-routes=vxlan: other nodes with an FDB entry on tern's VXLAN device.",
        s.vxlan_peers,
    )?;
    counter(
        e,
        "tern_agent_node_routes_vxlan_writes",
        "With --node-routes=vxlan: neighbour and FDB entries written or removed.",
        s.vxlan_writes,
    )?;
    counter(
        e,
        "tern_agent_node_routes_vxlan_published",
        "With --node-routes=vxlan: times this node's VTEP MAC was written to its Node.",
        s.vxlan_published,
    )
}

impl Collector for RouteCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let s = &self.0;
        let e = &mut enc;
        gauge(
            e,
            "tern_agent_node_routes_installed",
            "Routes to other nodes' podCIDRs that tern keeps in the table.",
            s.installed,
        )?;
        gauge(
            e,
            "tern_agent_node_routes_nodes",
            "Nodes known from the API server.",
            s.nodes,
        )?;
        gauge(
            e,
            "tern_agent_node_routes_synced",
            "1 once the first node list has been applied.",
            u64::from(s.synced),
        )?;
        vxlan(e, s)?;
        counter(e, "tern_agent_node_routes_added", "Routes added.", s.added)?;
        counter(
            e,
            "tern_agent_node_routes_moved",
            "Routes replaced because a node's podCIDR or InternalIP changed.",
            s.moved,
        )?;
        counter(
            e,
            "tern_agent_node_routes_removed",
            "Routes removed (node deleted or moved, or stale at start-up).",
            s.removed,
        )?;
        counter(
            e,
            "tern_agent_node_routes_failed",
            "Route operations the kernel refused.",
            s.failed,
        )?;
        counter(
            e,
            "tern_agent_node_routes_lists",
            "Full node lists (start-up and after 410 Gone).",
            s.lists,
        )?;
        counter(
            e,
            "tern_agent_node_routes_watches",
            "Node watches opened.",
            s.watches,
        )?;
        labelled(
            e,
            (
                "tern_agent_node_routes_unrouted",
                "podCIDRs of other nodes left unrouted, by reason.",
                MetricType::Gauge,
            ),
            "reason",
            SKIP_REASONS
                .iter()
                .map(|r| (*r, s.skipped.get(r).copied().unwrap_or(0))),
        )?;
        labelled(
            e,
            (
                "tern_agent_node_routes_watch_events",
                "Node watch events by type.",
                MetricType::Counter,
            ),
            "type",
            s.events.iter().map(|(k, v)| (*k, *v)),
        )?;
        labelled(
            e,
            (
                "tern_agent_node_routes_events_unchanged",
                "Node watch events and listed Nodes that changed nothing the routes read (dropped by the watch layer).",
                MetricType::Counter,
            ),
            "kind",
            [("nodes", s.events_unchanged)],
        )?;
        labelled(
            e,
            (
                "tern_agent_node_routes_api_errors",
                "Failed node lists and watches, by cause.",
                MetricType::Counter,
            ),
            "cause",
            s.api_errors.iter().map(|(k, v)| (*k, *v)),
        )
    }
}

//! `/metrics`: the agent's state in the Prometheus text format, encoded by prometheus-client from a
//! [`Snapshot`] at scrape time, so the endpoint and the snapshot never disagree.
//!
//! Invariant: names carry their unit (`_seconds`, `_timestamp_seconds`) and counters end in
//! `_total` (added by the encoder); a gauge with no value yet is left out, not reported as 0.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric as _};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::Snapshot;
use crate::prom::counters;

/// The `Content-Type` of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The results of `tern_agent_token_requests_total`, always all reported (0 until seen) so that
/// rates exist from the first scrape.
pub const REQUEST_RESULTS: [&str; 6] = [
    "success",
    "unauthorized",
    "throttled",
    "unavailable",
    "timeout",
    "error",
];

#[derive(Debug)]
struct SnapshotCollector(Snapshot, Histogram);

fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: Option<i64>) -> fmt::Result {
    if let Some(v) = v {
        ConstGauge::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
    }
    Ok(())
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let s = &self.0;
        gauge(
            &mut enc,
            "tern_agent_token_expiry_timestamp_seconds",
            "Expiry of the CNI token in the kubeconfig (Unix seconds).",
            s.token_expiry,
        )?;
        gauge(
            &mut enc,
            "tern_agent_last_success_timestamp_seconds",
            "Time of the last successful refresh (Unix seconds).",
            s.last_success,
        )?;
        gauge(
            &mut enc,
            "tern_agent_next_attempt_timestamp_seconds",
            "When the next refresh attempt is due (Unix seconds).",
            s.next_attempt,
        )?;
        gauge(
            &mut enc,
            "tern_agent_consecutive_failures",
            "Refresh attempts failed in a row.",
            Some(i64::from(s.consecutive_failures)),
        )?;
        gauge(
            &mut enc,
            "tern_agent_token_granted_seconds",
            "Lifetime the API server granted for the current token.",
            s.granted_seconds,
        )?;
        counters(
            &mut enc,
            "tern_agent_refreshes",
            "Successful token refreshes by trigger.",
            "trigger",
            s.refreshes.iter().map(|(k, v)| (*k, *v)),
        )?;
        counters(
            &mut enc,
            "tern_agent_refresh_failures",
            "Failed token refreshes by cause.",
            "cause",
            s.failures.iter().map(|(k, v)| (*k, *v)),
        )?;
        counters(
            &mut enc,
            "tern_agent_channel_requests",
            "Agent channel requests by outcome.",
            "outcome",
            s.channel.iter().map(|(k, v)| (*k, *v)),
        )?;
        counters(
            &mut enc,
            "tern_agent_token_requests",
            "TokenRequests sent to the API server, by result.",
            "result",
            REQUEST_RESULTS
                .iter()
                .map(|r| (*r, s.token_requests.get(r).copied().unwrap_or(0))),
        )?;
        let latency = &self.1;
        latency.encode(enc.encode_descriptor(
            "tern_agent_token_request_duration_seconds",
            "TokenRequest latency, from sending to the answer or the deadline.",
            None,
            MetricType::Histogram,
        )?)
    }
}

/// Labels of `tern_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    /// tern's version as the binary's stamp holds it ([`tern_node::version::version`]).
    version: &'static str,
}

/// The metrics text (OpenMetrics, which Prometheus reads): `tern_build_info`, the plugins' verb
/// families, the agent's state in `snap`, the TokenRequest latency histogram and, with
/// `--node-routes`, the route controller's state and, with `--network-policy`, the
/// NetworkPolicy controller's.
pub fn render(
    snap: Snapshot,
    latency: &Histogram,
    routes: Option<crate::routes::RouteStats>,
    netpol: Option<crate::netpol::NetpolStats>,
    verbs: &super::verbs::VerbMetrics,
) -> String {
    let mut registry = Registry::default();
    registry.register(
        "tern_build",
        "The running tern-agent's build: its version as a label, value 1.",
        Info::new(BuildLabels {
            version: tern_node::version::version(),
        }),
    );
    verbs.register(&mut registry);
    registry.register_collector(Box::new(SnapshotCollector(snap, latency.clone())));
    if let Some(r) = routes {
        registry.register_collector(Box::new(crate::routes::metrics::RouteCollector(r)));
    }
    if let Some(n) = netpol {
        registry.register_collector(Box::new(crate::netpol::metrics::NetpolCollector(n)));
    }
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// The chart's Grafana dashboard (`deploy/helm/tern/dashboards/tern.json`) against what
/// [`render`] serves: every metric a panel's query names is a family the agent serves, with the
/// suffix its type gives a sample (`_total` of a counter, `_bucket`/`_sum`/`_count` of a
/// histogram, `_info` of an info, none of a gauge).
#[cfg(test)]
mod dashboard {
    use std::collections::BTreeMap;

    const DASHBOARD: &str = include_str!("../../../deploy/helm/tern/dashboards/tern.json");

    /// Every family `render` serves with every subsystem on, by name: its type.
    fn served() -> BTreeMap<String, String> {
        let h = prometheus_client::metrics::histogram::Histogram::new([0.1]);
        let snap = super::Snapshot {
            token_expiry: Some(1),
            last_success: Some(1),
            next_attempt: Some(1),
            granted_seconds: Some(1),
            ..super::Snapshot::default()
        };
        let text = super::render(
            snap,
            &h,
            Some(crate::routes::RouteStats::default()),
            Some(crate::netpol::NetpolStats::default()),
            &super::super::verbs::VerbMetrics::default(),
        );
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .map(|(n, t)| (n.to_owned(), t.to_owned()))
            .collect()
    }

    /// The `tern_*` names in a PromQL expression.
    fn names(expr: &str) -> Vec<&str> {
        let mut out = Vec::new();
        let mut rest = expr;
        while let Some(at) = rest.find("tern_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            out.push(&tail[..end]);
            rest = &tail[end..];
        }
        out
    }

    /// The family a sample name belongs to, if `served` has it with a type that fits.
    fn family<'a>(sample: &'a str, served: &BTreeMap<String, String>) -> Option<&'a str> {
        let by_type = [
            ("counter", "_total"),
            ("histogram", "_bucket"),
            ("histogram", "_sum"),
            ("histogram", "_count"),
            ("info", "_info"),
        ];
        for (ty, suffix) in by_type {
            if let Some(f) = sample.strip_suffix(suffix) {
                if served.get(f).is_some_and(|t| t == ty) {
                    return Some(f);
                }
            }
        }
        served
            .get(sample)
            .is_some_and(|t| t == "gauge")
            .then_some(sample)
    }

    #[test]
    fn every_panel_queries_metrics_the_agent_serves() {
        let served = served();
        let d: serde_json::Value = serde_json::from_str(DASHBOARD).unwrap();
        let mut queried = 0;
        for p in d["panels"].as_array().unwrap() {
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"].as_str().unwrap();
                let found = names(expr);
                assert!(
                    !found.is_empty(),
                    "{}: no tern metric in {expr}",
                    p["title"]
                );
                for n in found {
                    assert!(
                        family(n, &served).is_some(),
                        "{}: {n} is not served as such (served: {served:?})",
                        p["title"]
                    );
                    queried += 1;
                }
            }
        }
        assert!(queried > 30, "{queried}");
        // The check can fail: a counter without its suffix, a name the agent does not serve.
        assert!(family("tern_agent_network_policy_compiles", &served).is_none());
        assert!(family("tern_agent_no_such_metric", &served).is_none());
        assert!(family("tern_agent_network_policy_compiles_total", &served).is_some());
    }
}

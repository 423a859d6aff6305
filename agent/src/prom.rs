//! Encoding one gauge, one counter or one labelled counter or gauge family with
//! prometheus-client: the pieces `/metrics` (`run/metrics.rs`) and the controllers' collectors
//! (`routes/metrics.rs`, `netpol/metrics.rs`) share.
//!
//! Invariant: a leaf — it imports no other module of the agent, so every collector may use it
//! without an import circle (`tests/module_graph.rs`).

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

/// Encodes the gauge `name` at `v`, saturated at `i64::MAX` (the encoder's gauges are signed).
pub(crate) fn gauge_u64(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: u64,
) -> fmt::Result {
    let v = i64::try_from(v).unwrap_or(i64::MAX);
    ConstGauge::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// Encodes the counter `name` at `v` (`_total` added by the encoder).
pub(crate) fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    ConstCounter::new(v).encode(enc.encode_descriptor(name, help, None, MetricType::Counter)?)
}

/// Encodes the counter family `name`: one series per `(value, count)` of `values`, labelled
/// `label="value"`.
pub(crate) fn counters<'a>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    values: impl IntoIterator<Item = (&'a str, u64)>,
) -> fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (k, v) in values {
        ConstCounter::new(v).encode(family.encode_family(&[(label, k)])?)?;
    }
    Ok(())
}

/// Encodes the gauge family `name`: one series per `(value, level)` of `values`, labelled
/// `label="value"`.
pub(crate) fn gauges<'a>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    values: impl IntoIterator<Item = (&'a str, u64)>,
) -> fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (k, v) in values {
        let v = i64::try_from(v).unwrap_or(i64::MAX);
        ConstGauge::new(v).encode(family.encode_family(&[(label, k)])?)?;
    }
    Ok(())
}

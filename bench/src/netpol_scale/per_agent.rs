//! The timed changes' figures per agent: the table with one row per agent (first sync, RSS, CPU
//! per change, each kind's p50 / p90 / p99), and nft's CPU per change with the drift check's
//! listings left out (one costs seconds of nft CPU, a change's transaction a few ms, and the
//! harness cannot tell them apart but by size).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::changes::{Latencies, BOUNDS, KINDS};
use super::{say, Opts};
use crate::stats::pct;

/// What the timed changes measured in each agent: CPU per change (own, nft's children), ms; and
/// the latencies (ms) by kind.
#[derive(Default)]
pub(crate) struct PerAgent {
    pub(crate) own: Vec<f64>,
    pub(crate) child: Vec<f64>,
    pub(crate) listings: Vec<f64>,
    /// By bound ([`super::changes::BOUNDS`]).
    pub(crate) lat: [BTreeMap<&'static str, Vec<Vec<f64>>>; 3],
}

/// One table per bound ([`super::changes::BOUNDS`]), one row per agent: first sync, RSS, CPU per
/// change and each kind's p50 / p90 / p99.
pub(crate) fn rows(
    first: &[f64],
    rss_sync: &[f64],
    end: &[f64],
    hwm: &[f64],
    per: &PerAgent,
    out: &mut String,
) {
    for (b, bound) in super::changes::BOUNDS.iter().enumerate() {
        let _ = writeln!(out, "\nchange → kernel {bound}:");
        bound_rows(first, rss_sync, end, hwm, per, b, out);
    }
}

fn bound_rows(
    first: &[f64],
    rss_sync: &[f64],
    end: &[f64],
    hwm: &[f64],
    per: &PerAgent,
    b: usize,
    out: &mut String,
) {
    let kinds: Vec<&str> = per.lat[b].keys().copied().collect();
    let _ = writeln!(out, "\n| agent | first sync s | VmRSS after it / end / peak MiB | CPU per change own / nft ms (drift listings left out; how many) | {} |", kinds.iter().map(|k| format!("{k} p50 / p90 / p99 ms")).collect::<Vec<_>>().join(" | "));
    let _ = writeln!(out, "|{}", " --- |".repeat(4 + kinds.len()));
    for k in 0..first.len() {
        let at = |v: &[f64]| v.get(k).copied().unwrap_or(f64::NAN);
        let lat: Vec<String> = kinds
            .iter()
            .map(|kind| {
                let v = per.lat[b]
                    .get(kind)
                    .and_then(|p| p.get(k))
                    .cloned()
                    .unwrap_or_default();
                format!(
                    "{:.0} / {:.0} / {:.0}",
                    pct(&v, 50.0),
                    pct(&v, 90.0),
                    pct(&v, 99.0)
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "| {k} | {:.1} | {:.1} / {:.1} / {:.1} | {:.2} / {:.2}; {:.0} | {} |",
            at(first),
            at(rss_sync),
            at(end),
            at(hwm),
            at(&per.own),
            at(&per.child),
            at(&per.listings),
            lat.join(" | ")
        );
    }
}

/// A window's children CPU above this (s) held a drift-check listing (2-3 s of nft at shape A),
/// not a change's transaction (a few ms).
pub(crate) const LISTING: f64 = 0.5;

/// Each agent's nft children CPU per change (ms) over the windows without a listing, and how
/// many windows held one.
pub(crate) fn nft_per_change(windows: &[Vec<(f64, f64)>], agents: usize) -> (Vec<f64>, Vec<f64>) {
    (0..agents)
        .map(|k| {
            let d: Vec<f64> = windows
                .iter()
                .filter_map(|w| w.get(k).map(|c| c.1))
                .collect();
            let kept: Vec<f64> = d.iter().copied().filter(|x| *x <= LISTING).collect();
            let mean = kept.iter().sum::<f64>() / kept.len().max(1) as f64 * 1000.0;
            (mean, (d.len() - kept.len()) as f64)
        })
        .unzip()
}

/// The changes' latencies by kind and bound (and OUT/latencies.tsv), and the marker writes'
/// own time.
pub(crate) fn latency_rows(lat: &Latencies, o: &Opts, out: &mut String, agents: usize) {
    let mut tsv = String::from("bound\tkind\tagent\tms\n");
    for (b, bound) in BOUNDS.iter().enumerate() {
        for (kind, per) in &lat.per_agent[b] {
            for (k, v) in per.iter().enumerate() {
                for ms in v {
                    let _ = writeln!(tsv, "{bound}\t{kind}\t{k}\t{ms:.3}");
                }
            }
        }
    }
    let _ = std::fs::write(o.out.join("latencies.tsv"), tsv);
    let _ = writeln!(out, "| change → kernel, by kind ({} changes each, × {agents} agents): p50 / p90 / p99 / max ms; worst agent's p99; missed; {} | |", o.shape.changes, BOUNDS.join(" | "));
    for kind in KINDS {
        let mut cells = Vec::new();
        for b in 0..BOUNDS.len() {
            cells.push(spread_line(&lat.all(b, kind), &lat.per_agent[b], kind));
        }
        let line = format!(
            "{}; missed {}",
            cells.join(" ‖ "),
            lat.missed.get(kind).unwrap_or(&0)
        );
        say(&format!("  {kind}: {line}"));
        let _ = writeln!(out, "| {kind} ({}) | {line} |", BOUNDS.join(" ‖ "));
    }
    let w: Vec<String> = KINDS
        .iter()
        .map(|k| {
            let v = lat.write_ms.get(k).cloned().unwrap_or_default();
            format!("{k} {:.1} / {:.1}", pct(&v, 50.0), pct(&v, 99.0))
        })
        .collect();
    let _ = writeln!(out, "| the marker write's own time, start to answer (one kept-alive connection), p50 / p99 ms | {} |", w.join("; "));
    let _ = writeln!(
        out,
        "| changes the harness's own watch did not see | {} |",
        lat.unseen
    );
}

/// `v`'s p50 / p90 / p99 / max and the worst agent's p99 (`per`: by kind, per agent).
pub(crate) fn spread_line(
    v: &[f64],
    per: &std::collections::BTreeMap<&'static str, Vec<Vec<f64>>>,
    kind: &str,
) -> String {
    let worst = per
        .get(kind)
        .map(|p| p.iter().map(|x| pct(x, 99.0)).fold(f64::NAN, f64::max))
        .unwrap_or(f64::NAN);
    format!(
        "{:.0} / {:.0} / {:.0} / {:.0}; {worst:.0}",
        pct(v, 50.0),
        pct(v, 90.0),
        pct(v, 99.0),
        pct(v, 100.0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_with_a_listing_is_left_out_of_nft_per_change() {
        // Agent 0: three changes of 4, 6 and 2,500 ms of nft (a listing); agent 1: 10 ms each.
        let w = vec![
            vec![(0.001, 0.004), (0.001, 0.010)],
            vec![(0.001, 0.006), (0.001, 0.010)],
            vec![(0.001, 2.5), (0.001, 0.010)],
        ];
        let (nft, listings) = nft_per_change(&w, 2);
        assert!((nft[0] - 5.0).abs() < 1e-9 && (nft[1] - 10.0).abs() < 1e-9);
        assert_eq!(listings, [1.0, 0.0]);
    }
}

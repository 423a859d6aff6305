//! The relist phase (`--relist N`): with every agent's first table in, the API server is killed,
//! etcd's revision moved past every agent's resourceVersion and compacted (as `tern-bench scale`'s
//! phase 5), and the server started again, so every agent's watches end in 410 Gone and every
//! kind is listed again (Pods: all of them, paged). While the agents' Pods relist is in progress,
//! changes keep coming — a policy created, updated and deleted, a namespace labelled (waited for
//! one at a time), and a pod labelled (written without waiting: a Pod change waits for the Pods
//! list by design, the list being a snapshot older than it) — timed as the changes phase times
//! them ([`super::changes`]), beside the same kinds in steady state. Then, from the listener's
//! record of the relist, the kernel's losses: a transaction that replaced the table, or a deleted
//! element that no change of this phase explains (every change's marker is its own, so any other
//! element deleted was still true in the API).
//!
//! Each agent's relist, from its own log: the Pods watch's 410 (`listing again`) to the Pods
//! `listed` line; a change counts as made during an agent's relist when its marker write started
//! before that agent's list ended.

use std::fmt::Write as _;
use std::thread;
use std::time::{Duration, Instant};

use super::api_watch::ApiWatch;
use super::changes::{landed, seen, write, Latencies, Written, BOUNDS};
use super::monitor::{Monitor, Tx};
use super::say;
use crate::cluster::api::{now, Api};
use crate::cluster::writer::Writer;
use crate::cluster::{compact_etcd, hwm_kib, Cluster};
use crate::stats::pct;
use crate::Res;

/// The kinds made during the relist and waited for one at a time, in order.
const WAITED: [&str; 4] = ["polcreate", "nslabel", "polupdate", "poldelete"];

/// A log line's time (epoch s) from its RFC 3339 prefix (`2026-12-06T20:33:10.639602Z`).
pub(crate) fn log_time(line: &str) -> Option<f64> {
    let stamp = line.split_whitespace().next()?;
    let (whole, frac) = match stamp.trim_end_matches('Z').split_once('.') {
        Some((w, f)) => (format!("{w}Z"), format!("0.{f}")),
        None => (stamp.to_owned(), "0".to_owned()),
    };
    let secs = tern_kube::time::parse_rfc3339(&whole).ok()?;
    Some(secs as f64 + frac.parse::<f64>().ok()?)
}

/// The agent's Pods relist after `t0`, from its log: when its watch met 410 and when the list
/// that followed was in the store.
pub(crate) fn pods_relist(log: &str, t0: f64) -> (Option<f64>, Option<f64>) {
    let pods = |l: &&str| l.contains("kind=\"pods\"");
    let after = |l: &&str| log_time(l).is_some_and(|t| t >= t0);
    let mut lines = log.lines().filter(after).filter(pods);
    let start = lines
        .by_ref()
        .find(|l| l.contains("listing again"))
        .and_then(log_time);
    let end = lines.find(|l| l.contains(": listed ")).and_then(log_time);
    (start, end)
}

/// What the kernel lost over a window: transactions that replaced the table, and elements
/// deleted that are no change's marker (with a few of them).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Losses {
    pub(crate) replaced: usize,
    pub(crate) other_deleted: usize,
    pub(crate) sample: Vec<String>,
}

/// The losses in `txs`.
pub(crate) fn losses(txs: &[Tx]) -> Losses {
    let mut l = Losses::default();
    for t in txs {
        l.replaced += usize::from(t.replace);
        l.other_deleted += t.other_deleted;
        for s in &t.other_sample {
            if l.sample.len() < 5 {
                l.sample.push(s.clone());
            }
        }
    }
    l
}

/// One change of the phase and what came of it.
struct Made {
    w: Written,
    got: Vec<Option<f64>>,
    seen: Option<f64>,
}

/// Splits the changes by whether each agent was still relisting Pods when the change's marker
/// write started (`ends`: each agent's relist end).
fn split(made: &[Made], ends: &[f64]) -> (Latencies, Latencies) {
    let (mut during, mut after) = (Latencies::default(), Latencies::default());
    for m in made {
        let mask: Vec<bool> = ends.iter().map(|e| m.w.start < *e).collect();
        during.record_for(&m.w, &m.got, m.seen, &mask);
        let rest: Vec<bool> = mask.iter().map(|b| !b).collect();
        after.record_for(&m.w, &m.got, m.seen, &rest);
    }
    (during, after)
}

/// Kills and restarts the API server with etcd compacted past the agents; returns the revision.
fn restart_compacted(c: &Cluster, api: &Api) -> Res<String> {
    c.bash("stop_apiserver")?;
    let rev = compact_etcd()?;
    // start_apiserver waits 90 s for /readyz; at shape B its caches take longer: wait here.
    let _ = c.bash("start_apiserver --service-account-max-token-expiration 1h || true");
    let end = Instant::now() + Duration::from_secs(900);
    while api.get("/readyz").is_err() {
        if Instant::now() > end {
            return Err("the API server not ready 900 s after its restart".into());
        }
        thread::sleep(Duration::from_millis(500));
    }
    Ok(rev)
}

/// Each agent's Pods relist after `t0` from its log (start, end), NaN where not seen.
fn windows(c: &Cluster, agents: usize, t0: f64) -> Vec<(f64, f64)> {
    (0..agents)
        .map(|k| {
            let log = std::fs::read_to_string(c.agent_dir(k).join("log")).unwrap_or_default();
            let (s, e) = pods_relist(&log, t0);
            (s.unwrap_or(f64::NAN), e.unwrap_or(f64::NAN))
        })
        .collect()
}

/// The phase (see the module doc); `fixtures`: the first fixture index of its own and how many.
pub(crate) fn measure(
    c: &Cluster,
    (api, writer): (&Api, &Writer),
    mons: &[Monitor],
    watch: &ApiWatch,
    (first, count): (usize, usize),
    out: &mut String,
) -> Res<()> {
    let n = mons.len();
    let pids: Vec<u32> = (0..n).map(|k| c.pid(&c.agent_dir(k))).collect::<Res<_>>()?;
    let hwm0: Vec<u64> = pids.iter().map(|&p| hwm_kib(p)).collect();
    say("relist: API server killed, etcd compacted past the agents, server restarted");
    let t0 = now();
    let rev = restart_compacted(c, api)?;
    let up = now() - t0;
    let end = Instant::now() + Duration::from_secs(600);
    while windows(c, n, t0).iter().any(|w| w.0.is_nan()) {
        if Instant::now() > end {
            return Err("relist: not every agent's Pods watch met 410 within 600 s".into());
        }
        thread::sleep(Duration::from_millis(50));
    }
    say(&format!(
        "  etcd compacted at {rev}; server ready {up:.1} s after the kill; every agent relisting Pods"
    ));
    let (mut made, mut pending) = (Vec::new(), Vec::new());
    let timeout = Duration::from_secs(300);
    for fixture in first..first + count {
        if windows(c, n, t0).iter().all(|w| !w.1.is_nan()) {
            break;
        }
        pending.push(write(writer, "label", fixture)?);
        for kind in WAITED {
            let w = write(writer, kind, fixture)?;
            let got = landed(mons, &w, Instant::now() + timeout);
            let s = seen(watch, &w);
            made.push(Made { w, got, seen: s });
        }
    }
    for w in pending {
        let got = landed(mons, &w, Instant::now() + timeout);
        let s = seen(watch, &w);
        made.push(Made { w, got, seen: s });
    }
    let end = Instant::now() + timeout;
    while windows(c, n, t0).iter().any(|w| w.1.is_nan()) && Instant::now() < end {
        thread::sleep(Duration::from_millis(200));
    }
    thread::sleep(Duration::from_secs(5));
    let win = windows(c, n, t0);
    let hwm1: Vec<u64> = pids.iter().map(|&p| hwm_kib(p)).collect();
    let ends: Vec<f64> = win.iter().map(|w| w.1).collect();
    let (during, after) = split(&made, &ends);
    write_rows(&win, t0, &during, &after, out);
    for (k, m) in mons.iter().enumerate() {
        let txs: Vec<Tx> = m
            .since(t0)
            .into_iter()
            .filter(|t| t.start <= ends[k] + 5.0 || ends[k].is_nan())
            .collect();
        let l = losses(&txs);
        let _ = writeln!(out, "| relist, agent {k}: Pods relist {:.1} s after the kill, {:.1} s long; the kernel over it: transactions {}, table replaced {}, elements deleted that no change explains {} {:?}; VmHWM {:.1} → {:.1} MiB |",
            win[k].0 - t0, win[k].1 - win[k].0, txs.len(), l.replaced, l.other_deleted, l.sample,
            hwm0[k] as f64 / 1024.0, hwm1[k] as f64 / 1024.0);
    }
    let _ = writeln!(out, "| relist: etcd compacted at revision {rev}; the API server ready {up:.1} s after the kill; changes made {} | |", made.len());
    Ok(())
}

/// The changes made during the relist and after it, by kind and bound.
fn write_rows(
    win: &[(f64, f64)],
    t0: f64,
    during: &Latencies,
    after: &Latencies,
    out: &mut String,
) {
    let _ = writeln!(out, "\n| the relist phase | |\n| --- | --- |");
    let _ = writeln!(out, "| relist: changes during each agent's Pods relist (its 410 at {:?} s, its list in at {:?} s after the kill): p50 / p90 / p99 / max ms, n; {} | |",
        win.iter().map(|w| format!("{:.1}", w.0 - t0)).collect::<Vec<_>>(),
        win.iter().map(|w| format!("{:.1}", w.1 - t0)).collect::<Vec<_>>(),
        BOUNDS.join(" ‖ "));
    for (what, lat) in [("during", during), ("after", after)] {
        for kind in ["label", "polcreate", "polupdate", "poldelete", "nslabel"] {
            let cells: Vec<String> = (0..BOUNDS.len())
                .map(|b| {
                    let v = lat.all(b, kind);
                    format!(
                        "{:.0} / {:.0} / {:.0} / {:.0}, {}",
                        pct(&v, 50.0),
                        pct(&v, 90.0),
                        pct(&v, 99.0),
                        pct(&v, 100.0),
                        v.len()
                    )
                })
                .collect();
            if lat.all(0, kind).is_empty() && lat.missed.get(kind).copied().unwrap_or(0) == 0 {
                continue;
            }
            let line = format!(
                "{}; missed {}",
                cells.join(" ‖ "),
                lat.missed.get(kind).unwrap_or(&0)
            );
            say(&format!("  relist, {what}: {kind}: {line}"));
            let _ = writeln!(out, "| relist, {what} the Pods relist: {kind} | {line} |");
        }
    }
}

#[cfg(test)]
#[path = "relist_tests.rs"]
mod tests;

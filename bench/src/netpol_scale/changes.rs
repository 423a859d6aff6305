//! The timed changes: each one API write, timed to the first transaction of each agent's table
//! that shows it (the nf_tables listener in the agent's netns) from three instants ([`BOUNDS`]);
//! and the status churn, writes the compiler should not see (0 compiles, 0 transactions).
//!
//! Invariant: one change at a time; the next starts after every agent showed the last (or its
//! timeout), so a transaction is never credited to the wrong change.

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use super::api_watch::ApiWatch;
use super::monitor::Monitor;
use super::objects::{fixture_ip, newpeer, newpol_spec, policy, PodSpec, Rng};
use crate::cluster::api::Api;
use crate::cluster::api::Write;
use crate::cluster::writer::Writer;
use crate::Res;

/// The kinds of change, in the order they run for each fixture c.
pub(crate) const KINDS: [&str; 7] = [
    "label",
    "newpod",
    "delpod",
    "polcreate",
    "polupdate",
    "poldelete",
    "nslabel",
];

/// Where a change's latency is timed from: the marker write's answer read (a lower bound: the
/// server sends the watch event as it answers), its start (an upper bound: the request over a
/// kept-alive connection, [`Writer`]), and the harness's own watch receiving the event
/// ([`ApiWatch`]: committed and sent to watchers).
pub(crate) const BOUNDS: [&str; 3] = ["from return", "from start", "from seen"];

/// Latencies (ms) per bound (in [`BOUNDS`]' order) and kind, one list per agent; `missed` per
/// kind: agents that did not show the change within the timeout.
#[derive(Default, Debug)]
pub(crate) struct Latencies {
    pub(crate) per_agent: [BTreeMap<&'static str, Vec<Vec<f64>>>; 3],
    pub(crate) missed: BTreeMap<&'static str, usize>,
    /// The marker write's own time, start to answer (ms), per kind.
    pub(crate) write_ms: BTreeMap<&'static str, Vec<f64>>,
    /// Changes the harness's watch did not see (no "from seen" for them).
    pub(crate) unseen: usize,
    /// Per change, each agent's CPU seconds over its window (the write to the settle's end):
    /// its own and its waited-for children's (nft).
    pub(crate) cpu: Vec<Vec<(f64, f64)>>,
}

impl Latencies {
    /// Every agent's latencies of `kind` from bound `b`, together.
    pub(crate) fn all(&self, b: usize, kind: &str) -> Vec<f64> {
        self.per_agent[b]
            .get(kind)
            .map(|p| p.concat())
            .unwrap_or_default()
    }
}

/// The write of change KIND on fixture c, the marker it puts in (or takes out of) the tables,
/// and whether the marker should be present after it.
fn change(kind: &str, c: usize) -> Res<(Vec<Write>, String, bool)> {
    let pol = "/apis/networking.k8s.io/v1/namespaces/np-free/networkpolicies";
    Ok(match kind {
        "label" => (
            vec![Write::merge(
                format!("/api/v1/namespaces/np-free/pods/peer-{c}"),
                &json!({"metadata": {"labels": {"role": "peer"}}}),
            )],
            fixture_ip(1, c),
            true,
        ),
        "newpod" => {
            let p: PodSpec = newpeer(c);
            (vec![p.create(), p.status()], fixture_ip(2, c), true)
        }
        "delpod" => (
            vec![Write::delete(format!(
                "/api/v1/namespaces/np-free/pods/newpeer-{c}?gracePeriodSeconds=0"
            ))],
            fixture_ip(2, c),
            false,
        ),
        "polcreate" => (
            vec![policy(
                "np-free",
                &format!("newpol-{c}"),
                newpol_spec(c, 16),
            )],
            format!("172.16.{c}.0/24"),
            true,
        ),
        "polupdate" => (
            vec![Write::merge(
                format!("{pol}/newpol-{c}"),
                &json!({"spec": newpol_spec(c, 17)}),
            )],
            format!("172.17.{c}.0/24"),
            true,
        ),
        "poldelete" => (
            vec![Write::delete(format!("{pol}/newpol-{c}"))],
            format!("172.17.{c}.0/24"),
            false,
        ),
        "nslabel" => (
            vec![Write::merge(
                format!("/api/v1/namespaces/np-nsl-{c}"),
                &json!({"metadata": {"labels": {"peer": "yes"}}}),
            )],
            fixture_ip(3, c),
            true,
        ),
        _ => return Err(format!("no change kind {kind}")),
    })
}

/// The collection, object name and watch event type that show change `kind` on fixture c.
fn event_of(kind: &str, c: usize) -> (&'static str, String, &'static str) {
    match kind {
        "label" => ("pods", format!("peer-{c}"), "MODIFIED"),
        "newpod" => ("pods", format!("newpeer-{c}"), "MODIFIED"),
        "delpod" => ("pods", format!("newpeer-{c}"), "DELETED"),
        "polcreate" => ("networkpolicies", format!("newpol-{c}"), "ADDED"),
        "polupdate" => ("networkpolicies", format!("newpol-{c}"), "MODIFIED"),
        "poldelete" => ("networkpolicies", format!("newpol-{c}"), "DELETED"),
        _ => ("namespaces", format!("np-nsl-{c}"), "MODIFIED"),
    }
}

/// A change written: its kind and fixture, the marker it puts in (or takes out of) the tables,
/// the first write's start (where transactions are looked for) and the marker write's (the
/// last) start and return, epoch s.
#[derive(Clone, Debug)]
pub(crate) struct Written {
    pub(crate) kind: &'static str,
    pub(crate) c: usize,
    mark: String,
    present: bool,
    first: f64,
    pub(crate) start: f64,
    pub(crate) ret: f64,
}

/// Writes change `kind` on fixture c.
pub(crate) fn write(api: &Writer, kind: &'static str, c: usize) -> Res<Written> {
    let (writes, mark, present) = change(kind, c)?;
    let (mut first, mut start, mut ret) = (f64::NAN, 0.0, 0.0);
    for w in &writes {
        let (b, a) = api.one(w)?;
        if first.is_nan() {
            first = b;
        }
        (start, ret) = (b, a);
    }
    Ok(Written {
        kind,
        c,
        mark,
        present,
        first,
        start,
        ret,
    })
}

/// Each agent's kernel transaction that shows `w` (epoch s, its first message), waited for up to
/// `end`; `None` for an agent that did not show it by then.
pub(crate) fn landed(mons: &[Monitor], w: &Written, end: Instant) -> Vec<Option<f64>> {
    let mut got: Vec<Option<f64>> = vec![None; mons.len()];
    loop {
        for (k, m) in mons.iter().enumerate() {
            if got[k].is_none() {
                got[k] = m.find(w.first, &w.mark, w.present).map(|t| t.start);
            }
        }
        if got.iter().all(Option::is_some) || Instant::now() >= end {
            return got;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// When the harness's watch saw `w` (epoch s).
pub(crate) fn seen(watch: &ApiWatch, w: &Written) -> Option<f64> {
    let (collection, name, ty) = event_of(w.kind, w.c);
    watch.seen(collection, &name, ty, w.first)
}

impl Latencies {
    /// Records `w`, which each agent showed at `got` (the harness's watch at `seen`).
    pub(crate) fn record(&mut self, w: &Written, got: &[Option<f64>], seen: Option<f64>) {
        self.record_for(w, got, seen, &vec![true; got.len()]);
    }

    /// [`Latencies::record`] for the agents where `mask` holds (the others are left out, as
    /// if they had not been asked).
    pub(crate) fn record_for(
        &mut self,
        w: &Written,
        got: &[Option<f64>],
        seen: Option<f64>,
        mask: &[bool],
    ) {
        let kind = w.kind;
        if !mask.iter().any(|m| *m) {
            return;
        }
        self.write_ms
            .entry(kind)
            .or_default()
            .push((w.ret - w.start) * 1000.0);
        self.unseen += usize::from(seen.is_none());
        let from = [w.ret, w.start, seen.unwrap_or(f64::NAN)];
        for (b, t0) in from.iter().enumerate() {
            let per = self.per_agent[b]
                .entry(kind)
                .or_insert_with(|| vec![Vec::new(); got.len()]);
            for (k, g) in got.iter().enumerate() {
                if let Some(t) = g.filter(|_| mask[k] && !t0.is_nan()) {
                    per[k].push((t - t0) * 1000.0);
                }
            }
        }
        let missed = got.iter().zip(mask).filter(|(g, m)| **m && g.is_none());
        *self.missed.entry(kind).or_default() += missed.count();
    }
}

/// Runs C changes of every kind, each waited for in every agent's table for up to `timeout`;
/// `cpu` reads each agent's (own, children's) CPU seconds.
pub(crate) fn run(
    api: &Writer,
    mons: &[Monitor],
    watch: &ApiWatch,
    changes: usize,
    timeout: Duration,
    cpu: &dyn Fn() -> Vec<(f64, f64)>,
) -> Res<Latencies> {
    let mut lat = Latencies::default();
    for c in 0..changes {
        for kind in KINDS {
            let cpu0 = cpu();
            let w = write(api, kind, c)?;
            let got = landed(mons, &w, Instant::now() + timeout);
            lat.record(&w, &got, seen(watch, &w));
            // Let the agents settle (a coalesced second sync must not land in the next window).
            thread::sleep(Duration::from_millis(300));
            let cpu1 = cpu();
            let d = cpu1.iter().zip(&cpu0).map(|(a, b)| (a.0 - b.0, a.1 - b.1));
            lat.cpu.push(d.collect());
        }
        println!("[netpol-scale]   change round {} of {changes} done", c + 1);
    }
    Ok(lat)
}

/// One status write of the churn: the Ready condition flipped (what a kubelet writes when a
/// readiness probe flips; status_manager writes only on a change), phase and addresses as they
/// were, so the compiler reads no change.
fn churn_write(p: &PodSpec, i: usize) -> Write {
    let t = format!(
        "2026-12-06T{:02}:{:02}:{:02}Z",
        (i / 3600) % 24,
        (i / 60) % 60,
        i % 60
    );
    let ready = if i.is_multiple_of(2) { "True" } else { "False" };
    Write::merge(
        format!("/api/v1/namespaces/{}/pods/{}/status", p.ns, p.name),
        &json!({"status": {"phase": "Running", "podIP": p.ip, "podIPs": [{"ip": p.ip}],
            "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": t}]}}),
    )
}

/// RATE status writes per second for SECS seconds over random pods of `pods`; returns how many
/// were written.
pub(crate) fn status_churn(
    api: &Api,
    pods: &[PodSpec],
    rate: usize,
    secs: u64,
    seed: u64,
) -> Res<usize> {
    let mut r = Rng::new(seed);
    let mut n = 0;
    let t0 = Instant::now();
    for s in 0..secs {
        let ws: Vec<Write> = (0..rate)
            .map(|j| churn_write(&pods[r.below(pods.len())], (s as usize) * rate + j + 1))
            .collect();
        api.bulk_quiet(&ws, 1)?;
        n += ws.len();
        let next = Duration::from_secs(s + 1);
        if let Some(wait) = next.checked_sub(t0.elapsed()) {
            thread::sleep(wait);
        }
    }
    Ok(n)
}

#[cfg(test)]
impl Written {
    /// A change of `kind` whose marker write started at `start` and returned 5 ms later.
    pub(crate) fn at(kind: &'static str, start: f64) -> Written {
        Written {
            kind,
            c: 0,
            mark: String::new(),
            present: true,
            first: start,
            start,
            ret: start + 0.005,
        }
    }
}

//! The timed changes: each one API write, timed from its curl's return to the first transaction
//! of each agent's table that shows it (the nf_tables listener in the agent's netns); and the status
//! churn, writes the compiler should not see (0 compiles, 0 transactions).
//!
//! Invariant: one change at a time; the next starts after every agent showed the last (or its
//! timeout), so a transaction is never credited to the wrong change.

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use super::monitor::Monitor;
use super::objects::{fixture_ip, newpeer, newpol_spec, policy, PodSpec, Rng};
use crate::cluster::api::Api;
use crate::cluster::api::Write;
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

/// Latencies (ms) per kind, one per agent per change; `missed` per kind: agents that did not
/// show the change within the timeout.
#[derive(Default, Debug)]
pub(crate) struct Latencies {
    pub(crate) ms: BTreeMap<&'static str, Vec<f64>>,
    pub(crate) per_agent: BTreeMap<&'static str, Vec<Vec<f64>>>,
    pub(crate) missed: BTreeMap<&'static str, usize>,
    /// Per change, each agent's CPU seconds over its window (the write to the settle's end):
    /// its own and its waited-for children's (nft).
    pub(crate) cpu: Vec<Vec<(f64, f64)>>,
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

/// Runs C changes of every kind, each waited for in every agent's table for up to `timeout`;
/// `cpu` reads each agent's (own, children's) CPU seconds.
pub(crate) fn run(
    api: &Api,
    mons: &[Monitor],
    changes: usize,
    timeout: Duration,
    cpu: &dyn Fn() -> Vec<(f64, f64)>,
) -> Res<Latencies> {
    let mut lat = Latencies::default();
    for c in 0..changes {
        for kind in KINDS {
            let cpu0 = cpu();
            let (writes, mark, present) = change(kind, c)?;
            let mut t_before = 0.0;
            let mut t_after = 0.0;
            for (i, w) in writes.iter().enumerate() {
                let (b, a) = api.one(w)?;
                if i == 0 {
                    t_before = b;
                }
                t_after = a;
            }
            let end = Instant::now() + timeout;
            let mut got: Vec<Option<f64>> = vec![None; mons.len()];
            while got.iter().any(Option::is_none) && Instant::now() < end {
                for (k, m) in mons.iter().enumerate() {
                    if got[k].is_none() {
                        got[k] = m
                            .find(t_before, &mark, present)
                            .map(|t| (t.start - t_after) * 1000.0);
                    }
                }
                thread::sleep(Duration::from_millis(20));
            }
            let per = lat
                .per_agent
                .entry(kind)
                .or_insert_with(|| vec![Vec::new(); mons.len()]);
            for (k, g) in got.iter().enumerate() {
                match g {
                    Some(ms) => {
                        lat.ms.entry(kind).or_default().push(*ms);
                        per[k].push(*ms);
                    }
                    None => *lat.missed.entry(kind).or_default() += 1,
                }
            }
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

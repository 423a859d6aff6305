//! Timed phases: N pods through a subject at a given parallelism (ADD phase, then DEL phase), each
//! worker a thread in the host netns.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tern_net::netns::NetNs;

use crate::chain::{chain_add, chain_del};
use crate::env::Env;
use crate::exec::{invoke, with_prev};
use crate::subjects::Subject;
use crate::Res;

/// Latencies of one phase plus its wall time.
#[derive(Debug, Default)]
pub(crate) struct Phase {
    pub(crate) lat: Vec<Duration>,
    pub(crate) wall: Duration,
}

pub(crate) fn pct(v: &[Duration], p: f64) -> f64 {
    let ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    crate::stats::pct(&ms, p * 100.0)
}

/// Splits `items` into `n` round-robin chunks.
pub(crate) fn chunks<T: Clone>(items: &[T], n: usize) -> Vec<Vec<T>> {
    let mut out = vec![Vec::new(); n];
    for (i, it) in items.iter().enumerate() {
        out[i % n].push(it.clone());
    }
    out
}

/// Runs `work(item)` for every item on `par` workers, each a scoped thread inside the host netns,
/// started together; returns every latency and the wall time from start to the last finish.
pub(crate) fn run_parallel<T: Clone + Send + Sync>(
    host: &NetNs,
    items: &[T],
    par: usize,
    work: &(dyn Fn(&T) -> Res<Duration> + Sync),
) -> Res<Phase> {
    let parts = chunks(items, par);
    let barrier = Barrier::new(parts.len() + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .iter()
            .map(|part| {
                let barrier = &barrier;
                s.spawn(move || -> Res<Vec<Duration>> {
                    host.run_in(|| {
                        barrier.wait();
                        part.iter().map(work).collect::<Res<Vec<_>>>()
                    })
                    .map_err(|e| e.to_string())?
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        let mut lat = Vec::with_capacity(items.len());
        let mut first_err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(v)) => lat.extend(v),
                Ok(Err(e)) => first_err = first_err.or(Some(e)),
                Err(_) => first_err = first_err.or(Some("worker panicked".to_owned())),
            }
        }
        let wall = t0.elapsed();
        match first_err {
            Some(e) => Err(e),
            None => Ok(Phase { lat, wall }),
        }
    })
}

/// One row of the table.
#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) label: &'static str,
    pub(crate) par: usize,
    pub(crate) pods: usize,
    pub(crate) add: Phase,
    pub(crate) del: Phase,
    pub(crate) kdel: Phase,
    /// The kernel's veth creation timed alone (first row of each parallelism only).
    pub(crate) kadd: Phase,
}

impl Row {
    pub(crate) fn pods_per_sec(&self) -> f64 {
        self.pods as f64 / (self.add.wall + self.del.wall).as_secs_f64()
    }
}

/// ADD then DEL of `pods` fresh pods at parallelism `par`; every pod netns made before and deleted
/// after the timed phases. On an ADD failure, DELs what may exist before returning the error.
pub(crate) fn bench_subject(
    env: &mut Env,
    subj: &Subject,
    pods: usize,
    par: usize,
    round: &str,
) -> Res<(Phase, Phase)> {
    let names = env.make_pods(pods)?;
    let r = bench_subject_on(env, subj, &names, par, round);
    env.drop_pods(&names);
    r
}

/// The container ID of pod `i` of `round` for `subj` (also the pod name in the stand-in).
pub(crate) fn container_id(subj: &Subject, tag: &str, round: &str, i: usize) -> String {
    format!("{}-{tag}-{round}-{i}", subj.label.replace(['/', '+'], "-"))
}

/// [`bench_subject`] on pod netns `names`, made by the caller. For a lookup subject, checks that
/// the stand-in saw exactly one GET of each pod during the ADD phase.
pub(crate) fn bench_subject_on(
    env: &Env,
    subj: &Subject,
    names: &[String],
    par: usize,
    round: &str,
) -> Res<(Phase, Phase)> {
    if subj.on_iface {
        env.add_ifaces(names)?;
    }
    // (container ID, netns path, CNI_ARGS)
    let items: Vec<(String, String, String)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| -> Res<_> {
            let cid = container_id(subj, &env.tag, round, i);
            let args = if subj.lookup {
                env.pod_args(&cid)?
            } else {
                String::new()
            };
            Ok((cid, format!("/run/netns/{n}"), args))
        })
        .collect::<Res<_>>()?;
    if subj.lookup {
        env.take_pod_gets();
    }
    let (added, gets, deleted) = if let [step] = subj.steps.as_slice() {
        let cp = subj.cni_path.as_str();
        let add = |(cid, ns, args): &(String, String, String)| {
            let stdin = with_prev(&step.conf, subj.first_prev(ns).as_ref())?;
            invoke(&step.binary, "ADD", cid, ns, cp, args, &stdin)
        };
        let del = |(cid, ns, args): &(String, String, String)| {
            let stdin = with_prev(&step.conf, subj.first_prev(ns).as_ref())?;
            invoke(&step.binary, "DEL", cid, ns, cp, args, &stdin)
        };
        let added = run_parallel(&env.host_ns, &items, par, &add);
        let gets = env.take_pod_gets();
        (added, gets, run_parallel(&env.host_ns, &items, par, &del))
    } else {
        let results: Mutex<HashMap<String, Value>> = Mutex::default();
        let add = |(cid, ns, args): &(String, String, String)| {
            let (took, res) = chain_add(subj, cid, ns, args)?;
            if let Ok(mut m) = results.lock() {
                m.insert(cid.clone(), res);
            }
            Ok(took)
        };
        let added = run_parallel(&env.host_ns, &items, par, &add);
        let gets = env.take_pod_gets();
        let cached = results.into_inner().unwrap_or_default();
        let del = |(cid, ns, args): &(String, String, String)| {
            chain_del(subj, cid, ns, args, cached.get(cid))
        };
        (added, gets, run_parallel(&env.host_ns, &items, par, &del))
    };
    let (added, deleted) = (added?, deleted?);
    if subj.lookup {
        let (total, odd) = gets;
        env.lookup_gets.fetch_add(total, Ordering::Relaxed);
        env.lookup_adds.fetch_add(items.len(), Ordering::Relaxed);
        if total != items.len() || !odd.is_empty() {
            return Err(format!(
                "{} round {round}: the stand-in saw {total} pod GETs for {} ADDs (paths not GET exactly once: {odd:?})",
                subj.label,
                items.len()
            ));
        }
    }
    Ok((added, deleted))
}

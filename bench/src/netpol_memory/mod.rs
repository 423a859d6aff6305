//! `tern-bench --netpol-memory`: where tern-agent's memory goes with the NetworkPolicy engine on,
//! in process, at fleet scale (shape B by default: 5,000 Nodes, 150,000 Pods, 5,000 policies in
//! 500 namespaces; the cluster `tern-bench netpol-scale` loads, same generator and seed).
//!
//! What it runs is the agent's own path, not a model of it: tern-watch's `Reflector` per kind
//! against a scripted API ([`objects`]: each page's JSON body made as kube-apiserver sends it and
//! decoded by the client's own page decoder), its store, and a subscriber that feeds the agent's
//! NetworkPolicy store (`tern_agent::netpol::store::Store`, the engine inside) as the agent's
//! does; then the engine's first flush and the table's replace script. After each stage it
//! prints the bytes live (a counting allocator around the system one, musl's in a release build)
//! and VmRSS; and the peak of each.
//!
//! Usage: `tern-bench --netpol-memory [--nodes 5000] [--pods 150000] [--policies 5000]
//! [--namespaces PODS/300] [--seed 31]`. Run each size in a fresh process (RSS does not shrink).

mod alloc;
mod objects;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_agent::netpol::store::Store;
use tern_kube::client::objects::ObjectPage;
use tern_kube::KubeError;
use tern_netpol::model::{Namespace, PolicyRead};
use tern_watch::{Api, Change, Connect, Consumer, Control, Events, PodObject, Reflector, Relisted};

use crate::netpol_scale::objects::{namespaces, pods, policies, Rng, Shape};

#[global_allocator]
static HEAP: alloc::Counting = alloc::Counting;

/// One kind's objects as the scripted server lists them.
type Items = Arc<dyn Fn(usize) -> serde_json::Value + Send + Sync>;

struct Scripted {
    n: usize,
    item: Items,
}

impl Api for Scripted {
    fn list_page(&self, _: &str, cont: Option<&str>) -> Result<ObjectPage, KubeError> {
        objects::page(self.n, cont, &*self.item)
    }

    fn watch(&self, _: &str, _: &str) -> Result<Box<dyn Events + Send>, KubeError> {
        Err(KubeError::Connect("the bench lists only".into()))
    }
}

/// Stops the reflector once its first list is in.
struct Once(Arc<AtomicBool>);

impl Control for Once {
    fn is_stopped(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    fn delay(&mut self, _: &mut u32, _: &KubeError) -> Duration {
        Duration::ZERO
    }
    fn sleep(&self, _: Duration) -> bool {
        true
    }
}

/// How the agent's subscriber puts one object of a kind into its store.
type Put<T> = fn(&mut Store, &str, &Arc<T>);

struct Feed<T> {
    store: Arc<Mutex<Store>>,
    put: Put<T>,
    done: Arc<AtomicBool>,
}

impl<T: PartialEq> Consumer<T> for Feed<T> {
    fn replaced(&mut self, watched: &tern_watch::Store<T>, _: &Relisted<T>) {
        println!(
            "  {} in the watch store, before the engine: live {:.1} MiB",
            watched.len(),
            alloc::live() as f64 / MIB
        );
        let mut st = self.store.lock().unwrap_or_else(|e| e.into_inner());
        for (key, v) in watched.iter() {
            (self.put)(&mut st, key, v);
        }
        self.done.store(true, Ordering::SeqCst);
    }
    fn changed(&mut self, _: &tern_watch::Store<T>, _: &Change<T>) {}
}

fn put_pod(st: &mut Store, key: &str, p: &Arc<PodObject>) {
    st.put_pod(key, Some(p));
}

fn put_namespace(st: &mut Store, key: &str, n: &Arc<Namespace>) {
    st.engine.set_namespace(key, Some(n));
}

fn put_policy(st: &mut Store, key: &str, p: &Arc<PolicyRead>) {
    let policy = match &**p {
        PolicyRead::Read(p) | PolicyRead::Closed { policy: p, .. } => Some(Arc::clone(p)),
        PolicyRead::Unreadable { .. } => None,
    };
    st.engine.set_policy(key, policy);
}

/// Lists `n` objects of `kind` through the reflector into `store`; the reflector (its store)
/// is returned, as the agent keeps it.
fn list<T: PartialEq + Send + Sync + 'static>(
    kind: tern_watch::Kind<T>,
    n: usize,
    item: Items,
    store: &Arc<Mutex<Store>>,
    put: Put<T>,
) -> Reflector<T> {
    let done = Arc::new(AtomicBool::new(false));
    let feed = Feed {
        store: Arc::clone(store),
        put,
        done: Arc::clone(&done),
    };
    let mut r = Reflector::new(kind, vec![Box::new(feed)]);
    let connect: Box<Connect> = Box::new(move || {
        Ok(Box::new(Scripted {
            n,
            item: Arc::clone(&item),
        }) as Box<dyn Api>)
    });
    r.run(&*connect, &mut Once(done));
    r
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

const MIB: f64 = 1024.0 * 1024.0;

/// Prints one stage: live bytes, their delta from `before`, the peak since the last stage, RSS.
fn stage(name: &str, before: &mut usize, started: Instant) {
    let live = alloc::live();
    println!(
        "{name:<44} live {:8.1} MiB ({:+7.1}), peak {:8.1} MiB; VmRSS {:7.1} MiB, VmHWM {:7.1} MiB; {:5.1} s",
        live as f64 / MIB,
        (live as f64 - *before as f64) / MIB,
        alloc::peak() as f64 / MIB,
        status_kib("VmRSS:") as f64 / 1024.0,
        status_kib("VmHWM:") as f64 / 1024.0,
        started.elapsed().as_secs_f64(),
    );
    *before = live;
    alloc::reset_peak();
}

fn parse(args: &[String]) -> Result<Shape, String> {
    let mut s = Shape {
        nodes: 5000,
        agents: 1,
        pods: 150_000,
        local: 30,
        policies: 5000,
        namespaces: 0,
        changes: 3,
        relist: 0,
        adds: 0,
        seed: 31,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let n: usize = v.parse().map_err(|e| format!("{flag} {v}: {e}"))?;
        match flag.as_str() {
            "--nodes" => s.nodes = n.max(1),
            "--pods" => s.pods = n,
            "--policies" => s.policies = n,
            "--namespaces" => s.namespaces = n,
            "--seed" => s.seed = n as u64,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if s.namespaces == 0 {
        s.namespaces = (s.pods / 300).max(1);
    }
    Ok(s)
}

/// Runs the bench; the exit code.
pub fn main(args: &[String]) -> i32 {
    let s = match parse(args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tern-bench --netpol-memory: {e}");
            return 2;
        }
    };
    let mut r = Rng::new(s.seed);
    let ns_writes: Vec<_> = namespaces(&s)
        .into_iter()
        .filter(|w| w.path == "/api/v1/namespaces")
        .collect();
    let pod_specs = Arc::new(pods(&s, &mut r));
    let pol_writes = Arc::new(policies(&s, &mut r));
    println!(
        "shape: {} nodes, {} pods ({} on the agent's node), {} policies, {} namespaces",
        s.nodes,
        pod_specs.len(),
        s.local + 1,
        pol_writes.len(),
        ns_writes.len()
    );
    let started = Instant::now();
    let mut before = alloc::live();
    stage(
        "the bench's own objects (the generator)",
        &mut before,
        started,
    );
    // TERN_BENCH_NODE: another node's view (one with no pods: the engine's sets stay empty).
    let node = std::env::var("TERN_BENCH_NODE").unwrap_or_else(|_| "agent-000".into());
    let store = Arc::new(Mutex::new(Store::new(&node, None, false)));
    let ns_writes = Arc::new(ns_writes);
    let nw = Arc::clone(&ns_writes);
    let namespaces_r = list(
        tern_watch::kinds::NAMESPACES,
        ns_writes.len(),
        Arc::new(move |i| objects::listed(&nw[i].path, &nw[i].body, i)),
        &store,
        put_namespace,
    );
    let pw = Arc::clone(&pol_writes);
    let policies_r = list(
        tern_watch::kinds::POLICIES,
        pol_writes.len(),
        Arc::new(move |i| objects::listed(&pw[i].path, &pw[i].body, i)),
        &store,
        put_policy,
    );
    stage(
        "namespaces and policies listed, in the engine",
        &mut before,
        started,
    );
    let ps = Arc::clone(&pod_specs);
    let pods_r = list(
        tern_watch::kinds::PODS,
        pod_specs.len(),
        Arc::new(move |i| objects::pod(&ps[i], i)),
        &store,
        put_pod,
    );
    stage(
        "pods listed: the watch store and the engine",
        &mut before,
        started,
    );
    let script_len = {
        let mut st = store.lock().unwrap_or_else(|e| e.into_inner());
        let f = st.engine.flush();
        let whole = st.engine.table().replace_script();
        (f.script.len(), whole.len())
    };
    stage(
        "the engine's first flush (table kept)",
        &mut before,
        started,
    );
    println!(
        "first flush: script {} kB, replace script {} kB; objects: {} pods, {} namespaces, {} policies in the watch stores",
        script_len.0 / 1000,
        script_len.1 / 1000,
        reflected(&pods_r),
        reflected(&namespaces_r),
        reflected(&policies_r),
    );
    drop(pods_r);
    stage(
        "the watch store of pods dropped (engine keeps)",
        &mut before,
        started,
    );
    0
}

fn reflected<T: PartialEq + Send + Sync>(r: &Reflector<T>) -> u64 {
    r.stats().lock().map(|s| s.objects).unwrap_or(0)
}

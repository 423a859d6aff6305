//! `tern-bench --netpol-compile`: the NetworkPolicy compiler of one node at fleet scale, in
//! process (no API server, no kernel): the incremental engine (`tern_netpol::Engine`, what the
//! agent runs) beside the full compile it replaced (`compile` + `render` + the diff of two
//! tables, what every change cost before), per kind of change, printing the ratio.
//!
//! The cluster (Cilium's scale shape by default: 1,000 nodes, 30,000 Pods, 30,000 policies):
//! `--namespaces` namespaces labelled `team=t<i % 10>`, Pods spread evenly over them and at
//! random over `--nodes` nodes (node `n0` is the agent's), each labelled `app=a<0..10>`; per
//! namespace an equal share of the policies, each selecting one app and allowing from another
//! app of its namespace on TCP 8080; every tenth also from the namespaces of one team, every
//! tenth an egress to `10.96.0.0/12` on UDP 53. Deterministic per `--seed`.
//!
//! Usage: `tern-bench --netpol-compile [--nodes N] [--pods P] [--policies Q] [--namespaces S]
//! [--changes C] [--full F] [--seed X]`. Prints the first build, per kind of change the engine's
//! p50/p99 (µs, wall time of `set_*` + `flush` on one thread: its CPU time) and the full
//! compile's p50 over `--full` samples, their ratio, and the process's RSS after loading.

use std::sync::Arc;
use std::time::Instant;

use crate::stats::pct;
use serde_json::json;
use tern_netpol::model::{policy_from_json, Labels, Namespace, Pod, Policy};
use tern_netpol::ruleset::{render, update_script};
use tern_netpol::{compile, Engine, World};

mod local;

pub(crate) struct Shape {
    pub(crate) nodes: usize,
    pub(crate) pods: usize,
    pub(crate) policies: usize,
    pub(crate) namespaces: usize,
    pub(crate) changes: usize,
    pub(crate) full: usize,
    pub(crate) seed: u64,
}

/// xorshift64*.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1) as u64) as usize
    }
}

pub(crate) fn parse(args: &[String]) -> Result<Shape, String> {
    let mut s = Shape {
        nodes: 1000,
        pods: 30_000,
        policies: 30_000,
        namespaces: 1000,
        changes: 200,
        full: 3,
        seed: 7,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let n: u64 = v.parse().map_err(|e| format!("{flag} {v}: {e}"))?;
        let n_usize = usize::try_from(n).map_err(|e| e.to_string())?;
        match flag.as_str() {
            "--nodes" => s.nodes = n_usize.max(1),
            "--pods" => s.pods = n_usize,
            "--policies" => s.policies = n_usize,
            "--namespaces" => s.namespaces = n_usize.max(1),
            "--changes" => s.changes = n_usize.max(1),
            "--full" => s.full = n_usize,
            "--seed" => s.seed = n,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(s)
}

pub(crate) fn pod(r: &mut Rng, shape: &Shape, i: usize) -> Pod {
    let ns = format!("ns{}", i % shape.namespaces);
    let node = format!("n{}", r.below(shape.nodes));
    let ip = format!("10.{}.{}.{}", 64 + i / 65_536, (i / 256) % 256, i % 256);
    Pod {
        namespace: ns.into(),
        name: format!("p{i}"),
        uid: format!("u{i}"),
        labels: Labels::from([("app".to_owned(), format!("a{}", r.below(10)))]),
        node: node.into(),
        ips: ip.parse().into_iter().collect(),
        ports: Default::default(),
    }
}

pub(crate) fn policy(r: &mut Rng, shape: &Shape, i: usize, version: usize) -> Option<Policy> {
    let ns = format!("ns{}", i % shape.namespaces);
    let (sel, from) = (r.below(10), r.below(10));
    let mut peers = vec![json!({"podSelector": {"matchLabels": {"app": format!("a{from}")}}})];
    if i.is_multiple_of(10) {
        let team = format!("t{}", r.below(10));
        peers.push(json!({"namespaceSelector": {"matchLabels": {"team": team}}}));
    }
    let mut spec = json!({"podSelector": {"matchLabels": {"app": format!("a{sel}")}},
        "ingress": [{"from": peers, "ports": [{"port": 8080 + version}]}]});
    if i % 10 == 5 {
        spec["policyTypes"] = json!(["Ingress", "Egress"]);
        spec["egress"] = json!([{"to": [{"ipBlock": {"cidr": "10.96.0.0/12"}}], "ports": [{"port": 53, "protocol": "UDP"}]}]);
    }
    policy_from_json(
        &json!({"metadata": {"namespace": ns, "name": format!("np{i}")}, "spec": spec}),
    )
    .ok()
}

pub(crate) fn namespace(i: usize) -> Namespace {
    let name = format!("ns{i}");
    Namespace {
        labels: Labels::from([
            ("kubernetes.io/metadata.name".to_owned(), name.clone()),
            ("team".to_owned(), format!("t{}", i % 10)),
        ]),
        name,
    }
}

/// The cluster as the API holds it.
pub(crate) struct Cluster {
    pub(crate) pods: Vec<Pod>,
    pub(crate) namespaces: Vec<Namespace>,
    pub(crate) policies: Vec<Policy>,
}

impl Cluster {
    fn full_table(&self) -> tern_netpol::ruleset::Table {
        render(&compile(&World {
            node: "n0",
            pods: &self.pods,
            namespaces: &self.namespaces,
            policies: &self.policies,
            ..World::default()
        }))
        .0
    }
}

pub(crate) fn key(p: &Pod) -> String {
    format!("{}/{}", p.namespace, p.name)
}

pub(crate) fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

pub(crate) const KINDS: [&str; 13] = [
    "status write (nothing the compiler reads)",
    "remote pod relabelled",
    "local pod relabelled",
    "remote pod created",
    "local pod created (an admission)",
    "remote pod deleted",
    "policy created, no local pod selected",
    "policy changed (its ports)",
    "namespace relabelled",
    "policy created, selecting a local pod",
    "policy deleted (one the row above made)",
    "ipBlock policy created, local pod selected",
    "ipBlock policy deleted (the row above's)",
];

/// One change of `kind` made to the cluster and the engine; the engine's time, µs, and its
/// flush (the script, and the element-only plan when there is one).
pub(crate) fn change(
    kind: usize,
    r: &mut Rng,
    shape: &Shape,
    c: &mut Cluster,
    e: &mut Engine,
    n: usize,
) -> (f64, tern_netpol::engine::Flush) {
    let start = Instant::now();
    match kind {
        0 => {
            let p = &c.pods[r.below(c.pods.len())];
            e.set_pod(&key(p), Some(Arc::new(p.clone())));
        }
        1 | 2 => {
            let want_local = kind == 2;
            let i = (0..64)
                .map(|_| r.below(c.pods.len()))
                .find(|&i| (c.pods[i].node == "n0") == want_local)
                .unwrap_or(0);
            let app = format!("a{}", r.below(10));
            c.pods[i].labels.insert("app".into(), app);
            let p = c.pods[i].clone();
            e.set_pod(&key(&p), Some(Arc::new(p)));
        }
        3 | 4 => {
            let mut p = pod(r, shape, shape.pods + n * 10 + kind);
            if kind == 4 {
                p.node = "n0".into();
            } else if p.node == "n0" {
                p.node = "n1".into();
            }
            e.set_pod(&key(&p), Some(Arc::new(p.clone())));
            c.pods.push(p);
        }
        5 => {
            let i = (0..64)
                .map(|_| r.below(c.pods.len()))
                .find(|&i| c.pods[i].node != "n0")
                .unwrap_or(0);
            let p = c.pods.swap_remove(i);
            e.set_pod(&key(&p), None);
        }
        6 => {
            if let Some(mut p) = policy(r, shape, shape.policies + n, 0) {
                p.pod_selector
                    .match_labels
                    .insert("app".into(), "nobody".into());
                e.set_policy(
                    &format!("{}/{}", p.namespace, p.name),
                    Some(Arc::new(p.clone())),
                );
                c.policies.push(p);
            }
        }
        7 => {
            let i = r.below(c.policies.len());
            if let Some(p) = policy(r, shape, i, 1 + n % 7) {
                e.set_policy(
                    &format!("{}/{}", p.namespace, p.name),
                    Some(Arc::new(p.clone())),
                );
                c.policies[i] = p;
            }
        }
        9 | 11 => local::policy_for_local_pod(r, shape, c, e, n, kind == 11),
        10 | 12 => local::delete_policy_for_local_pod(r, c, e, n, kind == 12),
        _ => {
            let i = r.below(c.namespaces.len());
            let team = format!("t{}", r.below(10));
            c.namespaces[i].labels.insert("team".into(), team);
            let ns = c.namespaces[i].clone();
            e.set_namespace(&ns.name, Some(&ns));
        }
    }
    let f = e.flush();
    (start.elapsed().as_secs_f64() * 1e6, f)
}

/// The cluster of `shape`, the generator after it, and the RSS before any engine.
pub(crate) fn cluster(shape: &Shape) -> (Rng, Cluster, u64) {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ shape.seed);
    let c = Cluster {
        pods: (0..shape.pods).map(|i| pod(&mut r, shape, i)).collect(),
        namespaces: (0..shape.namespaces).map(namespace).collect(),
        policies: (0..shape.policies)
            .filter_map(|i| policy(&mut r, shape, i, 0))
            .collect(),
    };
    let rss0 = rss_kib();
    (r, c, rss0)
}

/// An engine of node `n0` holding every object of `c`, and its first flush.
pub(crate) fn engine(c: &Cluster) -> (Engine, tern_netpol::engine::Flush) {
    let mut e = Engine::new("n0");
    for n in &c.namespaces {
        e.set_namespace(&n.name, Some(n));
    }
    for p in &c.pods {
        e.set_pod(&key(p), Some(Arc::new(p.clone())));
    }
    for p in &c.policies {
        e.set_policy(
            &format!("{}/{}", p.namespace, p.name),
            Some(Arc::new(p.clone())),
        );
    }
    let first = e.flush();
    (e, first)
}

/// Runs the bench; the exit status.
pub fn main(args: &[String]) -> i32 {
    let shape = match parse(args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tern-bench --netpol-compile: {e}");
            return 2;
        }
    };
    let (mut r, mut c, rss0) = cluster(&shape);
    let start = Instant::now();
    let (mut e, first) = engine(&c);
    let build = start.elapsed().as_secs_f64();
    let size = e.size();
    println!(
        "shape: {} nodes, {} pods ({} on n0), {} policies ({} in force on n0), {} namespaces",
        shape.nodes,
        c.pods.len(),
        c.pods.iter().filter(|p| p.node == "n0").count(),
        c.policies.len(),
        e.policies_in_force(),
        shape.namespaces
    );
    println!(
        "first build: {build:.3} s; table {} sets, {} chains, {} elements, script {} kB; RSS {} MiB (the engine: +{} MiB beside the bench's own copy of the objects)",
        size.sets,
        size.chains,
        size.elements,
        first.script.len() / 1024,
        rss_kib() / 1024,
        rss_kib().saturating_sub(rss0) / 1024
    );
    let full_once = |c: &Cluster| {
        let t = Instant::now();
        let before = c.full_table();
        let _ = update_script(&before, &c.full_table());
        t.elapsed().as_secs_f64() * 1e3 / 2.0
    };
    println!(
        "{:<44} {:>10} {:>10} {:>12} {:>10}",
        "change", "p50 µs", "p99 µs", "full p50 ms", "full/p50"
    );
    for (kind, what) in KINDS.iter().enumerate() {
        let v: Vec<f64> = (0..shape.changes)
            .map(|n| change(kind, &mut r, &shape, &mut c, &mut e, n).0)
            .collect();
        let (p50, p99) = (pct(&v, 50.0), pct(&v, 99.0));
        let full: Vec<f64> = (0..shape.full).map(|_| full_once(&c)).collect();
        let f50 = pct(&full, 50.0);
        let ratio = if p50 > 0.0 { f50 * 1e3 / p50 } else { 0.0 };
        println!("{what:<44} {p50:>10.1} {p99:>10.1} {f50:>12.1} {ratio:>9.0}x");
    }
    let same = c.full_table() == *e.table();
    println!("engine's table equals a full compile after every change: {same}");
    i32::from(!same)
}

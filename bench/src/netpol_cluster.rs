//! `tern-bench --netpol-cluster`: ClusterNetworkPolicy beside NetworkPolicy in one node's
//! engine at fleet scale, change → kernel, in process (no API server: the real-API-server
//! harness, `netpol-scale`, is too heavy to share this machine with): `--netpol-compile`'s
//! cluster (shape A by default: 1,000 nodes, 30,000 Pods, 30,000 NetworkPolicies; node `n0` is
//! the agent's) plus `--cluster` ClusterNetworkPolicies (100 by default), each change made to the
//! engine (`set_*` + `flush`, what the agent's syncer runs) and its script applied by `nft -f`
//! (tern-net's `Nft`, as the agent applies it) to `inet tern_netpol` in the current network
//! namespace: run it under `unshare --net`, so the table judges nothing of the machine's.
//!
//! ClusterNetworkPolicy `i`: Admin for even `i`, else Baseline; priority `i`; subject the
//! namespaces of team `t<i % 10>` (100 namespaces, 3,000 pods); one ingress rule (Accept, Deny
//! or Pass by `i % 3`) from the namespaces of team `t<(i + 3) % 10>` on TCP `9000 + i % 50`;
//! every tenth also an egress Deny to `169.254.169.254/32` (the metadata address).
//!
//! Usage: `unshare --net tern-bench --netpol-cluster [--cluster N] [--kernel 0|1] [--nodes N]
//! [--pods P] [--policies Q] [--namespaces S] [--changes C] [--seed X]`. Prints the first build
//! (engine and `nft`), then per kind of change the engine's p50/p99 (µs), how many changes sent
//! the kernel a transaction, that transaction's p50/p99 (ms, `nft -f` of the flush's script,
//! process start included) and the p99 of engine + transaction, and whether the engine's table
//! equals a full compile at the end. `--kernel 0`: the engine only.

use std::sync::Arc;
use std::time::Instant;

use crate::netpol_compile::{key, namespace, parse, pod, policy, rss_kib, Rng, Shape};
use crate::stats::pct;
use serde_json::json;
use tern_net::nft::Nft;
use tern_netpol::model::{
    read_cluster_policy, ClusterPolicy, ClusterPolicyRead, Namespace, Pod, Policy,
};
use tern_netpol::ruleset::render;
use tern_netpol::{compile, Engine, World};

/// ClusterNetworkPolicy `i` (see the module's docs); `port` moves its rule's port, `priority`
/// replaces its priority.
fn cluster_policy(i: usize, port: usize, priority: usize) -> Option<ClusterPolicy> {
    let tier = if i.is_multiple_of(2) {
        "Admin"
    } else {
        "Baseline"
    };
    let action = ["Accept", "Deny", "Pass"][i % 3];
    let action = if tier == "Baseline" && action == "Pass" {
        "Deny"
    } else {
        action
    };
    let team = |t: usize| json!({"matchLabels": {"team": format!("t{}", t % 10)}});
    let mut spec = json!({
        "tier": tier,
        "priority": priority % 1001,
        "subject": {"namespaces": team(i)},
        "ingress": [{"name": "from-team", "action": action, "from": [{"namespaces": team(i + 3)}],
            "protocols": [{"tcp": {"destinationPort": {"number": 9000 + port % 50}}}]}],
    });
    if i.is_multiple_of(10) {
        spec["egress"] = json!([{"name": "no-metadata", "action": "Deny",
            "to": [{"networks": ["169.254.169.254/32"]}]}]);
    }
    match read_cluster_policy(&json!({"metadata": {"name": format!("cnp{i}")}, "spec": spec})) {
        ClusterPolicyRead::Ok(p) => Some(p),
        _ => None,
    }
}

/// The cluster as the API holds it.
struct Cluster {
    pods: Vec<Pod>,
    namespaces: Vec<Namespace>,
    policies: Vec<Policy>,
    cluster: Vec<ClusterPolicy>,
}

const KINDS: [&str; 8] = [
    "cluster policy: priority changed",
    "cluster policy: its rule's port changed",
    "cluster policy created (local pods selected)",
    "cluster policy deleted",
    "NetworkPolicy changed (its ports)",
    "local pod created (an admission)",
    "remote pod created",
    "namespace relabelled (another team)",
];

/// One change of `kind` made to the cluster and the engine; false when there is nothing to
/// change (a kind of cluster-policy change without cluster policies).
fn change(
    kind: usize,
    r: &mut Rng,
    shape: &Shape,
    c: &mut Cluster,
    e: &mut Engine,
    n: usize,
) -> bool {
    let cnp = |e: &mut Engine, p: &ClusterPolicy| {
        e.set_cluster_policy(&p.name, Some(Arc::new(p.clone())));
    };
    match kind {
        0 | 1 | 3 if c.cluster.is_empty() => return false,
        0 | 1 => {
            let i = r.below(c.cluster.len());
            let idx: usize = c.cluster[i].name[3..].parse().unwrap_or(0);
            let (port, prio) = match kind {
                0 => (idx, 1 + r.below(1000)),
                _ => (idx + 1 + n, usize::from(c.cluster[i].priority)),
            };
            if let Some(p) = cluster_policy(idx, port, prio) {
                cnp(e, &p);
                c.cluster[i] = p;
            }
        }
        2 => {
            if let Some(p) = cluster_policy(10_000 + n, n, 500) {
                cnp(e, &p);
                c.cluster.push(p);
            }
        }
        3 => {
            let p = c.cluster.swap_remove(r.below(c.cluster.len()));
            e.set_cluster_policy(&p.name, None);
        }
        4 => {
            let i = r.below(c.policies.len());
            if let Some(p) = policy(r, shape, i, 1 + n % 7) {
                let k = format!("{}/{}", p.namespace, p.name);
                e.set_policy(&k, Some(Arc::new(p.clone())));
                c.policies[i] = p;
            }
        }
        5 | 6 => {
            let mut p = pod(r, shape, shape.pods + n * 10 + kind);
            p.node = if kind == 5 { "n0".into() } else { "n1".into() };
            e.set_pod(&key(&p), Some(Arc::new(p.clone())));
            c.pods.push(p);
        }
        _ => {
            let i = r.below(c.namespaces.len());
            let team = format!("t{}", r.below(10));
            c.namespaces[i].labels.insert("team".into(), team);
            let ns = c.namespaces[i].clone();
            e.set_namespace(&ns.name, Some(&ns));
        }
    }
    true
}

/// Runs the bench; the exit status.
/// Every object set in a new engine, one flush: the engine and its build time (s).
fn first_build(c: &Cluster) -> (Engine, f64) {
    let mut e = Engine::new("n0");
    let start = Instant::now();
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
    for p in &c.cluster {
        e.set_cluster_policy(&p.name, Some(Arc::new(p.clone())));
    }
    e.flush();
    (e, start.elapsed().as_secs_f64())
}

/// `changes` changes of `kind` (`what`), each flushed and its script applied by `nft`; prints
/// the kind's line. Err: nft refused a script.
fn measure(
    (kind, what): (usize, &str),
    r: &mut Rng,
    shape: &Shape,
    c: &mut Cluster,
    e: &mut Engine,
    nft: Option<&Nft>,
) -> Result<(), String> {
    // the engine's time of every change; nft's and the sum of both only of those whose
    // script was not empty (a change the table does not show sends nothing)
    let (mut cpu, mut kern, mut total) = (Vec::new(), Vec::new(), Vec::new());
    for n in 0..shape.changes {
        let t = Instant::now();
        if !change(kind, r, shape, c, e, n) {
            break;
        }
        let script = e.flush().script;
        let engine = t.elapsed().as_secs_f64() * 1e3;
        cpu.push(engine * 1e3);
        let (Some(nft), false) = (nft, script.is_empty()) else {
            continue;
        };
        let t = Instant::now();
        nft.apply(&script).map_err(|err| format!("{what}: {err}"))?;
        let applied = t.elapsed().as_secs_f64() * 1e3;
        kern.push(applied);
        total.push(engine + applied);
    }
    if cpu.is_empty() {
        println!("{what:<46} (no cluster policy to change)");
        return Ok(());
    }
    println!(
        "{what:<46} {:>13.1} {:>10.1} {:>9} {:>11.2} {:>11.2} {:>13.2}",
        pct(&cpu, 50.0),
        pct(&cpu, 99.0),
        format!("{}/{}", kern.len(), cpu.len()),
        pct(&kern, 50.0),
        pct(&kern, 99.0),
        pct(&total, 99.0)
    );
    Ok(())
}

/// `--cluster N` and `--kernel 0|1` taken out of `args`: (N, kernel, the rest for
/// `--netpol-compile`'s parser).
fn own_flags(args: &[String]) -> (usize, bool, Vec<String>) {
    let (mut count, mut kernel, mut rest) = (100usize, true, Vec::new());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match (a.as_str(), it.clone().next()) {
            ("--cluster", Some(v)) => count = v.parse().unwrap_or(count),
            ("--kernel", Some(v)) => kernel = v != "0",
            _ => {
                rest.push(a.clone());
                continue;
            }
        }
        it.next();
    }
    rest.extend(["--full".to_owned(), "0".to_owned()]);
    (count, kernel, rest)
}

/// Runs the bench; the exit status.
pub fn main(args: &[String]) -> i32 {
    let (count, kernel, rest) = own_flags(args);
    let shape = match parse(&rest) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tern-bench --netpol-cluster: {e}");
            return 2;
        }
    };
    let nft = match kernel.then(Nft::find).transpose() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("tern-bench --netpol-cluster: nft: {e}");
            return 2;
        }
    };
    let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ shape.seed);
    let mut c = Cluster {
        pods: (0..shape.pods).map(|i| pod(&mut r, &shape, i)).collect(),
        namespaces: (0..shape.namespaces).map(namespace).collect(),
        policies: (0..shape.policies)
            .filter_map(|i| policy(&mut r, &shape, i, 0))
            .collect(),
        cluster: (0..count).filter_map(|i| cluster_policy(i, i, i)).collect(),
    };
    let rss0 = rss_kib();
    let (mut e, build) = first_build(&c);
    let first = e.table().replace_script();
    let t = Instant::now();
    if let Some(Err(err)) = nft.as_ref().map(|n| n.apply(&first)) {
        eprintln!("tern-bench --netpol-cluster: the first table: {err}");
        return 1;
    }
    let size = e.size();
    println!(
        "shape: {} nodes, {} pods ({} on n0), {} NetworkPolicies ({} in force on n0), {} ClusterNetworkPolicies ({} in force on n0), {} namespaces",
        shape.nodes,
        c.pods.len(),
        c.pods.iter().filter(|p| p.node == "n0").count(),
        c.policies.len(),
        e.policies_in_force(),
        c.cluster.len(),
        e.cluster_policies_in_force(),
        shape.namespaces
    );
    println!(
        "first build: engine {build:.3} s, nft {:.3} s; table {} sets, {} chains, {} elements, {} rules, script {} kB; engine +{} MiB",
        t.elapsed().as_secs_f64(),
        size.sets,
        size.chains,
        size.elements,
        size.rules,
        first.len() / 1024,
        rss_kib().saturating_sub(rss0) / 1024
    );
    println!(
        "{:<46} {:>13} {:>10} {:>9} {:>11} {:>11} {:>13}",
        "change",
        "engine p50 µs",
        "p99 µs",
        "to kernel",
        "nft p50 ms",
        "nft p99 ms",
        "total p99 ms"
    );
    for kind in KINDS.iter().copied().enumerate() {
        if let Err(err) = measure(kind, &mut r, &shape, &mut c, &mut e, nft.as_ref()) {
            eprintln!("tern-bench --netpol-cluster: {err}");
            return 1;
        }
    }
    let full = render(&compile(&World {
        node: "n0",
        pods: &c.pods,
        namespaces: &c.namespaces,
        policies: &c.policies,
        cluster_policies: &c.cluster,
        ..World::default()
    }))
    .0;
    let same = full == *e.table();
    println!("engine's table equals a full compile after every change: {same}");
    if let Some(n) = &nft {
        let _ = n.apply(&format!(
            "delete table {} {}",
            tern_netpol::FAMILY,
            tern_netpol::TABLE
        ));
    }
    i32::from(!same)
}

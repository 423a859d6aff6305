//! `tern-bench netpol-scale`: NetworkPolicy at fleet scale on the real kube-apiserver. Brings up
//! etcd, kube-apiserver and kwok ([`cluster`]), loads N kwok Nodes, A agent Nodes, Namespaces,
//! P Pods with addresses and Q NetworkPolicies ([`objects`], concurrent writes through curl:
//! [`api`]), starts A real `tern-agent run --network-policy=true`, each its own Node, netns, table
//! and a listener of its kernel's nf_tables notifications ([`monitor`]), and measures, per agent:
//! the first sync, the API write → kernel transaction latency by kind of change ([`changes`]),
//! CPU per change (the agent's own and its nft children's apart), RSS, the agents' own
//! counters (compiles, unchanged events) over a window of status churn, and tern's ADD of an
//! isolated beside an unselected pod through the agent's admission ([`adds`]); and the API
//! server's CPU, RSS and watch events sent per second ([`report`]).
//!
//! Usage (root, under the host-tests lock: the tier's ports):
//! `flock -o /run/tern-host-tests.lock target/x86_64-unknown-linux-musl/release/tern-bench
//! netpol-scale [--nodes 1000] [--agents 10] [--pods 30000] [--local 30] [--policies 30000]
//! [--namespaces N] [--changes 5] [--status-rate PODS/1000] [--status-secs 60] [--steady 30]
//! [--adds 30] [--relist 0] [--seed 31] [--agent PATH] [--out DIR] [--writers 4] [--keep-up
//! SECONDS]`. `--changes 0` skips the timed changes, `--adds 0` the ADD phase (tern from the
//! agent's directory: `cargo build --release -p tern -p tern-agent`); `--relist N` adds the
//! relist phase at the end ([`relist`]: the API server restarted past an etcd compaction, up to
//! N rounds of changes made while the agents list every Pod again). Each change is timed from
//! its write's start, its return and the harness's own watch seeing it ([`api_watch`]).
//! `--keep-up` holds the cluster up that long after the measurements (for another client, e.g.
//! the watch-layer comparison), then tears down.

mod adds;
mod api_watch;
mod changes;
mod monitor;
mod nft_events;
pub(crate) mod objects;
mod per_agent;
mod relist;
mod report;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cluster::api::Api;
use crate::cluster::{Cluster, API_PORT, HUB};
use objects::{Rng, Shape};

use crate::host::load;
use crate::Res;

/// Command-line settings.
#[derive(Clone, Debug)]
pub(crate) struct Opts {
    pub(crate) shape: Shape,
    pub(crate) status_rate: usize,
    pub(crate) status_secs: u64,
    pub(crate) steady: u64,
    pub(crate) agent: PathBuf,
    pub(crate) out: PathBuf,
    pub(crate) writers: usize,
    pub(crate) keep_up: u64,
}

fn parse(args: &[String]) -> Res<Opts> {
    let root = std::env::current_dir().map_err(|e| format!("cwd: {e}"))?;
    let mut o = Opts {
        shape: Shape {
            nodes: 1000,
            agents: 10,
            pods: 30_000,
            local: 30,
            policies: 30_000,
            namespaces: 0,
            changes: 5,
            relist: 0,
            adds: 30,
            seed: 31,
        },
        status_rate: 0,
        status_secs: 60,
        steady: 30,
        agent: root.join("target/x86_64-unknown-linux-musl/release/tern-agent"),
        out: PathBuf::new(),
        writers: 4,
        keep_up: 0,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        let n = || v.parse::<usize>().map_err(|e| format!("{a}: {e}"));
        match a.as_str() {
            "--nodes" => o.shape.nodes = n()?,
            "--agents" => o.shape.agents = n()?,
            "--pods" => o.shape.pods = n()?,
            "--local" => o.shape.local = n()?,
            "--policies" => o.shape.policies = n()?,
            "--namespaces" => o.shape.namespaces = n()?,
            "--changes" => o.shape.changes = n()?,
            "--relist" => o.shape.relist = n()?,
            "--adds" => o.shape.adds = n()?,
            "--seed" => o.shape.seed = n()? as u64,
            "--status-rate" => o.status_rate = n()?,
            "--status-secs" => o.status_secs = n()? as u64,
            "--steady" => o.steady = n()? as u64,
            "--writers" => o.writers = n()?,
            "--keep-up" => o.keep_up = n()? as u64,
            "--agent" => o.agent = PathBuf::from(v),
            "--out" => o.out = PathBuf::from(v),
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    let s = &mut o.shape;
    if o.status_rate == 0 {
        // A kubelet writes a pod's status only when it changes (status_manager): about 3 writes
        // per pod start and 3 per stop; a fleet replacing 1 % of its pods a minute makes
        // pods / 1,000 writes per second (30/s at 30,000 pods, 150/s at 150,000).
        o.status_rate = (s.pods / 1000).max(10);
    }
    if s.namespaces == 0 {
        s.namespaces = (s.pods / 300).clamp(10, 500);
    }
    if s.nodes == 0
        || s.agents == 0
        || s.agents > 250
        || s.fixtures() > 250
        || s.adds > 5000
        || s.policies < s.namespaces + 2
    {
        return Err("--nodes >= 1, 1 <= --agents <= 250, --changes + --relist <= 250 (0: no timed changes, no relist phase), --adds <= 5000 (0: no ADD phase), --policies >= namespaces + 2".into());
    }
    if o.out.as_os_str().is_empty() {
        o.out = PathBuf::from(format!(
            "/tmp/tern-netpol-scale-out-{}p-{}q-{}a",
            s.pods, s.policies, s.agents
        ));
    }
    Ok(o)
}

/// `tern-bench netpol-scale ARGS`: the exit code.
pub(crate) fn main(args: &[String]) -> i32 {
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("tern-bench netpol-scale: {e}");
            return 2;
        }
    };
    let root = std::env::current_dir().unwrap_or_default();
    let c = Cluster {
        root,
        kt: PathBuf::from("/tmp/tern-netpol-scale-kt"),
        agent_bin: o.agent.clone(),
    };
    if let Err(e) = crate::cluster::prepare("tern-bench netpol-scale", &c, o.shape.agents, &o.out) {
        eprintln!("{e}");
        return 1;
    }
    let r = run(&o, &c);
    if o.keep_up > 0 {
        println!(
            "[netpol-scale] keeping the cluster up {} s: kubeconfig {}/pki/admin.kubeconfig",
            o.keep_up,
            c.kt.display()
        );
        std::thread::sleep(Duration::from_secs(o.keep_up));
    }
    c.down(o.shape.agents, &o.out);
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tern-bench netpol-scale: {e}");
            1
        }
    }
}

fn say(s: &str) {
    println!("[netpol-scale] {s}");
}

fn run(o: &Opts, c: &Cluster) -> Res<()> {
    if !o.agent.is_file() {
        return Err(format!(
            "no {}: nice cargo build --release -p tern-agent",
            o.agent.display()
        ));
    }
    let s = &o.shape;
    say(&format!(
        "{s:?}, agent {}, load average {}",
        o.agent.display(),
        load()
    ));
    let t0 = Instant::now();
    c.up()?;
    let api = Api {
        url: format!("https://{HUB}:{API_PORT}"),
        pki: c.kt.join("pki"),
        work: c.kt.clone(),
    };
    say(&format!(
        "control plane up in {:.1} s",
        t0.elapsed().as_secs_f64()
    ));
    let mut rng = Rng::new(s.seed);
    let t1 = Instant::now();
    // Namespaces before their ServiceAccounts: in one parallel batch a ServiceAccount can reach
    // the server before its Namespace (404).
    let (nss, sas): (Vec<_>, Vec<_>) = objects::namespaces(s)
        .into_iter()
        .partition(|w| w.path == "/api/v1/namespaces");
    api.bulk("namespaces", &nss, o.writers)?;
    api.bulk("serviceaccounts", &sas, o.writers)?;
    api.bulk("nodes", &objects::nodes(s), o.writers)?;
    let pods = objects::pods(s, &mut rng);
    let pols = objects::policies(s, &mut rng);
    api.bulk(
        "pods",
        &pods
            .iter()
            .map(objects::PodSpec::create)
            .collect::<Vec<_>>(),
        o.writers,
    )?;
    api.bulk(
        "pod status",
        &pods
            .iter()
            .map(objects::PodSpec::status)
            .collect::<Vec<_>>(),
        o.writers,
    )?;
    api.bulk(
        "pods for the ADD phase",
        &adds::pods(s)
            .iter()
            .map(objects::PodSpec::create)
            .collect::<Vec<_>>(),
        o.writers,
    )?;
    api.bulk("policies", &pols, o.writers)?;
    let load_s = t1.elapsed().as_secs_f64();
    say(&format!("{} pods, {} policies, {} namespaces, {} + {} Nodes loaded in {load_s:.0} s (load average {})", pods.len(), pols.len(), s.namespaces, s.nodes, s.agents, load()));
    c.kwok("")?;
    report::measure(o, c, &api, &pods, load_s)
}

//! `tern-bench scale`: token refresh and node routes of real tern-agents against the real
//! kube-apiserver holding thousands of Nodes kept Ready by kwok, with the API server's load read
//! from its own /metrics. On the bring-up `tern-bench netpol-scale` uses ([`crate::cluster`]).
//!
//! Usage (root, under the host-tests lock: the tier's ports):
//! `flock -o /run/tern-host-tests.lock target/x86_64-unknown-linux-musl/release/tern-bench scale
//! [--nodes 5000] [--agents 50] [--steady MIN (10)] [--changes 5] [--agent PATH]
//! [--token-lifetime SECONDS] [--outage MIN (0)] [--lease SECONDS] [--out DIR]`.
//! `--token-lifetime 600` makes the agents ask for 10-minute tokens (the least TokenRequest
//! grants; without it they ask for 24 h and the server grants 1 h): a refresh every 4–5 min.
//! `--lease S` has kwok renew each Node's Lease every S s (off by default: the agents never watch
//! Leases, and 5,000 of them renewed every 10 s are 500 writes/s on a 2-core machine).
//!
//! The cluster: Nodes `scale-NNNNN`, podCIDR 10.(64+i/256).(i%256).0/24, InternalIP
//! 10.95.(i/250).(i%250+1) (the bridge's /16), kept Ready by kwok (tests/scale/kwok.yaml: Ready at
//! once, a status heartbeat every 5 min as the kubelet's nodeStatusReportFrequency); agent k is
//! Node scale-k, `tern-agent run --node-routes` in its own netns holding that Node's InternalIP.
//!
//! Phases ([`phases`], [`outage`]); API server counts are deltas of its /metrics, kwok's own
//! requests measured alone first and taken off:
//! 1. the agents start together: TokenRequests, node LISTs and open watches until every agent has
//!    every route, and the time that took;
//! 2. a steady window: TokenRequests/s beside the refresh schedule's prediction, node LIST and
//!    WATCH per agent per hour, Node watch events sent, the agents' CPU and RSS;
//! 3. `--changes` Node re-addressings: each agent's kernel route moved (`ip monitor route` in its
//!    netns, lines stamped on receipt) after the PATCH: p50 / p99 / max;
//! 4. the API server killed and restarted: LISTs and WATCHes after (each watch should resume from
//!    its resourceVersion: no LIST), time until every agent watches again;
//! 5. etcd compacted past every agent's resourceVersion with the server down: each agent should
//!    list exactly once (410 Gone), then watch;
//! 6. with `--outage MIN`: the server down MIN minutes, then the TokenRequests it served per
//!    second after (its audit log), and how long until every failing agent got a token.
//!
//! Not a test: prints figures (and writes them to OUT/summary.md); fails only when a phase does
//! not converge or the bring-up fails. Everything is torn down at exit, logs copied to OUT.

mod outage;
mod phases;
mod server;

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::cluster::api::{Api, Write};
use crate::cluster::{Cluster, API_PORT, HUB};
use crate::Res;

/// Command-line settings.
#[derive(Clone, Debug)]
pub(crate) struct Opts {
    pub(crate) nodes: usize,
    pub(crate) agents: usize,
    pub(crate) steady_min: u64,
    pub(crate) changes: usize,
    pub(crate) agent: PathBuf,
    pub(crate) token_lifetime: Option<u64>,
    pub(crate) outage_min: u64,
    pub(crate) lease: Option<u64>,
    pub(crate) out: PathBuf,
}

impl Opts {
    /// The token lifetime the server grants: what the agents ask for, capped at its 1 h.
    pub(crate) fn granted(&self) -> u64 {
        self.token_lifetime.unwrap_or(3600)
    }
}

fn parse(args: &[String]) -> Res<Opts> {
    let root = std::env::current_dir().map_err(|e| format!("cwd: {e}"))?;
    let mut o = Opts {
        nodes: 5000,
        agents: 50,
        steady_min: 10,
        changes: 5,
        agent: root.join("target/x86_64-unknown-linux-musl/release/tern-agent"),
        token_lifetime: None,
        outage_min: 0,
        lease: None,
        out: PathBuf::from("/tmp/tern-scale-out"),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        let n = || v.parse::<u64>().map_err(|e| format!("{a}: {e}"));
        match a.as_str() {
            "--nodes" => o.nodes = n()? as usize,
            "--agents" => o.agents = n()? as usize,
            "--steady" => o.steady_min = n()?,
            "--changes" => o.changes = n()? as usize,
            "--agent" => o.agent = PathBuf::from(v),
            "--token-lifetime" => o.token_lifetime = Some(n()?),
            "--outage" => o.outage_min = n()?,
            "--lease" => o.lease = Some(n()?),
            "--out" => o.out = PathBuf::from(v),
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if o.agents == 0 || o.agents > o.nodes || o.agents > 250 || o.nodes > 5000 {
        return Err("1 <= --agents <= --nodes, --agents <= 250, --nodes <= 5000".into());
    }
    if o.token_lifetime.is_some_and(|l| !(600..=3600).contains(&l)) {
        return Err("--token-lifetime: whole seconds, 600 to 3600".into());
    }
    Ok(o)
}

/// The lines printed so far, for OUT/summary.md.
static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Prints one line of figures and keeps it for the summary.
pub(crate) fn say(s: &str) {
    println!("[scale] {s}");
    if let Ok(mut l) = LINES.lock() {
        l.push(s.to_string());
    }
}

pub(crate) fn node_name(i: usize) -> String {
    format!("scale-{i:05}")
}
pub(crate) fn node_ip(i: usize) -> String {
    format!("10.95.{}.{}", i / 250, i % 250 + 1)
}
pub(crate) fn pod_cidr(i: usize) -> String {
    format!("10.{}.{}.0/24", 64 + i / 256, i % 256)
}

/// Node i as POSTed: kwok's annotation and taint, its podCIDR, its InternalIP in its status.
fn node(i: usize) -> Write {
    let n = node_name(i);
    Write::post(
        "/api/v1/nodes".into(),
        &json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": n, "labels": {"type": "kwok", "kubernetes.io/hostname": n},
            "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {"podCIDR": pod_cidr(i), "podCIDRs": [pod_cidr(i)],
            "taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
        "status": {"addresses": [{"type": "InternalIP", "address": node_ip(i)},
            {"type": "Hostname", "address": n}]}}),
    )
}

/// `tern-bench scale ARGS`: the exit code.
pub(crate) fn main(args: &[String]) -> i32 {
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("tern-bench scale: {e}");
            return 2;
        }
    };
    let c = Cluster {
        root: std::env::current_dir().unwrap_or_default(),
        kt: PathBuf::from("/tmp/tern-scale-kt"),
        agent_bin: o.agent.clone(),
    };
    if let Err(e) = crate::cluster::prepare("tern-bench scale", &c, o.agents, &o.out) {
        eprintln!("{e}");
        return 1;
    }
    let r = run(&o, &c);
    let summary = LINES.lock().map(|l| l.join("\n")).unwrap_or_default();
    let _ = std::fs::write(o.out.join("summary.md"), summary + "\n");
    // The audit log, for a second look at phase 6.
    let _ = std::fs::copy(c.kt.join("apiserver/audit.log"), o.out.join("audit.log"));
    c.down(o.agents, &o.out);
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tern-bench scale: {e}");
            1
        }
    }
}

/// Nodes whose Ready condition is True.
fn ready_nodes(api: &Api) -> usize {
    let body = api.get("/api/v1/nodes").unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["items"].as_array().map_or(0, |items| {
        items
            .iter()
            .filter(|n| {
                n["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            })
            .count()
    })
}

fn run(o: &Opts, c: &Cluster) -> Res<()> {
    if !o.agent.is_file() {
        return Err(format!(
            "no {}: nice cargo build --release -p tern-agent",
            o.agent.display()
        ));
    }
    let t0 = Instant::now();
    c.up()?;
    let api = Api {
        url: format!("https://{HUB}:{API_PORT}"),
        pki: c.kt.join("pki"),
        work: c.kt.clone(),
    };
    say(&format!(
        "control plane up in {:.1} s; creating {} Nodes",
        t0.elapsed().as_secs_f64(),
        o.nodes
    ));
    let t1 = Instant::now();
    api.bulk("nodes", &(0..o.nodes).map(node).collect::<Vec<_>>(), 4)?;
    let lease = o
        .lease
        .map(|s| format!(" --node-lease-duration-seconds {s}"))
        .unwrap_or_default();
    c.kwok(&lease)?;
    let end = Instant::now() + Duration::from_secs(600);
    while ready_nodes(&api) < o.nodes {
        if Instant::now() > end {
            return Err(format!("not all {} Nodes Ready in 600 s", o.nodes));
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    let n0: serde_json::Value =
        serde_json::from_str(&api.get(&format!("/api/v1/nodes/{}", node_name(0)))?)
            .map_err(|e| e.to_string())?;
    let ip0 = n0["status"]["addresses"][0]["address"]
        .as_str()
        .unwrap_or("");
    if ip0 != node_ip(0) {
        return Err(format!("kwok replaced the InternalIP: {ip0}"));
    }
    say(&format!(
        "{} Nodes created and Ready after {:.0} s",
        o.nodes,
        t1.elapsed().as_secs_f64()
    ));
    let kwok = phases::kwok_alone(&api)?;
    phases::all(o, c, &api, &kwok)?;
    if o.outage_min > 0 {
        outage::run(o, c, &api)?;
    }
    say("done");
    Ok(())
}

//! The ADD phase: tern's ADD (the release `tern` beside the agent, host-local IPAM) of pods that
//! exist in the API, exec'd in an agent's netns with that agent's admission socket, each then
//! DELeted; the fleet-scale target "an isolated pod's ADD ≤ 20 ms more than an unselected pod's
//! at p99" (issue 46).
//!
//! Per round i, on agent i % agents, three ADDs interleaved (each followed by its DEL):
//! - `none`: the pod `add-open-i`, no `networkPolicy` in the netconf (no admission asked);
//! - `unselected`: the same pod with `networkPolicy`: no policy selects it (np-free, app=adds),
//!   so the agent answers at once;
//! - `isolated`: the pod `add-iso-i` (`ns-*`, whose baseline policy selects every pod of it): the
//!   answer waits for the table that isolates its address.
//!
//! Both pods are created in the load, scheduled to the agent's Node, without an address (as a
//! pod is when its sandbox is made). Each ADD is timed from the plugin's spawn to its reaped exit
//! ([`crate::exec::invoke_out`]) on a thread in the agent's netns: no `ip netns exec` in the time.
//!
//! Invariant: an isolated ADD counts only if its address reached the agent's table (the
//! nf_tables listener, [`super::monitor`]); the phase fails otherwise (the figure would be of something else).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tern_net::netns::NetNs;

use super::monitor::Monitor;
use super::objects::{agent_node, PodSpec, Shape};
use super::say;
use crate::cluster::api::now;
use crate::cluster::{agent_ns, Cluster};
use crate::host::load;
use crate::stats::pct;
use crate::Res;

/// The kinds of ADD, in the order each round runs them.
pub(crate) const ADD_KINDS: [&str; 3] = ["none", "unselected", "isolated"];

/// The pod netns every ADD wires (one at a time: each ADD is DELeted before the next).
pub(crate) const POD_NS: &str = "tnps-pod";

/// host-local's range: a /16, so no address is handed out twice in a run (the agent keeps an
/// admitted address after DEL: DEL does not ask it).
const SUBNET: &str = "10.202.0.0/16";

/// The pods the phase ADDs: `add-open-i` and `add-iso-i` on agent i % agents, no address.
pub(crate) fn pods(s: &Shape) -> Vec<PodSpec> {
    let pod = |ns: String, name: String, i: usize| PodSpec {
        ns,
        name,
        node: agent_node(i % s.agents.max(1)),
        ip: String::new(),
        labels: json!({"app": "adds"}),
        dns: false,
    };
    (0..s.adds)
        .flat_map(|i| {
            [
                pod("np-free".into(), format!("add-open-{i}"), i),
                pod(
                    format!("ns-{}", i % s.namespaces.max(1)),
                    format!("add-iso-{i}"),
                    i,
                ),
            ]
        })
        .collect()
}

/// One ADD's setting: the pod, the agent and whether the netconf asks for admission.
struct Subject {
    kind: &'static str,
    agent: usize,
    ns: String,
    name: String,
    admission: bool,
}

fn subjects(s: &Shape, i: usize) -> [Subject; 3] {
    let agent = i % s.agents.max(1);
    let open = ("np-free".to_string(), format!("add-open-{i}"));
    let iso = (
        format!("ns-{}", i % s.namespaces.max(1)),
        format!("add-iso-{i}"),
    );
    let [a, b, c] = ADD_KINDS;
    [(a, open.clone(), false), (b, open, true), (c, iso, true)].map(
        |(kind, (ns, name), admission)| Subject {
            kind,
            agent,
            ns,
            name,
            admission,
        },
    )
}

/// tern's netconf for agent k, with `networkPolicy` when `admission`.
fn netconf(c: &Cluster, k: usize, admission: bool) -> Value {
    let mut conf = json!({"cniVersion": "1.0.0", "name": "netpol-scale", "type": "tern",
        "agentSocket": c.agent_dir(k).join("agent.sock"), "stateDir": c.kt.join("cni-state"),
        "ipam": {"type": "host-local", "dataDir": c.kt.join("ipam"),
            "ranges": [[{"subnet": SUBNET}]]}});
    if admission {
        conf["networkPolicy"] = json!({"waitSeconds": 10});
    }
    conf
}

/// The first address of a CNI result.
fn result_ip(out: &str) -> Res<String> {
    let v: Value = serde_json::from_str(out).map_err(|e| format!("ADD result: {e}: {out}"))?;
    v["ips"][0]["address"]
        .as_str()
        .and_then(|a| a.split('/').next())
        .map(str::to_string)
        .ok_or_else(|| format!("ADD result without an address: {out}"))
}

/// tern's VERB of `sub` in its agent's netns: the wall time and the plugin's stdout.
fn cni(
    tern: &Path,
    cni_path: &str,
    verb: &str,
    cid: &str,
    sub: &Subject,
    conf: &[u8],
) -> Res<(f64, String)> {
    let args = format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={}",
        sub.ns, sub.name
    );
    let pod_ns = format!("/run/netns/{POD_NS}");
    let ns =
        NetNs::open(format!("/run/netns/{}", agent_ns(sub.agent))).map_err(|e| e.to_string())?;
    let (took, out) = ns
        .run_in(|| crate::exec::invoke_out(tern, verb, cid, &pod_ns, cni_path, &args, conf))
        .map_err(|e| e.to_string())??;
    Ok((took.as_secs_f64() * 1000.0, out))
}

/// Latencies (ms) per kind, in [`ADD_KINDS`]' order, and each isolated ADD's address with the
/// time right before its spawn and its agent.
#[derive(Default)]
struct Timed {
    ms: [Vec<f64>; 3],
    isolated: Vec<(usize, String, f64)>,
}

fn run_adds(c: &Cluster, s: &Shape, tern: &Path) -> Res<Timed> {
    let cni_path = format!(
        "{}:/usr/lib/cni",
        tern.parent().unwrap_or(Path::new("/")).display()
    );
    let mut t = Timed::default();
    for i in 0..s.adds {
        for (slot, sub) in subjects(s, i).iter().enumerate() {
            let conf = serde_json::to_vec(&netconf(c, sub.agent, sub.admission))
                .map_err(|e| e.to_string())?;
            let cid = format!("np5-{}-{i}", sub.kind);
            let t_before = now();
            let (ms, out) = cni(tern, &cni_path, "ADD", &cid, sub, &conf)?;
            if sub.kind == "isolated" {
                t.isolated.push((sub.agent, result_ip(&out)?, t_before));
            }
            t.ms[slot].push(ms);
            cni(tern, &cni_path, "DEL", &cid, sub, &conf)?;
        }
    }
    Ok(t)
}

/// The isolated ADDs whose address an `add element` of the agent's table showed after the ADD
/// began (waiting up to 5 s for the monitor to catch up).
fn isolated_seen(mons: &[Monitor], isolated: &[(usize, String, f64)]) -> usize {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let seen = isolated
            .iter()
            .filter(|(k, ip, t0)| {
                mons.get(*k)
                    .is_some_and(|m| m.find(*t0, ip, true).is_some())
            })
            .count();
        if seen == isolated.len() || Instant::now() >= end {
            return seen;
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// p50 / p99 / max of V, ms.
fn figures(v: &[f64]) -> String {
    format!(
        "{:.1} / {:.1} / {:.1}",
        pct(v, 50.0),
        pct(v, 99.0),
        pct(v, 100.0)
    )
}

/// Runs the phase and writes its rows to OUT (and OUT_DIR/adds.tsv).
pub(crate) fn measure(
    c: &Cluster,
    s: &Shape,
    mons: &[Monitor],
    out_dir: &Path,
    out: &mut String,
) -> Res<()> {
    let tern: PathBuf = c.agent_bin.with_file_name("tern");
    if !tern.is_file() {
        return Err(format!(
            "no {}: nice cargo build --release -p tern",
            tern.display()
        ));
    }
    let ok = Command::new("ip")
        .args(["netns", "add", POD_NS])
        .status()
        .map_err(|e| format!("ip netns add {POD_NS}: {e}"))?;
    if !ok.success() {
        return Err(format!("ip netns add {POD_NS} failed"));
    }
    say(&format!(
        "ADD phase: {} rounds of {} (each ADD then DEL), over {} agents (load average {})",
        s.adds,
        ADD_KINDS.join(", "),
        s.agents,
        load()
    ));
    let t = run_adds(c, s, &tern)?;
    let seen = isolated_seen(mons, &t.isolated);
    let mut tsv = String::from("kind\tround\tms\n");
    for (kind, v) in ADD_KINDS.iter().zip(&t.ms) {
        for (i, ms) in v.iter().enumerate() {
            let _ = writeln!(tsv, "{kind}\t{i}\t{ms:.3}");
        }
    }
    let _ = std::fs::write(out_dir.join("adds.tsv"), tsv);
    let [none, unsel, iso] = &t.ms;
    let d50 = pct(iso, 50.0) - pct(unsel, 50.0);
    let d99 = pct(iso, 99.0) - pct(unsel, 99.0);
    let what = [
        "none (no networkPolicy: no admission)",
        "unselected (networkPolicy; no policy selects the pod)",
        "isolated (networkPolicy; a policy selects the pod: the answer waits for its table)",
    ];
    let _ = writeln!(out, "| tern ADD of a pod of the API in an agent's netns ({} each, interleaved, host-local; spawn → exit): p50 / p99 / max ms | |", s.adds);
    for (w, v) in what.iter().zip([none, unsel, iso]) {
        say(&format!("  ADD {w}: p50 / p99 / max {} ms", figures(v)));
        let _ = writeln!(out, "| ADD {w} | {} |", figures(v));
    }
    let diff = format!("{d50:.1} / {d99:.1} ms (target: p99 ≤ 20 ms)");
    say(&format!("  ADD isolated − unselected, p50 / p99: {diff}; isolated ADDs whose address reached the agent's table: {seen} of {}", t.isolated.len()));
    let _ = writeln!(out, "| ADD isolated − unselected, p50 / p99 | {diff} |");
    if seen != t.isolated.len() {
        return Err(format!("only {seen} of {} isolated ADDs' addresses were seen in their agent's table: those ADDs were not isolated", t.isolated.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netpol_scale::objects::{self, Rng};

    fn shape(adds: usize) -> Shape {
        Shape {
            nodes: 5,
            agents: 2,
            pods: 200,
            local: 10,
            policies: 20,
            namespaces: 10,
            changes: 2,
            relist: 0,
            adds,
            seed: 1,
        }
    }

    #[test]
    fn the_add_pods_are_part_of_the_pods_asked_for() {
        let s = shape(7);
        let total = objects::pods(&s, &mut Rng::new(1)).len() + pods(&s).len();
        assert_eq!(total, s.pods);
        let p = pods(&s);
        assert_eq!(p.len(), 14);
        let iso: Vec<_> = p
            .iter()
            .filter(|p| p.name.starts_with("add-iso-"))
            .collect();
        assert!(iso
            .iter()
            .all(|p| p.ns.starts_with("ns-") && p.ip.is_empty()));
        assert!(p
            .iter()
            .filter(|p| p.name.starts_with("add-open-"))
            .all(|p| p.ns == "np-free"));
        // Round i runs on agent i % agents, its pods scheduled there.
        assert_eq!(iso[3].node, agent_node(1));
        assert_eq!(subjects(&s, 3).map(|x| x.agent), [1, 1, 1]);
        assert_eq!(subjects(&s, 3).map(|x| x.admission), [false, true, true]);
    }

    #[test]
    fn the_address_of_a_cni_result() {
        let out = r#"{"cniVersion":"1.0.0","ips":[{"address":"10.202.0.7/16"}]}"#;
        assert_eq!(result_ip(out).unwrap(), "10.202.0.7");
        assert!(result_ip(r#"{"ips":[]}"#).is_err());
    }
}

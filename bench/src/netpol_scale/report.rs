//! The measured phases after the load, and what they print: the agents' first sync, a steady
//! window, the status churn (with the agents' compile and unchanged-event counters before and
//! after), the timed changes by kind, the ADD phase ([`super::adds`]), and a closing table (also written to OUT/summary.md with
//! the raw latencies in OUT/latencies.tsv).
//!
//! Invariant: CPU figures are utime + stime of the agent and its waited-for nft children.

use std::fmt::Write as _;
use std::thread;
use std::time::{Duration, Instant};

use super::api_watch::ApiWatch;
use super::changes::{self, KINDS};
use super::monitor::Monitor;
use super::objects::{agent_node, PodSpec};
use super::per_agent::{latency_rows, nft_per_change, rows, PerAgent, LISTING};
use super::{say, Opts};
use crate::cluster::api::{now, Api};
use crate::cluster::writer::Writer;
use crate::cluster::{agent_metrics, agent_ns, cpu, hwm_kib, rss_kib, sum, Cluster};
use crate::host::load;
use crate::stats::spread as stats;
use crate::Res;

struct Agents {
    pids: Vec<u32>,
    mons: Vec<Monitor>,
    /// Each agent's first sync (s) and VmRSS after it (MiB), for the per-agent table.
    first: Vec<f64>,
    rss_sync: Vec<f64>,
}

impl Agents {
    fn cpu(&self) -> Vec<f64> {
        self.cpu_apart().iter().map(|(a, b)| a + b).collect()
    }
    /// Each agent's own CPU seconds and its waited-for children's (nft).
    fn cpu_apart(&self) -> Vec<(f64, f64)> {
        self.pids.iter().map(|&p| cpu(p)).collect()
    }
    fn rss_mib(&self) -> Vec<f64> {
        self.pids
            .iter()
            .map(|&p| rss_kib(p) as f64 / 1024.0)
            .collect()
    }
    fn hwm_mib(&self) -> Vec<f64> {
        self.pids
            .iter()
            .map(|&p| hwm_kib(p) as f64 / 1024.0)
            .collect()
    }
    fn metric(&self, name: &str) -> Vec<f64> {
        (0..self.pids.len())
            .map(|k| sum(&agent_metrics(k), name))
            .collect()
    }
}

fn api_state(api: &Api, c: &Cluster) -> (f64, f64, f64) {
    let m = crate::cluster::parse_metrics(&api.get("/metrics").unwrap_or_default());
    let ev = ["pods", "networkpolicies", "namespaces", "nodes"]
        .iter()
        .map(|r| {
            m.iter()
                .filter(|(k, _)| {
                    k.starts_with("apiserver_watch_events_total{")
                        && k.contains(&format!("resource=\"{r}\""))
                })
                .map(|(_, v)| v)
                .sum::<f64>()
        })
        .sum();
    let pid = c.pid(&c.kt.join("apiserver")).unwrap_or(0);
    let (a, b) = cpu(pid);
    (ev, a + b, rss_kib(pid) as f64 / 1024.0)
}

/// Whether the agent's log says its first table went in. The fallback when the listener missed
/// that transaction's end: a first table of 400,000 elements may overflow its receive buffer
/// (ENOBUFS), NEWGEN among the messages lost; seen within the 200 ms poll.
fn logged_first_sync(dir: &std::path::Path) -> bool {
    std::fs::read_to_string(dir.join("log"))
        .is_ok_and(|l| l.contains("network policy: first full sync applied"))
}

/// Starts every agent (monitors first) and waits for each one's first sync.
fn start(o: &Opts, c: &Cluster, out: &mut String) -> Res<Agents> {
    let n = o.shape.agents;
    let mut mons = Vec::new();
    for k in 0..n {
        c.agent_netns(k)?;
        mons.push(Monitor::start(&agent_ns(k))?);
    }
    let t0 = now();
    for k in 0..n {
        c.start_agent(k, &agent_node(k), "--network-policy=true")?;
    }
    let pids: Vec<u32> = (0..n).map(|k| c.pid(&c.agent_dir(k))).collect::<Res<_>>()?;
    let end = Instant::now() + Duration::from_secs(1800);
    let mut firsts = vec![None; n];
    while firsts.iter().any(Option::is_none) && Instant::now() < end {
        for k in 0..n {
            if firsts[k].is_none() {
                firsts[k] = mons[k]
                    .since(t0)
                    .first()
                    .map(|t| t.gen - t0)
                    .or_else(|| logged_first_sync(&c.agent_dir(k)).then(|| now() - t0));
            }
            if !std::path::Path::new(&format!("/proc/{}", pids[k])).exists() {
                return Err(format!(
                    "agent {k} exited; its log: {}",
                    c.agent_dir(k).join("log").display()
                ));
            }
        }
        thread::sleep(Duration::from_millis(200));
    }
    let f: Vec<f64> = firsts.iter().map(|x| x.unwrap_or(f64::NAN)).collect();
    let mut a = Agents {
        pids,
        mons,
        first: Vec::new(),
        rss_sync: Vec::new(),
    };
    let rss = a.rss_mib();
    let lost: Vec<f64> = a.mons.iter().map(|m| m.overflows() as f64).collect();
    say(&format!("first sync (all started together → the table's first transaction's end), min / median / max: {} s; load average {}", stats(&f), load()));
    let _ = writeln!(out, "| first sync, {n} agents started together: start → first table transaction (min / median / max) | {} s |", stats(&f));
    let _ = writeln!(
        out,
        "| agent VmRSS after the first sync (min / median / max) | {} MiB |",
        stats(&rss)
    );
    let _ = writeln!(
        out,
        "| the listeners' receive buffer overflows (ENOBUFS) during the first sync, per agent (min / median / max) | {} |",
        stats(&lost)
    );
    if f.iter().any(|x| x.is_nan()) {
        return Err("not every agent synced within 30 min".into());
    }
    a.first = f;
    a.rss_sync = rss;
    Ok(a)
}

/// Measures everything after the load (see the module doc).
pub(crate) fn measure(o: &Opts, c: &Cluster, api: &Api, pods: &[PodSpec], load_s: f64) -> Res<()> {
    let s = &o.shape;
    let mut out = String::new();
    let _ = writeln!(out, "{} kwok Nodes + {} agent Nodes, {} Pods ({} on each agent's Node), {} NetworkPolicies, {} namespaces, seed {}; loaded in {load_s:.0} s\n", s.nodes, s.agents, pods.len(), s.local + 1, s.policies, s.namespaces, s.seed);
    let _ = writeln!(out, "| figure | value |\n| --- | --- |");
    let a = start(o, c, &mut out)?;
    // steady
    let (ev0, acpu0, _) = api_state(api, c);
    let c0 = a.cpu();
    thread::sleep(Duration::from_secs(o.steady));
    let (ev1, acpu1, arss1) = api_state(api, c);
    let steady_cpu: Vec<f64> = a
        .cpu()
        .iter()
        .zip(&c0)
        .map(|(x, y)| (x - y) / o.steady as f64 * 100.0)
        .collect();
    let st = o.steady as f64;
    say(&format!("steady {} s: agent CPU {} % of a core; API server {:.1} % CPU, {:.0} MiB, {:.1} watch events/s (load {})", o.steady, stats(&steady_cpu), (acpu1 - acpu0) / st * 100.0, arss1, (ev1 - ev0) / st, load()));
    let _ = writeln!(
        out,
        "| steady {} s: agent CPU (min / median / max, % of a core) | {} |",
        o.steady,
        stats(&steady_cpu)
    );
    let _ = writeln!(out, "| steady: API server CPU / RSS / watch events sent per s (kwok heartbeats included) | {:.1} % / {arss1:.0} MiB / {:.1} |", (acpu1 - acpu0) / st * 100.0, (ev1 - ev0) / st);
    churn(o, api, c, &a, pods, &mut out)?;
    let watch = ApiWatch::start(api);
    let writer = Writer::new(api)?;
    let per = if o.shape.changes > 0 {
        timed(o, (api, &writer), c, &a, &watch, &mut out)?
    } else {
        PerAgent::default()
    };
    if o.shape.adds > 0 {
        let syncs0 = a.metric("tern_agent_network_policy_syncs_total");
        super::adds::measure(c, &o.shape, &a.mons, &o.out, &mut out)?;
        let syncs = a.metric("tern_agent_network_policy_syncs_total");
        let d: Vec<f64> = syncs.iter().zip(&syncs0).map(|(x, y)| x - y).collect();
        let _ = writeln!(
            out,
            "| ADD phase: the agents' syncs (min / median / max) | {} |",
            stats(&d)
        );
    }
    let rss = a.rss_mib();
    let _ = writeln!(
        out,
        "| agent VmRSS at the end (min / median / max) | {} MiB |",
        stats(&rss)
    );
    let _ = writeln!(
        out,
        "| agent VmHWM (peak) at the end (min / median / max) | {} MiB |",
        stats(&a.hwm_mib())
    );
    rows(
        &a.first,
        &a.rss_sync,
        &a.rss_mib(),
        &a.hwm_mib(),
        &per,
        &mut out,
    );
    if o.shape.relist > 0 {
        let fixtures = (o.shape.changes, o.shape.relist);
        super::relist::measure(c, (api, &writer), &a.mons, &watch, fixtures, &mut out)?;
    }
    let _ = writeln!(
        out,
        "\nload average at the end {}; agent {}",
        load(),
        o.agent.display()
    );
    println!("\n{out}");
    std::fs::write(o.out.join("summary.md"), &out).map_err(|e| format!("summary: {e}"))
}

fn churn(
    o: &Opts,
    api: &Api,
    c: &Cluster,
    a: &Agents,
    pods: &[PodSpec],
    out: &mut String,
) -> Res<()> {
    let comp0 = a.metric("tern_agent_network_policy_compiles_total");
    let unch0 = a.metric("tern_agent_network_policy_events_unchanged_total");
    let (ev0, acpu0, _) = api_state(api, c);
    let c0 = a.cpu();
    let t0 = now();
    let n = changes::status_churn(api, pods, o.status_rate, o.status_secs, o.shape.seed + 1)?;
    thread::sleep(Duration::from_secs(2));
    let secs = now() - t0;
    let (ev1, acpu1, arss1) = api_state(api, c);
    let comp: Vec<f64> = a
        .metric("tern_agent_network_policy_compiles_total")
        .iter()
        .zip(&comp0)
        .map(|(x, y)| x - y)
        .collect();
    let unch: Vec<f64> = a
        .metric("tern_agent_network_policy_events_unchanged_total")
        .iter()
        .zip(&unch0)
        .map(|(x, y)| x - y)
        .collect();
    let txs: Vec<f64> = a.mons.iter().map(|m| m.since(t0).len() as f64).collect();
    let cpu: Vec<f64> = a
        .cpu()
        .iter()
        .zip(&c0)
        .map(|(x, y)| (x - y) / secs * 100.0)
        .collect();
    say(&format!("status churn: {n} writes in {secs:.0} s; per agent compiles {}, unchanged events {}, table transactions {}, CPU {} % (load {})", stats(&comp), stats(&unch), stats(&txs), stats(&cpu), load()));
    let _ = writeln!(out, "| status churn: {} pod status writes/s for {} s ({n} writes: the Ready condition flipped, nothing the compiler reads): API server CPU / RSS / watch events sent per s | {:.1} % / {arss1:.0} MiB / {:.0} |", o.status_rate, o.status_secs, (acpu1 - acpu0) / secs * 100.0, (ev1 - ev0) / secs);
    let _ = writeln!(
        out,
        "| churn, per agent (min / median / max): compiles | {} |",
        stats(&comp)
    );
    let _ = writeln!(
        out,
        "| churn, per agent: events_unchanged_total delta | {} |",
        stats(&unch)
    );
    let _ = writeln!(
        out,
        "| churn, per agent: table transactions (nf_tables listener) | {} |",
        stats(&txs)
    );
    let _ = writeln!(
        out,
        "| churn, per agent: CPU, % of a core | {} |",
        stats(&cpu)
    );
    Ok(())
}

fn timed(
    o: &Opts,
    (api, writer): (&Api, &Writer),
    c: &Cluster,
    a: &Agents,
    watch: &ApiWatch,
    out: &mut String,
) -> Res<PerAgent> {
    let comp0 = a.metric("tern_agent_network_policy_compiles_total");
    let sync0 = a.metric("tern_agent_network_policy_sync_seconds_total");
    let syncs0 = a.metric("tern_agent_network_policy_syncs_total");
    let (ev0, acpu0, _) = api_state(api, c);
    let c0 = a.cpu_apart();
    let t0 = now();
    let timeout = Duration::from_secs(120);
    let lat = changes::run(writer, &a.mons, watch, o.shape.changes, timeout, &|| {
        a.cpu_apart()
    })?;
    let secs = now() - t0;
    for (k, m) in a.mons.iter().enumerate() {
        let l = super::relist::losses(&m.since(t0));
        let _ = writeln!(out, "| changes phase, agent {k}: table replaced {}, elements deleted that no change explains {} {:?} |", l.replaced, l.other_deleted, l.sample);
    }
    let (ev1, acpu1, arss1) = api_state(api, c);
    let comp: Vec<f64> = a
        .metric("tern_agent_network_policy_compiles_total")
        .iter()
        .zip(&comp0)
        .map(|(x, y)| x - y)
        .collect();
    let d = |x: Vec<f64>, y: &[f64]| -> Vec<f64> { x.iter().zip(y).map(|(a, b)| a - b).collect() };
    let sync_s = d(
        a.metric("tern_agent_network_policy_sync_seconds_total"),
        &sync0,
    );
    let syncs = d(a.metric("tern_agent_network_policy_syncs_total"), &syncs0);
    let mean_sync: Vec<f64> = sync_s
        .iter()
        .zip(&syncs)
        .map(|(s, n)| s / n.max(1.0) * 1000.0)
        .collect();
    let nchanges = (o.shape.changes * KINDS.len()) as f64;
    let c1 = a.cpu_apart();
    let per_change = |part: fn(&(f64, f64)) -> f64| -> Vec<f64> {
        c1.iter()
            .zip(&c0)
            .map(|(x, y)| (part(x) - part(y)) / nchanges * 1000.0)
            .collect()
    };
    let (own, child) = (per_change(|c| c.0), per_change(|c| c.1));
    let (nft, listings) = nft_per_change(&lat.cpu, a.pids.len());
    latency_rows(&lat, o, out, a.pids.len());
    let _ = writeln!(out, "| changes phase ({secs:.0} s): CPU per change, the agent's own / its nft children's (min / median / max, ms) | {} / {} |", stats(&own), stats(&child));
    let _ = writeln!(out, "| changes phase: nft's children per change, windows with a drift-check listing (children > {LISTING} s) left out (min / median / max, ms); windows left out | {} ; {} |", stats(&nft), stats(&listings));
    let _ = writeln!(
        out,
        "| changes phase: compiles per agent (min / median / max) for {nchanges} changes | {} |",
        stats(&comp)
    );
    let _ = writeln!(out, "| changes phase: the agent's own sync (compile + render + nft), mean per sync (min / median / max, ms) | {} |", stats(&mean_sync));
    let _ = writeln!(out, "| changes phase: API server CPU / RSS / watch events per s | {:.1} % / {arss1:.0} MiB / {:.1} |", (acpu1 - acpu0) / secs * 100.0, (ev1 - ev0) / secs);
    Ok(PerAgent {
        own,
        child: nft,
        listings,
        lat: lat.per_agent,
    })
}

//! Phases 1–5 of `tern-bench scale` (the module doc of [`super`] says what each measures).
//!
//! Invariant: every API server count is a delta of two reads of its /metrics around the phase,
//! less kwok's own requests over the same time when kwok makes that kind.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use super::server::{self, Snapshot};
use super::{node_name, pod_cidr, say, Opts};
use crate::cluster::api::{now, Api, Write};
use crate::cluster::{agent_metrics, agent_ns, cpu, rss_kib, sum, Cluster};
use crate::stats::{pct, spread};
use crate::Res;

/// kwok's own requests per minute, measured alone.
pub(crate) struct Kwok {
    list: i64,
    watch: i64,
}

/// kwok alone for 60 s: its node LISTs, WATCHes, status PATCHes and the Node watch events.
pub(crate) fn kwok_alone(api: &Api) -> Res<Kwok> {
    let m0 = server::read(api);
    thread::sleep(Duration::from_secs(60));
    let m1 = server::read(api);
    let d = |v, r, s| m1.count(v, r, s) - m0.count(v, r, s);
    let k = Kwok {
        list: d("LIST", "nodes", ""),
        watch: d("WATCH", "nodes", ""),
    };
    say(&format!(
        "kwok alone, 60 s: node LIST {}, WATCH {}, status PATCH {}, Node watch events {}",
        k.list,
        k.watch,
        d("PATCH", "nodes", "status"),
        m1.node_watch_events() - m0.node_watch_events()
    ));
    Ok(k)
}

/// The agents' pids, in order.
fn pids(c: &Cluster, n: usize) -> Res<Vec<u32>> {
    (0..n).map(|k| c.pid(&c.agent_dir(k))).collect()
}

fn agent_sum(k: usize, name: &str) -> f64 {
    sum(&agent_metrics(k), name)
}

/// Phases 1–5.
pub(crate) fn all(o: &Opts, c: &Cluster, api: &Api, kwok: &Kwok) -> Res<()> {
    start(o, c, api)?;
    steady(o, c, api, kwok)?;
    changes(o, api)?;
    restart(o, c, api, false)?;
    restart(o, c, api, true)
}

fn start(o: &Opts, c: &Cluster, api: &Api) -> Res<()> {
    let flags = match o.token_lifetime {
        Some(l) => format!("--node-routes --token-lifetime {l}s"),
        None => "--node-routes".into(),
    };
    let m0 = server::read(api);
    let t0 = Instant::now();
    for k in 0..o.agents {
        c.agent_netns(k)?;
        c.start_agent(k, &node_name(k), &flags)?;
    }
    let want = (o.nodes - 1) as f64;
    let pids = pids(c, o.agents)?;
    for (k, pid) in pids.iter().enumerate() {
        let end = Instant::now() + Duration::from_secs(600);
        while agent_sum(k, "tern_agent_node_routes_installed") != want {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() || Instant::now() > end {
                return Err(format!(
                    "agent {k} not synced; its log: {}",
                    c.agent_dir(k).join("log").display()
                ));
            }
            thread::sleep(Duration::from_millis(500));
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let m1 = server::read(api);
    let routes = Command::new("ip")
        .args(["-n", &agent_ns(0), "-4", "route", "show", "proto", "116"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
        .unwrap_or(0);
    let pages = o.nodes.div_ceil(500);
    say(&format!("phase 1: {} agents started; all synced ({want} routes each; agent 0's kernel: {routes}) after {secs:.1} s", o.agents));
    let tokens =
        m1.count("POST", "serviceaccounts", "token") - m0.count("POST", "serviceaccounts", "token");
    say(&format!(
        "  TokenRequests (POST serviceaccounts/token, less the bench's {}): {} [{}]",
        o.agents,
        tokens - o.agents as i64,
        m1.codes("POST", "serviceaccounts", "token")
    ));
    say(&format!("  node LIST requests: {} (prediction: one list of {pages} pages of 500 per agent = {}); node watches open: {} (prediction: {} + kwok's)", m1.count("LIST", "nodes", "") - m0.count("LIST", "nodes", ""), o.agents * pages, m1.open_node_watches(), o.agents));
    Ok(())
}

/// The refresh schedule's mean interval for a grant of L s (agent/src/schedule.rs
/// refresh_delay: the latest point max(min(0.8 L, L - 600 s), L / 2), less a uniform tenth of L).
pub(crate) fn refresh_mean_s(l: f64) -> f64 {
    (0.8 * l).min(l - 600.0).max(l / 2.0) - 0.05 * l
}

fn steady(o: &Opts, c: &Cluster, api: &Api, kwok: &Kwok) -> Res<()> {
    say(&format!("phase 2: steady window of {} min", o.steady_min));
    let pids = pids(c, o.agents)?;
    let cpu0: Vec<f64> = pids.iter().map(|&p| cpu(p).0).collect();
    let m0 = server::read(api);
    thread::sleep(Duration::from_secs(o.steady_min * 60));
    let m1 = server::read(api);
    let win = (o.steady_min * 60) as f64;
    let d = |v, r, s| (m1.count(v, r, s) - m0.count(v, r, s)) as f64;
    let tr = d("POST", "serviceaccounts", "token");
    let sl = d("LIST", "nodes", "") - (kwok.list * o.steady_min as i64) as f64;
    let sw = d("WATCH", "nodes", "") - (kwok.watch * o.steady_min as i64) as f64;
    let ev = (m1.node_watch_events() - m0.node_watch_events()) as f64;
    let cpu_tot: f64 = pids.iter().zip(&cpu0).map(|(&p, c0)| cpu(p).0 - c0).sum();
    let rss: Vec<f64> = pids.iter().map(|&p| rss_kib(p) as f64 / 1024.0).collect();
    let (g, a) = (o.granted(), o.agents as f64);
    let mean = refresh_mean_s(g as f64);
    say(&format!("  TokenRequests: {tr} in {win} s = {:.4}/s for {a} agents (the schedule, {g} s tokens: 1/{mean:.0} s per agent = {:.4}/s once past the first refresh; simulation: cargo run --release -p tern-agent --example simulate -- {a} 5 {g}s)", tr / win, a / mean));
    say(&format!("  node LIST per agent per hour: {:.2} (prediction 0); WATCH per agent per hour: {:.2} (prediction 12: --watch-timeout 5m)", sl * 3600.0 / win / a, sw * 3600.0 / win / a));
    say(&format!(
        "  Node watch events sent: {ev} ({:.1}/s; kwok's heartbeats to {a} + 1 watchers)",
        ev / win
    ));
    say(&format!(
        "  agents' CPU: {:.4} % of a core each on average; RSS MiB min / median / max: {}",
        cpu_tot / a / win * 100.0,
        spread(&rss)
    ));
    // Past 40 min the start-up tokens (1 h) are within 20 min of their end before phases 3–5;
    // renewed as the kubelet rotates a projected token, so no 401 that nothing under test caused.
    if o.steady_min >= 40 {
        say("  the agents' service-account tokens renewed (the run is past 40 min of their 1 h)");
        renew_sa_tokens(c, o.agents)?;
    }
    Ok(())
}

/// Each agent's service-account token replaced by a fresh 1 h one (`kubectl create token`).
pub(crate) fn renew_sa_tokens(c: &Cluster, agents: usize) -> Res<()> {
    c.bash(&format!("for k in $(seq 0 {}); do kubectl -n tern create token tern-agent --duration 1h >\"$KT/agent-$k/sa/token.new\"; mv \"$KT/agent-$k/sa/token.new\" \"$KT/agent-$k/sa/token\"; done", agents - 1)).map(drop)
}

/// `ip monitor route` in a netns, each line stamped (epoch s) on receipt.
struct RouteMonitor {
    child: Child,
    lines: Arc<Mutex<Vec<(f64, String)>>>,
}

impl RouteMonitor {
    fn start(ns: &str) -> Res<Self> {
        let mut child = Command::new("ip")
            .args(["-n", ns, "monitor", "route"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("ip monitor route in {ns}: {e}"))?;
        let out = child.stdout.take().ok_or("ip monitor: no stdout")?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&lines);
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(mut l) = into.lock() {
                    l.push((now(), line));
                }
            }
        });
        Ok(RouteMonitor { child, lines })
    }

    /// When a route `DST via GW` was first added or replaced.
    fn seen(&self, dst_via: &str) -> Option<f64> {
        let l = self.lines.lock().ok()?;
        l.iter()
            .find(|(_, s)| s.starts_with(dst_via))
            .map(|(t, _)| *t)
    }
}

impl Drop for RouteMonitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn changes(o: &Opts, api: &Api) -> Res<()> {
    say(&format!("phase 3: {} Node re-addressings", o.changes));
    if o.changes > 0 && o.agents + o.changes * 7 >= o.nodes {
        return Err("--nodes must exceed --agents + 7 * --changes (the Nodes re-addressed)".into());
    }
    let m0 = server::read(api);
    let (mut lat, mut missing) = (Vec::new(), 0);
    for c in 1..=o.changes {
        let target = o.agents + c * 7;
        let new_ip = format!("10.95.{}.{}", 200 + c / 250, c % 250 + 1);
        let want = format!("{} via {new_ip} ", pod_cidr(target));
        let mons = (0..o.agents)
            .map(|k| RouteMonitor::start(&agent_ns(k)))
            .collect::<Res<Vec<_>>>()?;
        thread::sleep(Duration::from_secs(1));
        let name = node_name(target);
        let (t_change, _) = api.one(&Write::merge(
            format!("/api/v1/nodes/{name}/status"),
            &json!({"status": {"addresses": [{"type": "InternalIP", "address": new_ip},
                {"type": "Hostname", "address": name}]}}),
        ))?;
        let end = Instant::now() + Duration::from_secs(60);
        while mons.iter().any(|m| m.seen(&want).is_none()) && Instant::now() < end {
            thread::sleep(Duration::from_millis(50));
        }
        for m in &mons {
            match m.seen(&want) {
                Some(t) => lat.push(t - t_change),
                None => missing += 1,
            }
        }
    }
    let m1 = server::read(api);
    say(&format!("  route moved in {} of {} agent-changes: p50 {:.3} s, p99 {:.3} s, max {:.3} s after the PATCH", lat.len(), lat.len() + missing, pct(&lat, 50.0), pct(&lat, 99.0), pct(&lat, 100.0)));
    say(&format!(
        "  node LIST during it: {} (prediction 0)",
        m1.count("LIST", "nodes", "") - m0.count("LIST", "nodes", "")
    ));
    Ok(())
}

/// The agents' node lists and watches (their own counters), summed, and each one's watches.
fn lists_watches(agents: usize) -> (f64, f64, Vec<f64>) {
    let w: Vec<f64> = (0..agents)
        .map(|k| agent_sum(k, "tern_agent_node_routes_watches_total"))
        .collect();
    let l = (0..agents)
        .map(|k| agent_sum(k, "tern_agent_node_routes_lists_total"))
        .sum();
    (l, w.iter().sum(), w)
}

/// Phase 4 (`compact` false: a plain restart) or 5 (etcd compacted while the server is down).
fn restart(o: &Opts, c: &Cluster, api: &Api, compact: bool) -> Res<()> {
    if compact {
        say("phase 5: etcd compacted past the agents' resourceVersion, the API server restarted");
    } else {
        say("phase 4: the API server killed and restarted");
    }
    let (l0, w0, wk) = lists_watches(o.agents);
    c.bash("stop_apiserver")?;
    if compact {
        say(&format!(
            "  etcd at revision {}, compacted to it",
            crate::cluster::compact_etcd()?
        ));
    } else {
        thread::sleep(Duration::from_secs(5));
    }
    let t0 = Instant::now();
    c.bash("start_apiserver --service-account-max-token-expiration 1h")?;
    for (k, w) in wk.iter().enumerate() {
        let end = Instant::now() + Duration::from_secs(300);
        while agent_sum(k, "tern_agent_node_routes_watches_total") <= *w && Instant::now() < end {
            thread::sleep(Duration::from_millis(500));
        }
    }
    say(&format!(
        "  all {} agents watching again {:.0} s after the restart began",
        o.agents,
        t0.elapsed().as_secs_f64()
    ));
    thread::sleep(Duration::from_secs(30));
    let m: Snapshot = server::read(api);
    let (l1, w1, _) = lists_watches(o.agents);
    let pages = o.nodes.div_ceil(500);
    let prediction = if compact {
        format!(
            "prediction: one list of {pages} pages per agent = {}, plus kwok's",
            o.agents * pages
        )
    } else {
        "the stand-in's prediction: 0 of the agents'".into()
    };
    say(&format!("  the new API server's counts over {:.0} s: node LIST requests {} [{}] ({prediction}), ended WATCHes {} [{}], open {} (kwok's included); agents' own counters: lists +{} (prediction {}), watches +{}", t0.elapsed().as_secs_f64(), m.count("LIST", "nodes", ""), m.codes("LIST", "nodes", ""), m.count("WATCH", "nodes", ""), m.codes("WATCH", "nodes", ""), m.open_node_watches(), l1 - l0, if compact { o.agents } else { 0 }, w1 - w0));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::refresh_mean_s;

    #[test]
    fn the_schedules_mean_interval() {
        // 1 h tokens: max(min(2,880, 3,000), 1,800) - 180 = 2,700 s; 10 min: 300 - 30 = 270 s.
        assert_eq!(refresh_mean_s(3600.0), 2700.0);
        assert_eq!(refresh_mean_s(600.0), 270.0);
    }
}

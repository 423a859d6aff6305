//! The fleet phase of the node-routes bench: many agents on one API server, one Node change
//! reaching all of them over the watches they hold, and every watch cut at once.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tern_testkit::netns::TestNetns;

use super::agent::Agent;
use super::{lists_and_watches, node_ip, pod_cidr, set_node, until, wait, Hub, Spec};
use crate::Res;

pub(crate) fn fleet(s: &Spec, hub: &Hub, a1: Agent, work: &Path) -> Res<()> {
    let api = hub.api.as_ref().ok_or("no API server")?;
    let (n, d) = (s.nodes, s.nodes / 10);
    let want = (n - d) as u64;
    let mut agents = vec![a1];
    for k in 2..=s.agents {
        agents.push(Agent::new(&hub.net, k, work)?);
    }
    let start = Instant::now();
    for a in agents.iter_mut().skip(1) {
        a.start(&s.agent, api)?;
    }
    for a in &mut agents {
        until(a, "every agent synced", Duration::from_secs(600), |a| {
            a.metric("tern_agent_node_routes_installed") == Some(want)
        })?;
    }
    println!(
        "{} agents started at once: all at {want} routes after {:.2} s",
        agents.len(),
        start.elapsed().as_secs_f64()
    );

    // Every agent holds its watch (a synced agent opens it right after its reconcile).
    for a in &mut agents {
        until(a, "its watch", Duration::from_secs(60), |a| {
            a.metric("tern_agent_node_routes_watches_total")
                .is_some_and(|w| w >= 1)
        })?;
    }
    // One Node re-addressed: every agent moves its route, over the watch it holds.
    let mark = api.requests().len();
    let target = 2 * d;
    let new_ip = node_ip(n + 2 * d + 1);
    let mut monitors: Vec<Child> = agents.iter().map(|a| monitor(&a.ns)).collect::<Res<_>>()?;
    std::thread::sleep(Duration::from_millis(300));
    let changed = SystemTime::now();
    set_node(api, target, &new_ip);
    let dst = pod_cidr(target);
    for a in &agents {
        wait(
            "the moved route everywhere",
            Duration::from_secs(60),
            || a.ns.ip(&["route", "show", "exact", &dst]).contains(&new_ip),
        )?;
    }
    let day = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() % 86_400.0)
    };
    let t0 = day(changed);
    let mut lat: Vec<f64> = Vec::new();
    for m in &mut monitors {
        let _ = m.kill();
        let mut out = String::new();
        if let Some(mut so) = m.stdout.take() {
            let _ = so.read_to_string(&mut out);
        }
        let _ = m.wait();
        if let Some(ts) = out
            .lines()
            .find(|l| l.contains(&format!("{dst} via {new_ip} ")))
            .and_then(seconds_of_day)
        {
            // Across midnight the day wraps.
            let l = ts - t0;
            lat.push(if l < -43_200.0 { l + 86_400.0 } else { l });
        }
    }
    lat.sort_by(f64::total_cmp);
    let (lists, watches) = lists_and_watches(&api.requests()[mark..]);
    println!(
        "one Node re-addressed: the route moved on {}/{} agents (kernel timestamps), median {:.1} ms, last {:.1} ms after the API change; LISTs {lists}, new watches {watches}",
        lat.len(),
        agents.len(),
        lat.get(lat.len() / 2).copied().unwrap_or(f64::NAN) * 1000.0,
        lat.last().copied().unwrap_or(f64::NAN) * 1000.0
    );

    // Every watch cut at once, as an API server restart: resumes, no LIST.
    let before: Vec<u64> = agents
        .iter()
        .map(|a| {
            a.metric("tern_agent_node_routes_watches_total")
                .unwrap_or(0)
        })
        .collect();
    let mark = api.requests().len();
    let cut = Instant::now();
    api.cut_node_watches();
    for (a, b) in agents.iter_mut().zip(&before) {
        until(a, "watching again", Duration::from_secs(120), |a| {
            a.metric("tern_agent_node_routes_watches_total")
                .is_some_and(|w| w > *b)
        })?;
    }
    let took = cut.elapsed();
    let (lists, watches) = lists_and_watches(&api.requests()[mark..]);
    let lists_total: u64 = agents
        .iter()
        .map(|a| a.metric("tern_agent_node_routes_lists_total").unwrap_or(0))
        .sum();
    println!(
        "every watch cut at once: all {} agents watching again after {:.2} s; LISTs {lists}, watches {watches}; lists since start, all agents: {lists_total}",
        agents.len(),
        took.as_secs_f64()
    );
    for mut a in agents {
        a.stop();
    }
    Ok(())
}

/// `ip -ts monitor route` in `ns`, timestamps in UTC.
fn monitor(ns: &TestNetns) -> Res<Child> {
    Command::new("ip")
        .args(["-n", ns.name(), "-ts", "monitor", "route"])
        .env("TZ", "UTC")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("ip monitor: {e}"))
}

/// Seconds since midnight of an `ip -ts` line (`[2026-12-01T22:36:51.837101] ...`).
fn seconds_of_day(line: &str) -> Option<f64> {
    let ts = line.strip_prefix('[')?.split(']').next()?;
    let time = ts.split('T').nth(1)?;
    let mut p = time.split(':');
    let (h, m, s): (f64, f64, f64) = (
        p.next()?.parse().ok()?,
        p.next()?.parse().ok()?,
        p.next()?.parse().ok()?,
    );
    Some(h * 3600.0 + m * 60.0 + s)
}

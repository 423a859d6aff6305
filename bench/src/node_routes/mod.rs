//! `tern-bench --node-routes`: `tern-agent run --node-routes` at scale against the API server
//! stand-in, which holds `--nodes` Node objects (one IPv4 podCIDR each, InternalIPs in
//! 172.20.0.0/16, the agents' directly connected network on one bridge in a throwaway hub netns).
//!
//! Phases, each timed from the agent's spawn (or the API change) to the state observed:
//! 1. one agent, cold: time to every route installed, its CPU seconds and RSS then, its CPU
//!    seconds over 10 s idle after, for 1,000 watch events that change no route (a kubelet's
//!    status updates) and per reconcile of one Node's change;
//! 2. restart with nothing changed: time to synced (list + reconcile, nothing to do);
//! 3. restart after a tenth of the nodes were deleted and another tenth got a new InternalIP
//!    while it was down: time until those routes are removed and moved;
//! 4. a fleet of `--agents` agents (each its own netns), all started at once: time until all
//!    are synced; then one Node's InternalIP changes: time until the last agent's kernel route
//!    moved (from `ip -ts monitor route` in each netns), and the LISTs and watches the server saw
//!    (must be 0 and 0: one open watch per agent carries it); then every watch is cut at once (an
//!    API server restart): the LISTs that caused (must be 0: each resumes from its
//!    resourceVersion) and the time until every agent watches again.
//!
//! Not a test: prints figures; fails only when a phase does not converge in time. Everything
//! (netns, work dir under /tmp) is removed at exit.

mod agent;
mod fleet;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agent::{Agent, HUB};
use tern_apiserver::ApiServer;
use tern_net::netns::NetNs;
use tern_testkit::netns::TestNetns;

use crate::Res;

const USAGE: &str = "usage: tern-bench --node-routes [--nodes N (5000)] [--agents A (30)] \
[--agent PATH (tern-agent beside tern-bench)]";

pub(crate) struct Spec {
    pub(crate) nodes: usize,
    pub(crate) agents: usize,
    pub(crate) agent: PathBuf,
}

fn parse(args: &[String]) -> Res<Spec> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut s = Spec {
        nodes: 5000,
        agents: 30,
        agent: exe.with_file_name("tern-agent"),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it
            .next()
            .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))?;
        let num = || v.parse::<usize>().map_err(|e| format!("{a}: {e}"));
        match a.as_str() {
            "--nodes" => s.nodes = num()?,
            "--agents" => s.agents = num()?,
            "--agent" => s.agent = PathBuf::from(v),
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    if !(10..=40_000).contains(&s.nodes) || !(1..=250).contains(&s.agents) {
        return Err(format!("--nodes 10..=40000, --agents 1..=250\n{USAGE}"));
    }
    Ok(s)
}

/// Node `i`'s InternalIP (172.20.0.1 on), never an agent's (172.20.254.x) or the hub's.
pub(crate) fn node_ip(i: usize) -> String {
    format!("172.20.{}.{}", i / 250, i % 250 + 1)
}

/// Node `i`'s podCIDR (10.64.0.0/24 on).
pub(crate) fn pod_cidr(i: usize) -> String {
    format!("10.{}.{}.0/24", 64 + i / 256, i % 256)
}

pub(crate) fn set_node(api: &ApiServer, i: usize, ip: &str) {
    api.set_node_with_ips(&format!("node-{i:05}"), &[&pod_cidr(i)], &[ip]);
}

/// Polls `cond` every 20 ms; the time it took, or an error after `limit`.
pub(crate) fn wait(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Res<Duration> {
    let t = Instant::now();
    while !cond() {
        if t.elapsed() > limit {
            return Err(format!("timed out after {limit:?} waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(t.elapsed())
}

/// [`wait`] on one agent, failing at once when it exits.
pub(crate) fn until(
    a: &mut Agent,
    what: &str,
    limit: Duration,
    cond: impl Fn(&Agent) -> bool,
) -> Res<Duration> {
    let t = Instant::now();
    loop {
        a.alive()?;
        if cond(a) {
            return Ok(t.elapsed());
        }
        if t.elapsed() > limit {
            return Err(format!(
                "{}: timed out after {limit:?} waiting for {what}; its log:\n{}",
                a.name,
                a.log_tail()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// LIST and watch requests on the node collection among `reqs`.
pub(crate) fn lists_and_watches(reqs: &[tern_apiserver::RequestRecord]) -> (usize, usize) {
    let nodes = reqs.iter().filter(|r| r.path == "/api/v1/nodes");
    let watch = |q: &str| q.split('&').any(|kv| kv == "watch=1" || kv == "watch=true");
    let w = nodes.clone().filter(|r| watch(&r.query)).count();
    (nodes.count() - w, w)
}

/// The API server stand-in, stopped from inside the hub netns (its shutdown connects to its own
/// address, which exists only there).
pub(crate) struct Hub {
    pub(crate) api: Option<ApiServer>,
    ns: NetNs,
    pub(crate) net: TestNetns,
}

impl Drop for Hub {
    fn drop(&mut self) {
        if let Some(api) = self.api.take() {
            let _ = self.ns.run_in(move || drop(api));
        }
    }
}

fn hub() -> Res<Hub> {
    let net = TestNetns::new("tern-bench-nrhub");
    net.ip(&["link", "add", "br0", "type", "bridge"]);
    net.ip(&["link", "set", "br0", "up"]);
    net.ip(&["addr", "add", &format!("{HUB}/16"), "dev", "br0"]);
    let ns = NetNs::open(net.path()).map_err(|e| e.to_string())?;
    let bind = format!("{HUB}:0").parse().map_err(|e| format!("{e}"))?;
    let api = ns
        .run_in(|| ApiServer::start_on(bind))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("API server stand-in: {e}"))?;
    api.add_service_account("tern", "tern-cni");
    // The real server's bookmark period.
    api.set_bookmark_interval(Duration::from_secs(60));
    Ok(Hub {
        api: Some(api),
        ns,
        net,
    })
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Runs the bench with `args` (after `--node-routes`); returns the exit status.
pub fn main(args: &[String]) -> i32 {
    match parse(args).and_then(|s| run(&s)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tern-bench --node-routes: {e}");
            1
        }
    }
}

fn run(s: &Spec) -> Res<()> {
    let work = tempfile::Builder::new()
        .prefix("tern-bench-nr")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let hub = hub()?;
    let api = hub.api.as_ref().ok_or("no API server")?;
    let n = s.nodes;
    for i in 0..n {
        set_node(api, i, &node_ip(i));
    }
    // As a long-running server's history: the creations are compacted away.
    api.compact_node_history();
    println!("node-routes: {n} Nodes in the API server stand-in, one IPv4 podCIDR each");

    let mut a1 = Agent::new(&hub.net, 1, work.path())?;
    a1.start(&s.agent, api)?;
    let installed =
        |a: &Agent, k: usize| a.metric("tern_agent_node_routes_installed") == Some(k as u64);
    let t = until(&mut a1, "every route", Duration::from_secs(300), |a| {
        installed(a, n)
    })?;
    let (rss, hwm) = a1.rss_kib();
    let cpu = a1.cpu_secs();
    println!(
        "one agent, cold: {} routes in the kernel after {:.2} s; CPU {cpu:.2} s; RSS {:.1} MiB (peak {:.1} MiB)",
        a1.kernel_routes(),
        t.as_secs_f64(),
        mib(rss),
        mib(hwm)
    );
    std::thread::sleep(Duration::from_secs(10));
    println!(
        "one agent, idle 10 s at {n} routes: CPU {:.3} s; RSS {:.1} MiB",
        a1.cpu_secs() - cpu,
        mib(a1.rss_kib().0)
    );
    events(api, &mut a1, n)?;

    a1.stop();
    a1.start(&s.agent, api)?;
    let t = until(
        &mut a1,
        "sync after a restart",
        Duration::from_secs(300),
        |a| a.metric("tern_agent_node_routes_synced") == Some(1) && installed(a, n),
    )?;
    println!(
        "restart, nothing changed: synced after {:.2} s (routes added {}, removed {}); CPU {:.2} s",
        t.as_secs_f64(),
        a1.metric("tern_agent_node_routes_added_total").unwrap_or(0),
        a1.metric("tern_agent_node_routes_removed_total")
            .unwrap_or(0),
        a1.cpu_secs()
    );

    a1.stop();
    let d = n / 10;
    for i in 0..d {
        api.delete_node(&format!("node-{i:05}"));
    }
    for i in d..2 * d {
        set_node(api, i, &node_ip(n + i));
    }
    a1.start(&s.agent, api)?;
    let t = until(
        &mut a1,
        "repair after a restart",
        Duration::from_secs(300),
        |a| {
            installed(a, n - d)
                && a.metric("tern_agent_node_routes_moved_total") == Some(d as u64)
                && a.metric("tern_agent_node_routes_removed_total") == Some(d as u64)
        },
    )?;
    println!(
        "restart after {d} Nodes deleted and {d} re-addressed while down: {d} removed and {d} moved after {:.2} s; CPU {:.2} s; RSS {:.1} MiB",
        t.as_secs_f64(),
        a1.cpu_secs(),
        mib(a1.rss_kib().0)
    );
    fleet::fleet(s, &hub, a1, work.path())
}

/// The cost of watch events at `n` routes: 1,000 `MODIFIED` events that change nothing routed (as
/// a kubelet's status updates), then 100 InternalIP changes 20 ms apart, each a reconcile.
fn events(api: &ApiServer, a: &mut Agent, n: usize) -> Res<()> {
    let applied = |a: &Agent| {
        a.metric("tern_agent_node_routes_watch_events_total{type=\"applied\"}")
            .unwrap_or(0)
    };
    let (e0, cpu0) = (applied(a), a.cpu_secs());
    for i in 0..1000 {
        set_node(api, i % n, &node_ip(i % n));
    }
    until(a, "1000 events", Duration::from_secs(120), |a| {
        applied(a) >= e0 + 1000
    })?;
    let noop = a.cpu_secs() - cpu0;
    let base = 3 * (n / 10);
    let (m0, cpu0) = (
        a.metric("tern_agent_node_routes_moved_total").unwrap_or(0),
        a.cpu_secs(),
    );
    for j in 0..100 {
        set_node(api, base + j, &node_ip(n + base + j));
        std::thread::sleep(Duration::from_millis(20));
    }
    until(a, "100 moves", Duration::from_secs(120), |a| {
        a.metric("tern_agent_node_routes_moved_total") == Some(m0 + 100)
    })?;
    let moved = a.cpu_secs() - cpu0;
    // Put back: the later phases count from the original addresses.
    for j in 0..100 {
        set_node(api, base + j, &node_ip(base + j));
    }
    until(a, "100 moves back", Duration::from_secs(120), |a| {
        a.metric("tern_agent_node_routes_moved_total") == Some(m0 + 200)
    })?;
    println!(
        "watch events at {n} routes: 1000 that change no route, CPU {:.3} s ({:.0} us each); 100 InternalIP changes, CPU {:.3} s ({:.2} ms per reconcile)",
        noop,
        noop * 1000.0,
        moved,
        moved * 10.0
    );
    Ok(())
}

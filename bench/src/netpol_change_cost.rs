//! `tern-bench --netpol-change-cost`: what one NetworkPolicy change costs on its way to the
//! kernel at shape A (Cilium's: 1,000 nodes, 30,000 Pods, 30,000 policies; the cluster of
//! `--netpol-compile`, same flags), by the two paths the agent has, in one run: the engine's
//! table is put into two fresh network namespaces (gone when the run ends); every change's
//! flush goes to the first as its nft script (`nft -f -`, the path every update took before the
//! netlink writer), and to the second as the syncer sends it: the flush's table plan (element
//! moves, sets and chains made and removed with their rules) over netlink
//! (`tern_net::netlink::nftables`) when it has one, else the same nft script. The two tables
//! are compared at the end (`nft -j list table`, the kernel's object handles aside).
//!
//! Per change it separates:
//! - the engine's CPU: `set_*` + `flush` (compile, the script's text and the plan), this
//!   thread's CPU clock;
//! - the nft path: the agent's CPU spawning nft and waiting, the nft child's CPU (user + system,
//!   `RUSAGE_CHILDREN` across the wait), and the apply's wall time;
//! - the netlink path: the write's CPU (this thread's clock, which holds the kernel's work on
//!   the batch: the kernel applies it inside `sendmsg`) and wall time; a change with no plan
//!   pays the nft path there too.
//!
//! "CPU per change" (issue 46's ≤ 2 ms) is the engine's plus the kernel write's (the nft child
//! included); printed per path, with the ratios nft ÷ agent's path of the write's CPU and wall
//! (p50 over the changes that made a transaction; the engine column is over every change).
//!
//! Usage (root): `tern-bench --netpol-change-cost [--nodes 1000] [--pods 30000]
//! [--policies 30000] [--namespaces 1000] [--changes 50] [--seed 7]`.

use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};
use nix::time::{clock_gettime, ClockId};
use tern_net::netlink::nftables::{ElementWriter, NFPROTO_INET};
use tern_net::netns::{run_in_new, NetNs};
use tern_net::nft::Nft;
use tern_netpol::engine::Flush;
use tern_netpol::ruleset::TABLE;

use crate::netpol_compile::{change, cluster, engine, parse, KINDS};
use crate::stats::pct;

fn thread_cpu() -> Duration {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

fn children_cpu() -> Duration {
    getrusage(UsageWho::RUSAGE_CHILDREN)
        .map(|u| tv(u.user_time()) + tv(u.system_time()))
        .unwrap_or_default()
}

fn tv(t: nix::sys::time::TimeVal) -> Duration {
    let us = t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    Duration::from_micros(us)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One kind's costs, µs a change.
#[derive(Default)]
struct Cost {
    engine: Vec<f64>,
    /// The engine's CPU of the changes that made a transaction (the write columns' changes).
    engine_tx: Vec<f64>,
    /// nft path: the agent's spawn and wait plus the child's CPU; its wall time.
    nft_cpu: Vec<f64>,
    nft_wall: Vec<f64>,
    /// The second netns's path (netlink when eligible): CPU and wall.
    nl_cpu: Vec<f64>,
    nl_wall: Vec<f64>,
    /// Changes that made a transaction, and those of them that went over netlink.
    transactions: usize,
    by_netlink: usize,
}

/// The two kernel tables: the nft path's in this thread's netns, the netlink path's in `ns`.
struct Kernels {
    nft: Nft,
    ns: NetNs,
    writer: ElementWriter,
}

impl Kernels {
    /// The nft path: (CPU, wall) of the apply, µs (agent's spawn and wait + the child's CPU).
    fn by_nft(&self, script: &str) -> Result<(f64, f64), String> {
        let (cpu0, ch0, t0) = (thread_cpu(), children_cpu(), Instant::now());
        self.nft.apply(script).map_err(|e| e.to_string())?;
        let (wall, cpu, ch) = (t0.elapsed(), thread_cpu() - cpu0, children_cpu() - ch0);
        Ok((us(cpu + ch), us(wall)))
    }

    /// The agent's path in the second netns: the plan over netlink, or the script through nft
    /// there (on a thread that entered it: its CPU is the child's, its spawn uncounted).
    fn by_agent(&self, f: &Flush) -> Result<(f64, f64, bool), String> {
        if let Some(ops) = f.plan.as_ref().and_then(tern_agent::netpol::table_batch) {
            let (cpu0, t0) = (thread_cpu(), Instant::now());
            self.writer.apply(&ops).map_err(|e| e.to_string())?;
            return Ok((us(thread_cpu() - cpu0), us(t0.elapsed()), true));
        }
        let (ch0, t0) = (children_cpu(), Instant::now());
        let nft = &self.nft;
        let r = self.ns.run_in(|| nft.apply(&f.script));
        r.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
        Ok((us(children_cpu() - ch0), us(t0.elapsed()), false))
    }
}

/// The second netns, held open, and a writer bound to it.
fn second_netns() -> Result<(NetNs, ElementWriter), String> {
    let made = run_in_new(|| -> Result<(NetNs, ElementWriter), String> {
        let ns = NetNs::current().map_err(|e| e.to_string())?;
        let w = ElementWriter::new(NFPROTO_INET, TABLE).map_err(|e| e.to_string())?;
        Ok((ns, w))
    });
    made.map_err(|e| format!("a second netns: {e}"))?
}

fn col(v: &[f64]) -> String {
    format!("{:.0} / {:.0}", pct(v, 50.0), pct(v, 99.0))
}

fn print_header() {
    println!(
        "{:<42} {:>13} {:>15} {:>15} {:>15} {:>15} {:>10} {:>6} {:>6}",
        "change (p50 / p99, µs)",
        "engine CPU",
        "nft: write CPU",
        "nft: wall",
        "agent: write CPU",
        "agent: wall",
        "netlink/tx",
        "CPU ×",
        "wall ×"
    );
}

fn print_kind(what: &str, k: &Cost) {
    if k.transactions == 0 {
        println!("{what:<42} {:>13}   no transaction", col(&k.engine));
        return;
    }
    let ratio = |a: &[f64], b: &[f64]| pct(a, 50.0) / pct(b, 50.0).max(1.0);
    println!(
        "{what:<42} {:>13} {:>15} {:>15} {:>15} {:>15} {:>10} {:>6.1} {:>6.1}",
        col(&k.engine),
        col(&k.nft_cpu),
        col(&k.nft_wall),
        col(&k.nl_cpu),
        col(&k.nl_wall),
        format!("{}/{}", k.by_netlink, k.transactions),
        ratio(&k.nft_cpu, &k.nl_cpu),
        ratio(&k.nft_wall, &k.nl_wall),
    );
    let total = |w: &[f64]| {
        let sum: Vec<f64> = k.engine_tx.iter().zip(w).map(|(a, b)| a + b).collect();
        col(&sum)
    };
    println!(
        "{:<42} CPU per change with a transaction (engine + write): nft path {} µs, agent's {} µs",
        "",
        total(&k.nft_cpu),
        total(&k.nl_cpu)
    );
}

/// An `nft -j` listing without the kernel's object handles (numbers the kernel hands out per
/// table as objects are made: not what the table holds).
fn without_handles(listing: &[u8]) -> Option<serde_json::Value> {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.remove("handle");
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v: serde_json::Value = serde_json::from_slice(listing).ok()?;
    strip(&mut v);
    Some(v)
}

/// Runs the bench; the exit status.
pub fn main(args: &[String]) -> i32 {
    let mut args = args.to_vec();
    if !args.iter().any(|a| a == "--changes") {
        args.extend(["--changes".into(), "50".into()]);
    }
    let shape = match parse(&args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tern-bench --netpol-change-cost: {e}");
            return 2;
        }
    };
    let (mut r, mut c, _) = cluster(&shape);
    let (mut e, _) = engine(&c);
    let run = run_in_new(move || -> Result<(), String> {
        let nft = Nft::find().map_err(|e| e.to_string())?;
        let (ns, writer) = second_netns()?;
        let k = Kernels { nft, ns, writer };
        let t = Instant::now();
        let whole = e.table().replace_script();
        k.nft.apply(&whole).map_err(|e| e.to_string())?;
        let first = t.elapsed().as_secs_f64();
        k.ns.run_in(|| k.nft.apply(&whole))
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        let size = e.size();
        println!(
            "shape: {} pods, {} policies ({} in force on n0); the first table ({} sets, {} elements) applied in {first:.2} s, twice",
            c.pods.len(),
            c.policies.len(),
            e.policies_in_force(),
            size.sets,
            size.elements,
        );
        print_header();
        for (kind, what) in KINDS.iter().enumerate() {
            let mut cost = Cost::default();
            for n in 0..shape.changes {
                let cpu0 = thread_cpu();
                let (_, f) = change(kind, &mut r, &shape, &mut c, &mut e, n);
                cost.engine.push(us(thread_cpu() - cpu0));
                if f.script.is_empty() {
                    continue;
                }
                cost.engine_tx.push(*cost.engine.last().unwrap_or(&0.0));
                let (cpu, wall) = k
                    .by_nft(&f.script)
                    .map_err(|e| format!("{what}: nft: {e}"))?;
                cost.nft_cpu.push(cpu);
                cost.nft_wall.push(wall);
                let (cpu, wall, nl) = k.by_agent(&f).map_err(|e| format!("{what}: {e}"))?;
                cost.nl_cpu.push(cpu);
                cost.nl_wall.push(wall);
                cost.by_netlink += usize::from(nl);
                cost.transactions += 1;
            }
            print_kind(what, &cost);
        }
        // `nft -j`: every object with its kernel handle, rules with their expressions as nft
        // reads them back.
        let json = || {
            std::process::Command::new(k.nft.bin())
                .args(["-j", "list", "table", "inet", TABLE])
                .output()
                .map(|o| o.stdout)
                .unwrap_or_default()
        };
        let nft_path = json();
        let agent_path = k.ns.run_in(json).unwrap_or_default();
        let (a, b) = (without_handles(&agent_path), without_handles(&nft_path));
        let same = a.is_some() && a == b;
        let handles = agent_path == nft_path;
        println!("the agent's path lists the same table as the nft path at the end (nft -j): {same} (the kernel's object handles equal too: {handles})");
        Ok(())
    });
    match run {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            eprintln!("tern-bench --netpol-change-cost: {e}");
            1
        }
        Err(e) => {
            eprintln!("tern-bench --netpol-change-cost: a new netns: {e}");
            1
        }
    }
}

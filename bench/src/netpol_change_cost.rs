//! `tern-bench --netpol-change-cost`: what one NetworkPolicy change costs the agent and what it
//! costs the `nft` child it runs, at shape A (Cilium's: 1,000 nodes, 30,000 Pods, 30,000
//! policies; the cluster of `--netpol-compile`, same flags), in process and through the real
//! kernel: the engine's table is put into a fresh network namespace of this thread (gone when
//! the run ends) and every change's script is applied there with `nft -f -`, as the syncer does.
//!
//! Per change it separates:
//! - the agent's own CPU: the engine's `set_*` + `flush` (compile, and the script's text), then
//!   spawning nft, writing the script to its stdin and waiting (this thread's CPU clock);
//! - the nft child's CPU (user + system, `RUSAGE_CHILDREN` across the wait) and the wall time of
//!   the whole apply.
//!
//! "CPU per change" (issue 46's ≤ 2 ms) is the agent's own; the nft child's is printed apart.
//! Prints per kind of change p50 / p99 of each and the agent's share of the whole.
//!
//! Usage (root): `tern-bench --netpol-change-cost [--nodes 1000] [--pods 30000]
//! [--policies 30000] [--namespaces 1000] [--changes 50] [--seed 7]`.

use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};
use nix::time::{clock_gettime, ClockId};
use tern_net::nft::Nft;

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

/// One change's costs, µs.
#[derive(Default)]
struct Cost {
    compile: Vec<f64>,
    exec: Vec<f64>,
    own: Vec<f64>,
    child: Vec<f64>,
    wall: Vec<f64>,
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
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
    let run = tern_net::netns::run_in_new(move || -> Result<(), String> {
        let nft = Nft::find().map_err(|e| e.to_string())?;
        let t = Instant::now();
        nft.apply(&e.table().replace_script())
            .map_err(|e| e.to_string())?;
        let size = e.size();
        println!(
            "shape: {} pods, {} policies ({} in force on n0); the first table ({} sets, {} elements) applied in {:.2} s",
            c.pods.len(),
            c.policies.len(),
            e.policies_in_force(),
            size.sets,
            size.elements,
            t.elapsed().as_secs_f64()
        );
        println!(
            "{:<44} {:>16} {:>16} {:>16} {:>16} {:>16} {:>6}",
            "change (p50 / p99)",
            "compile µs",
            "spawn+wait µs",
            "agent's own µs",
            "nft child CPU µs",
            "apply wall µs",
            "own %"
        );
        for (kind, what) in KINDS.iter().enumerate() {
            let mut k = Cost::default();
            for n in 0..shape.changes {
                let cpu0 = thread_cpu();
                let (_, script) = change(kind, &mut r, &shape, &mut c, &mut e, n);
                let cpu1 = thread_cpu();
                let (ch0, t1) = (children_cpu(), Instant::now());
                if !script.is_empty() {
                    nft.apply(&script).map_err(|e| format!("{what}: {e}"))?;
                }
                let (wall, cpu2, ch1) = (t1.elapsed(), thread_cpu(), children_cpu());
                k.compile.push(us(cpu1 - cpu0));
                k.exec.push(us(cpu2 - cpu1));
                k.own.push(us(cpu2 - cpu0));
                k.child.push(us(ch1 - ch0));
                k.wall.push(us(wall));
            }
            let col = |v: &[f64]| format!("{:.0} / {:.0}", pct(v, 50.0), pct(v, 99.0));
            let share = pct(&k.own, 50.0) / (pct(&k.own, 50.0) + pct(&k.child, 50.0)).max(1.0);
            println!(
                "{what:<44} {:>16} {:>16} {:>16} {:>16} {:>16} {:>5.0}%",
                col(&k.compile),
                col(&k.exec),
                col(&k.own),
                col(&k.child),
                col(&k.wall),
                share * 100.0
            );
        }
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

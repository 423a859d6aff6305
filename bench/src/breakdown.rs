//! `tern-bench --breakdown`: where one chain ADD's time goes, per plugin and per phase, from the
//! plugins' own marks (`TERN_TRACE_PHASES`, `tern_node::phase`), beside the same chain untraced,
//! the reference chains and the kernel floor ([`crate::floor`]); parallelism 1.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use crate::env::Env;
use crate::exec::{SPAWNS, TRACE};
use crate::floor::{exec_chain_floor, exec_floor, files_floor, kernel_floor};
use crate::opts::Opts;
use crate::rounds::{bench_subject, pct, Phase};
use crate::subjects::{subjects, Subject};
use crate::Res;

/// The chains of the breakdown: (label, traced). The traced ones run with `TERN_TRACE_PHASES`.
const ROWS: &[(&str, bool)] = &[
    ("tt-chain/ti", true),
    ("tt-chain/hl", true),
    ("tt-chain/ti", false),
    ("ref-chain", false),
    ("ref-chain/1.10", false),
];

/// One traced process: its program, verb, and phases in order as (name, ns).
struct Traced {
    program: String,
    verb: String,
    phases: Vec<(String, u64)>,
}

/// Parses the trace file and joins each line with its spawn and exit times (by pid, the `main`
/// mark between them): exec + start-up = `main` − spawn, each phase = its mark − the previous
/// one, exit = reaped − the last mark.
fn read_trace(path: &Path, spawns: &[(u32, u64, u64)]) -> Res<Vec<Traced>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split(' ');
        let (Some(program), Some(verb), Some(pid)) = (f.next(), f.next(), f.next()) else {
            return Err(format!("trace line {line:?}: malformed"));
        };
        let pid: u32 = pid
            .strip_prefix("pid=")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| format!("trace line {line:?}: no pid"))?;
        let marks: Vec<(&str, u64)> = f
            .filter_map(|kv| {
                let (k, v) = kv.rsplit_once('=')?;
                Some((k, v.parse().ok()?))
            })
            .collect();
        let Some(&("main", main)) = marks.first() else {
            return Err(format!("trace line {line:?}: no main mark first"));
        };
        let Some(&(_, spawn, exit)) = spawns
            .iter()
            .find(|(p, s, e)| *p == pid && *s <= main && main <= *e)
        else {
            continue; // a delegate's own line (exec'd tern-ipam), not spawned by the bench
        };
        let mut phases = vec![("exec+start-up".to_owned(), main - spawn)];
        let mut prev = main;
        for (name, t) in &marks[1..] {
            phases.push(((*name).to_owned(), t.saturating_sub(prev)));
            prev = *t;
        }
        phases.push(("exit".to_owned(), exit.saturating_sub(prev)));
        out.push(Traced {
            program: program.to_owned(),
            verb: verb.to_owned(),
            phases,
        });
    }
    Ok(out)
}

/// Prints, for each program's ADDs: per phase the mean count per ADD, mean and p50 (ms, of the
/// phase's sum within one ADD) and its share of the mean total.
fn print_table(label: &str, traced: &[Traced]) {
    let mut programs: Vec<&str> = Vec::new();
    for t in traced.iter().filter(|t| t.verb == "ADD") {
        if !programs.contains(&t.program.as_str()) {
            programs.push(&t.program);
        }
    }
    for prog in programs {
        let adds: Vec<&Traced> = traced
            .iter()
            .filter(|t| t.verb == "ADD" && t.program == prog)
            .collect();
        let mut order: Vec<String> = Vec::new();
        let mut sums: HashMap<String, Vec<Duration>> = HashMap::new();
        let mut counts: HashMap<String, usize> = HashMap::new();
        let mut totals = Vec::new();
        for (i, t) in adds.iter().enumerate() {
            let mut per: HashMap<&str, u64> = HashMap::new();
            for (name, ns) in &t.phases {
                if !order.contains(name) {
                    order.push(name.clone());
                }
                *per.entry(name).or_default() += ns;
                *counts.entry(name.clone()).or_default() += 1;
            }
            for name in &order {
                let v = sums.entry(name.clone()).or_default();
                v.resize(i, Duration::ZERO); // a phase absent from earlier ADDs counts as 0
                v.push(Duration::from_nanos(
                    per.get(name.as_str()).copied().unwrap_or(0),
                ));
            }
            totals.push(Duration::from_nanos(t.phases.iter().map(|(_, n)| n).sum()));
        }
        let n = adds.len().max(1) as f64;
        let mean = |v: &[Duration]| v.iter().map(Duration::as_secs_f64).sum::<f64>() * 1e3 / n;
        let total_mean = mean(&totals);
        println!(
            "\n{label}: {prog} ADD, {} runs; total spawn -> reaped exit p50 {:.3} ms, mean {total_mean:.3} ms",
            adds.len(),
            pct(&totals, 0.5)
        );
        println!(
            "  {:<24} {:>6} {:>9} {:>9} {:>6}",
            "phase", "n/ADD", "mean ms", "p50 ms", "share"
        );
        for name in &order {
            let mut v = sums.remove(name).unwrap_or_default();
            v.resize(adds.len(), Duration::ZERO);
            let m = mean(&v);
            println!(
                "  {name:<24} {:>6.1} {m:>9.3} {:>9.3} {:>5.1}%",
                counts.get(name).copied().unwrap_or(0) as f64 / n,
                pct(&v, 0.5),
                100.0 * m / total_mean
            );
        }
    }
}

/// Runs the breakdown: `o.pods` pods per row in `o.rounds` rotating rounds at parallelism 1.
pub(crate) fn breakdown(o: &Opts, env: &mut Env) -> Res<()> {
    let all = subjects(o, &env.work, &env.run_work, None);
    let mut rows: Vec<(&Subject, bool)> = Vec::new();
    for (label, traced) in ROWS {
        match all.iter().find(|s| s.label == *label) {
            Some(s) => rows.push((s, *traced)),
            None => println!("(no {label} row: its plugins are missing)"),
        }
    }
    let work = env.work.clone();
    let trace_file = |label: &str| work.join(format!("trace-{}", label.replace('/', "-")));
    println!(
        "tern-bench --breakdown: {} pods per row in {} rotating rounds, parallelism 1; traced rows run with TERN_TRACE_PHASES",
        o.pods, o.rounds
    );
    for (s, _) in &rows {
        bench_subject(env, s, 4, 1, "warm")?;
    }
    let rounds = o.rounds.min(o.pods).max(1);
    let mut acc: Vec<Phase> = rows.iter().map(|_| Phase::default()).collect();
    let mut floor = Phase::default();
    let mut files = Phase::default();
    let mut execs = Phase::default();
    let mut done = 0;
    for r in 0..rounds {
        let n = o.pods / rounds + usize::from(r < o.pods % rounds);
        floor.lat.extend(kernel_floor(env, n, done)?.lat);
        files.lat.extend(files_floor(env, n, done)?.lat);
        execs.lat.extend(exec_floor(env, &o.tern, n)?.lat);
        done += n;
        for j in 0..rows.len() {
            let i = (j + r) % rows.len();
            let (s, traced) = rows[i];
            if let Ok(mut t) = TRACE.lock() {
                *t = traced.then(|| trace_file(s.label));
            }
            let res = bench_subject(env, s, n, 1, &format!("b{r}{}", u8::from(traced)));
            if let Ok(mut t) = TRACE.lock() {
                *t = None;
            }
            acc[i].lat.extend(res?.0.lat);
        }
    }
    let spawns = SPAWNS.lock().map(|s| s.clone()).unwrap_or_default();
    for (s, traced) in &rows {
        if *traced {
            let t = read_trace(&trace_file(s.label), &spawns)?;
            print_table(s.label, &t);
        }
    }
    let p50 = |i: usize| pct(&acc[i].lat, 0.5);
    let kfloor = pct(&floor.lat, 0.5);
    let efloor = exec_chain_floor(&floor, &files, &execs);
    println!("\nchain ADD p50, ms (same rounds):");
    for (i, (s, traced)) in rows.iter().enumerate() {
        println!(
            "  {:<16} {:<9} {:>8.3}  (p99 {:.3}; {:.2}x the exec-chain floor, {:+.3} ms above it; {:.2}x the kernel floor)",
            s.label,
            if *traced { "traced" } else { "untraced" },
            p50(i),
            pct(&acc[i].lat, 0.99),
            p50(i) / efloor,
            p50(i) - efloor,
            p50(i) / kfloor
        );
    }
    println!(
        "  {:<26} {efloor:>8.3}  (the kernel floor + the files + tern's and tern-tuning's execs, a VERSION each: p50 {:.3}, p99 {:.3})",
        "exec-chain floor",
        pct(&execs.lat, 0.5),
        pct(&execs.lat, 0.99)
    );
    println!(
        "  {:<26} {:>8.3}  (p99 {:.3}; the ADD's files in one long-lived process: lease and cursor in the IPAM data directory on the bench's disk, state and tuning backup on tmpfs; O_TMPFILE + write + linkat each, the cursor in place)",
        "files",
        pct(&files.lat, 0.5),
        pct(&files.lat, 0.99)
    );
    println!(
        "  {:<26} {kfloor:>8.3}  (p99 {:.3}; tern + tern-tuning's kernel work in one long-lived process: pod netns open + socket inside, veth pair, 2 host sysctls, 2 links up, 1 address, 3 routes, 3 pod sysctls; GETLINK of both ends)",
        "kernel floor",
        pct(&floor.lat, 0.99)
    );
    if let (Some(on), Some(off)) = (
        rows.iter()
            .position(|(s, t)| s.label == "tt-chain/ti" && *t),
        rows.iter()
            .position(|(s, t)| s.label == "tt-chain/ti" && !*t),
    ) {
        println!(
            "  tracing on costs {:+.3} ms on the chain's ADD p50 (traced - untraced)",
            p50(on) - p50(off)
        );
    }
    Ok(())
}

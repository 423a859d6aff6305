//! `tern-bench --reports`: what the verb report (one datagram per verb to
//! `/run/tern/metrics.sock`) costs tern's ADD and DEL. The same tern row (tern + host-local,
//! exec'd as a runtime does, parallelism 1) twice in alternating rounds: "no agent" (nothing
//! bound at the socket: the send fails with ENOENT) and "agent" (tern-agent's own receiver,
//! `tern_agent::run::verbs`, bound there and counting); prints ADD and DEL p50/p99 of both, the
//! difference of the p50s, and checks the receiver counted every verb; then the send alone,
//! timed in-process (mean of 20,000 calls) with nothing bound and with the receiver bound.
//!
//! Refuses to run when something (a node's real agent) is bound at the socket; creates
//! `/run/tern` when missing and removes it again when it made it and it is empty.

use std::path::Path;

use serde_json::json;
use std::time::Instant;
use tern_agent::run::verbs::{VerbMetrics, VerbReceiver};

use tern_node::report::{VerbReport, REPORT_SOCKET};

use crate::env::Env;
use crate::rounds::{bench_subject, pct, Phase};
use crate::subjects::Subject;
use crate::Res;

const USAGE: &str = "usage: tern-bench --reports [--pods N (400)] [--rounds R (8)]";

fn parse(args: &[String]) -> Res<(usize, usize)> {
    let (mut pods, mut rounds) = (400, 8);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v: usize = it
            .next()
            .ok_or_else(|| format!("{a} needs a value"))?
            .parse()
            .map_err(|e| format!("{a}: {e}"))?;
        match a.as_str() {
            "--pods" => pods = v,
            "--rounds" => rounds = v,
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    if pods == 0 || rounds == 0 {
        return Err(format!("--pods and --rounds must be positive\n{USAGE}"));
    }
    Ok((pods, rounds.min(pods)))
}

/// Runs the comparison; the exit status (1 on bad usage or a failed run).
pub(crate) fn main(args: &[String]) -> i32 {
    match parse(args).and_then(|(p, r)| run(p, r)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tern-bench --reports: {e}");
            1
        }
    }
}

fn run(pods: usize, rounds: usize) -> Res<()> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let tern = exe.with_file_name("tern");
    let sock = Path::new(REPORT_SOCKET);
    let run_dir = sock.parent().unwrap_or(Path::new("/run/tern"));
    let made_dir = !run_dir.exists();
    let mut env = Env::new()?;
    let conf = |name: &str, subnet: &str| {
        json!({"cniVersion": "1.0.0", "name": name, "type": "tern", "mtu": 1500,
            "stateDir": env.run_work.join(name),
            "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]],
                     "dataDir": env.work.join(name)}})
    };
    let quiet = Subject::single(
        "tern",
        tern.clone(),
        conf("rep-none", "10.110.0.0/16"),
        "/usr/lib/cni",
    );
    let heard = Subject::single(
        "tern+agent",
        tern,
        conf("rep-agent", "10.111.0.0/16"),
        "/usr/lib/cni",
    );
    let metrics = VerbMetrics::default();
    let mut acc = [(Phase::default(), Phase::default()), Default::default()];
    let mut result = Ok(());
    for r in 0..=rounds {
        // Round 0 warms both up (page cache, first exec), untimed.
        let (n, tag) = if r == 0 {
            (4, "warm".to_owned())
        } else {
            (
                pods / rounds + usize::from(r - 1 < pods % rounds),
                format!("r{r}"),
            )
        };
        for j in 0..2 {
            let i = (j + r) % 2;
            let outcome = if i == 0 {
                bench_subject(&mut env, &quiet, n, 1, &tag)
            } else {
                let rx =
                    VerbReceiver::start(sock, metrics.clone()).map_err(|e| format!("{e:#}"))?;
                let o = bench_subject(&mut env, &heard, n, 1, &tag);
                rx.stop();
                o
            };
            match outcome {
                Ok((add, del)) if r > 0 => {
                    acc[i].0.lat.extend(add.lat);
                    acc[i].1.lat.extend(del.lat);
                }
                Ok(_) => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_err() {
            break;
        }
    }
    drop(env);
    if made_dir {
        let _ = std::fs::remove_dir(run_dir);
    }
    result?;
    println!("tern-bench --reports: tern + host-local, {pods} pods per row, parallelism 1, {rounds} alternating rounds (ms)");
    println!(
        "{:<9} | {:>8} {:>8} | {:>8} {:>8}",
        "row", "ADD p50", "ADD p99", "DEL p50", "DEL p99"
    );
    for (label, (add, del)) in ["no agent", "agent"].iter().zip(&acc) {
        println!(
            "{label:<9} | {:>8.3} {:>8.3} | {:>8.3} {:>8.3}",
            pct(&add.lat, 0.5),
            pct(&add.lat, 0.99),
            pct(&del.lat, 0.5),
            pct(&del.lat, 0.99)
        );
    }
    println!(
        "ADD p50 agent - no agent: {:+.3} ms; DEL p50: {:+.3} ms",
        pct(&acc[1].0.lat, 0.5) - pct(&acc[0].0.lat, 0.5),
        pct(&acc[1].1.lat, 0.5) - pct(&acc[0].1.lat, 0.5)
    );
    // The send alone, in-process: what a plugin pays for it, without exec and verb noise.
    let r = VerbReport::new("tern", "ADD", 0, std::time::Duration::from_millis(3));
    let calls = 20_000u32;
    let time_sends = || {
        let t = Instant::now();
        for _ in 0..calls {
            r.send_to(sock);
        }
        t.elapsed().as_secs_f64() * 1e6 / f64::from(calls)
    };
    let absent = time_sends();
    let bench_metrics = VerbMetrics::default();
    let rx = VerbReceiver::start(sock, bench_metrics.clone()).map_err(|e| format!("{e:#}"))?;
    let bound = time_sends();
    rx.stop();
    if made_dir {
        let _ = std::fs::remove_dir(run_dir);
    }
    println!(
        "one report sent in-process, mean of {calls}: {absent:.2} µs with nothing bound, {bound:.2} µs to the receiver ({} of {calls} counted; the rest found its queue full)",
        bench_metrics.count("tern", "ADD", 0)
    );
    let want = (pods + 4) as u64;
    let (adds, dels) = (
        metrics.count("tern", "ADD", 0),
        metrics.count("tern", "DEL", 0),
    );
    println!("reports counted by the receiver: {adds} ADD, {dels} DEL (of {want} each, warm-up included)");
    if adds != want || dels != want {
        return Err(format!(
            "the receiver counted {adds} ADD and {dels} DEL reports, not {want}"
        ));
    }
    Ok(())
}

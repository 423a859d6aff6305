//! `tern-bench churn`: the long churn run: pods ADDed and DELeted
//! through libcni with the default chain, several at once, random SIGKILLs of the running
//! plugins mixed in, then an audit of the node; prints the counts. The engine is
//! `tern_testkit::churn`, whose short run is an end-to-end test.
//!
//! Exit status: 0 when every DEL exited 0 and nothing was left, 1 otherwise (or on bad usage).

use std::time::Duration;

use tern_testkit::churn::{Node, Spec};

const USAGE: &str = "usage: tern-bench churn [--pods N (2000)] [--parallel N (8)] \
[--kill-percent P (25)] [--max-kill-delay-ms MS (20)] [--seed S]";

fn parse(args: &[String]) -> Result<Spec, String> {
    let mut spec = Spec {
        pods: 2000,
        parallel: 8,
        kill_percent: 25,
        max_kill_delay: Duration::from_millis(20),
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs()),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = || -> Result<u64, String> {
            it.next()
                .ok_or_else(|| format!("{a} needs a value"))?
                .parse()
                .map_err(|e| format!("{a}: {e}"))
        };
        match a.as_str() {
            "--pods" => spec.pods = usize::try_from(num()?).map_err(|e| e.to_string())?,
            "--parallel" => spec.parallel = usize::try_from(num()?).map_err(|e| e.to_string())?,
            "--kill-percent" => spec.kill_percent = num()?.min(100),
            "--max-kill-delay-ms" => spec.max_kill_delay = Duration::from_millis(num()?),
            "--seed" => spec.seed = num()?,
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    if spec.pods == 0 || spec.parallel == 0 {
        return Err(format!("--pods and --parallel must be positive\n{USAGE}"));
    }
    Ok(spec)
}

/// Runs the churn with `args` (after `--churn`); returns the exit status.
pub fn main(args: &[String]) -> i32 {
    let spec = match parse(args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tern-bench churn: {e}");
            return 2;
        }
    };
    let node = match Node::new("bench") {
        Ok(n) => n,
        Err(e) => {
            eprintln!("tern-bench churn: {e}");
            return 1;
        }
    };
    println!(
        "churn: {} pods, {} in parallel, {}% of ADDs killed within {:?}, seed {}",
        spec.pods, spec.parallel, spec.kill_percent, spec.max_kill_delay, spec.seed
    );
    let r = node.run(&spec);
    let secs = r.elapsed.as_secs_f64();
    println!(
        "churn: {} pods in {secs:.1} s ({:.1} pods/s): ADD ok {}, ADD failed {}, kills landed {} {:?}",
        r.pods,
        r.pods as f64 / secs.max(f64::EPSILON),
        r.adds_ok,
        r.adds_failed,
        r.kills_landed,
        r.killed
    );
    println!(
        "churn: DEL ok {}, DEL failed {}; leaks: {} in pods, {} on the node; host-local torn reservations {}",
        r.dels_ok,
        r.del_failures.len(),
        r.pod_leaks.len(),
        r.node_leaks.len(),
        r.host_local_torn
    );
    for p in r
        .del_failures
        .iter()
        .chain(&r.pod_leaks)
        .chain(&r.node_leaks)
        .take(20)
    {
        println!("  {p}");
    }
    i32::from(r.problems() != 0)
}

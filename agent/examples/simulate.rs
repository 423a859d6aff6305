//! Fleet simulation on a virtual clock: every node runs the agent's own [`Planner`] (the type the
//! refresher thread drives) with `tern-agent run`'s default settings, against an API server that
//! grants tokens of a given lifetime and is down for 30 minutes.
//!
//! `cargo run -p tern-agent --example simulate [--outage MIN] [--outage-at SECS] [--start-spread
//! SECS] [--seed N] [nodes] [days] [lifetime ...]`, lifetimes `1h`, `24h`, `1y-warnafter` or `<N>s`
//! (a grant of N seconds, as the agent's `--token-lifetime` asks of scripts/scale's server;
//! default: the first three; 5,000 nodes, 7 days, a 10-minute outage). Prints a Markdown table.
//!
//! Model: every node starts within the first 10 minutes (a DaemonSet rollout; `--start-spread`
//! sets another window, e.g. the seconds scripts/scale took to start its agents) and asks for the
//! default lifetime (24 h). The server grants `1h` (a `--service-account-max-token-expiration=1h`
//! cap), `24h` (as asked), or `1y-warnafter` (`status.expirationTimestamp` 3607 s ahead while the
//! JWT stays valid for a year, as with `--service-account-extend-token-expiration`: the agent
//! schedules from the status, the token never expires). An outage (default 10 minutes) starts on
//! day 4 at 12:00, when the fleet's refreshes are spread evenly (`--outage-at` puts it that many
//! seconds after the first node's start instead, as scripts/scale's `--outage` phase prints): every request in it fails at once without `Retry-After` (connection refused, the worst
//! case for load). Requests outside it succeed at once. Plugin-triggered channel requests are not
//! modelled (they need a 401, which an outage does not produce).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tern_agent::plan::Planner;
use tern_agent::schedule::Rng;
use tern_agent::RunConfig;

/// 2026-01-01T00:00:00Z: the virtual wall clock's start (Unix ms).
const T0: i64 = 1_767_225_600_000;
const DAY: i64 = 86_400_000;
const MIN: i64 = 60_000;

/// What the server grants.
#[derive(Clone)]
pub struct Lifetime {
    /// Its name on the command line.
    pub name: String,
    /// What `status.expirationTimestamp` says, from the grant (s).
    pub status_s: i64,
    /// How long the token is accepted (s).
    pub valid_s: i64,
}

/// TokenRequests per second and freshness, for one lifetime.
pub struct Row {
    /// Steady state: mean per second.
    pub steady_mean: f64,
    /// Steady state: busiest second.
    pub steady_peak: u32,
    /// During the outage: mean per second.
    pub outage_mean: f64,
    /// During the outage: busiest second.
    pub outage_peak: u32,
    /// First 5 minutes after the outage: mean per second.
    pub after_mean: f64,
    /// First 5 minutes after the outage: busiest second.
    pub after_peak: u32,
    /// Least time a node's token had left when a scheduled refresh (one after a success) fell
    /// due, from `status.expirationTimestamp` (s; start-up aside).
    pub min_margin_s: f64,
    /// Longest wait, from the server's return, of a node that failed in the outage for its next
    /// token (s).
    pub slowest_recovery_s: f64,
    /// Sum over nodes of the time they held an expired token (s).
    pub expired_node_s: f64,
}

/// A grant of exactly N seconds from a `<N>s` argument (status and validity alike).
fn granted_seconds(arg: &str) -> Lifetime {
    let secs: i64 = arg
        .strip_suffix('s')
        .and_then(|n| n.parse().ok())
        .filter(|n| *n >= 600)
        .expect("a lifetime is 1h, 24h, 1y-warnafter or <N>s with N >= 600 (TokenRequest's least)");
    Lifetime {
        name: arg.into(),
        status_s: secs,
        valid_s: secs,
    }
}

/// When the fleet starts and when the server is down, and the seed of every node's jitter.
#[derive(Clone)]
pub struct Scenario {
    /// Nodes start uniformly within this many ms of the first.
    pub start_spread_ms: i64,
    /// The outage begins this many ms after the first start.
    pub outage_at_ms: i64,
    /// The outage lasts this many minutes.
    pub outage_min: i64,
    /// Seed of the generator that seeds each node's.
    pub seed: u64,
}

impl Scenario {
    /// The default: a rollout over 10 minutes, an outage of `outage_min` minutes on day 4 at
    /// 12:00, when the fleet's refreshes are spread evenly.
    pub fn day_four(outage_min: i64) -> Self {
        Scenario {
            start_spread_ms: 10 * MIN,
            outage_at_ms: 3 * DAY + 12 * 60 * MIN,
            outage_min,
            seed: 20_260_101,
        }
    }
}

/// Runs `nodes` planners for `days` (long enough for the outage and 5 minutes after it) against
/// `life`, as `sc` says.
pub fn simulate(nodes: usize, days: i64, life: &Lifetime, sc: &Scenario) -> Row {
    let policy = RunConfig::with_defaults(String::new(), String::new()).policy;
    let horizon = days * DAY;
    let o0 = sc.outage_at_ms;
    let o1 = o0 + sc.outage_min * MIN;
    assert!(
        o1 + 5 * MIN <= horizon,
        "the outage and 5 minutes after it must end within the days simulated"
    );
    let mut seeds = Rng::seeded(sc.seed);
    let mut planners: Vec<Planner> = (0..nodes)
        .map(|_| Planner::new(policy.clone(), Rng::seeded(seeds.next_u64())))
        .collect();
    let mut per_second = vec![0u32; (horizon / 1000) as usize + 1];
    let mut valid_until = vec![i64::MIN; nodes];
    let mut failed_in_outage = vec![false; nodes];
    let mut recovered_at = vec![None::<i64>; nodes];
    let mut expired_ms = 0i64;
    let mut min_margin_ms = i64::MAX;
    let mut heap = BinaryHeap::new();
    for n in 0..nodes {
        heap.push(Reverse((
            (seeds.unit() * sc.start_spread_ms as f64) as i64,
            n,
        )));
    }
    while let Some(Reverse((t, n))) = heap.pop() {
        if t >= horizon {
            break;
        }
        per_second[(t / 1000) as usize] += 1;
        let now = T0 + t;
        if let (0, Some(exp)) = (planners[n].failures(), planners[n].expiry_ms()) {
            min_margin_ms = min_margin_ms.min(exp - now);
        }
        let delay = if (o0..o1).contains(&t) {
            failed_in_outage[n] = true;
            planners[n].failed(now, None)
        } else {
            if valid_until[n] != i64::MIN && t > valid_until[n] {
                expired_ms += t - valid_until[n];
            }
            if failed_in_outage[n] && recovered_at[n].is_none() {
                recovered_at[n] = Some(t);
            }
            valid_until[n] = t + life.valid_s * 1000;
            planners[n]
                .succeeded(now, now / 1000 + life.status_s, Some(life.status_s))
                .1
        };
        heap.push(Reverse((t + delay.as_millis() as i64, n)));
    }
    let s = |ms: i64| (ms / 1000) as usize;
    let mean = |a: i64, b: i64| {
        per_second[s(a)..s(b)]
            .iter()
            .map(|c| u64::from(*c))
            .sum::<u64>() as f64
            / ((b - a) / 1000) as f64
    };
    let peak = |a: i64, b: i64| *per_second[s(a)..s(b)].iter().max().unwrap();
    // Steady state: day 2 to the outage, and from an hour after it to the end (where those exist).
    let steady: Vec<(i64, i64)> = [(DAY, o0), (o1 + 60 * MIN, horizon)]
        .into_iter()
        .filter(|(a, b)| b - a >= 1000)
        .collect();
    let steady_len: i64 = steady.iter().map(|(a, b)| b - a).sum();
    Row {
        steady_mean: steady
            .iter()
            .map(|(a, b)| mean(*a, *b) * (b - a) as f64)
            .sum::<f64>()
            / steady_len as f64,
        steady_peak: steady.iter().map(|(a, b)| peak(*a, *b)).max().unwrap_or(0),
        outage_mean: mean(o0, o1),
        outage_peak: peak(o0, o1),
        after_mean: mean(o1, o1 + 5 * MIN),
        after_peak: peak(o1, o1 + 5 * MIN),
        min_margin_s: min_margin_ms as f64 / 1000.0,
        slowest_recovery_s: recovered_at
            .iter()
            .zip(&failed_in_outage)
            .filter(|(_, f)| **f)
            .map(|(r, _)| r.map_or(f64::INFINITY, |r| (r - o1) as f64 / 1000.0))
            .fold(0.0, f64::max),
        expired_node_s: expired_ms as f64 / 1000.0,
    }
}

/// Removes `flag VALUE` from `args` and returns VALUE parsed, if the flag is there.
fn take_flag<T: std::str::FromStr>(args: &mut Vec<String>, flag: &str) -> Option<T> {
    let i = args.iter().position(|a| a == flag)?;
    let value = args
        .get(i + 1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{flag} takes a whole number"));
    args.drain(i..i + 2);
    Some(value)
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let outage_min = take_flag(&mut args, "--outage").unwrap_or(10);
    let outage_at_s: Option<i64> = take_flag(&mut args, "--outage-at");
    let default = Scenario::day_four(outage_min);
    let sc = Scenario {
        start_spread_ms: take_flag::<i64>(&mut args, "--start-spread")
            .map_or(default.start_spread_ms, |s| s * 1000),
        outage_at_ms: outage_at_s.map_or(default.outage_at_ms, |s| s * 1000),
        seed: take_flag(&mut args, "--seed").unwrap_or(default.seed),
        ..default
    };
    let nodes: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(5000);
    let days: i64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(7);
    let all = [
        Lifetime {
            name: "1h".into(),
            status_s: 3600,
            valid_s: 3600,
        },
        Lifetime {
            name: "24h".into(),
            status_s: 86_400,
            valid_s: 86_400,
        },
        Lifetime {
            name: "1y-warnafter".into(),
            status_s: 3607,
            valid_s: 365 * 86_400,
        },
    ];
    let wanted: Vec<Lifetime> = if args.len() > 2 {
        args[2..]
            .iter()
            .map(|a| match all.iter().find(|l| l.name == *a) {
                Some(l) => l.clone(),
                None => granted_seconds(a),
            })
            .collect()
    } else {
        all.to_vec()
    };
    let policy = RunConfig::with_defaults(String::new(), String::new()).policy;
    let when = outage_at_s.map_or("on day 4".to_string(), |s| {
        format!("{s} s after the first start")
    });
    println!(
        "{nodes} nodes started within {} s, {days} days, defaults (backoff base {:?}, cap {:?}), {outage_min}-minute outage {when}, seed {}\n",
        sc.start_spread_ms / 1000,
        policy.backoff_base,
        policy.backoff_cap,
        sc.seed
    );
    println!("| granted lifetime | steady mean /s (busiest s) | outage mean /s (busiest s) | first 5 min after, mean /s (busiest s) | least time left at a scheduled refresh | slowest node fresh after the server returns | node-seconds with an expired token |");
    println!("|---|---|---|---|---|---|---|");
    for l in &wanted {
        let r = simulate(nodes, days, l, &sc);
        println!(
            "| {} | {:.2} ({}) | {:.2} ({}) | {:.2} ({}) | {:.0} s | {:.0} s | {:.0} |",
            l.name,
            r.steady_mean,
            r.steady_peak,
            r.outage_mean,
            r.outage_peak,
            r.after_mean,
            r.after_peak,
            r.min_margin_s,
            r.slowest_recovery_s,
            r.expired_node_s
        );
    }
}

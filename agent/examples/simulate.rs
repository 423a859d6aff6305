//! Virtual-clock simulation of the refresh schedule across a fleet, using the agent's own
//! scheduling functions (`tern_agent::schedule`) with default settings.
//!
//! `cargo run -p tern-agent --example simulate [nodes] [days] [max_expiration_seconds]`
//!
//! Model: every node starts within the first 10 minutes (a DaemonSet rollout), asks for 24 h
//! tokens, and the API server grants them (or caps them at the optional third argument). A
//! 30-minute outage starts on day 4 at 12:00: every request in it fails without `Retry-After`
//! (the worst case: connection refused or timeouts). Plugin-triggered channel requests are not
//! modelled (they need a 401, which an outage does not produce).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use tern_agent::schedule::{backoff_delay, refresh_delay, Policy, Rng};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let nodes: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5000);
    let days: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(7);
    let max_exp: Option<u64> = args.get(3).and_then(|a| a.parse().ok());
    let requested: u64 = 24 * 3600;
    let granted = max_exp.map_or(requested, |m| m.min(requested));
    let policy = Policy::default();
    let horizon_ms = days * 86_400 * 1000;
    let outage = (
        3 * 86_400 * 1000 + 12 * 3600 * 1000,
        3 * 86_400 * 1000 + 12 * 3600 * 1000 + 30 * 60 * 1000,
    );
    let mut rng = Rng::seeded(20_260_101);
    let mut per_second = vec![0u32; (horizon_ms / 1000) as usize + 1];
    let mut heap = BinaryHeap::new();
    let mut failures = vec![0u32; nodes];
    let mut expiry_ms = vec![0u64; nodes];
    for n in 0..nodes {
        heap.push(Reverse(((rng.unit() * 600_000.0) as u64, n)));
    }
    while let Some(Reverse((t, n))) = heap.pop() {
        if t >= horizon_ms {
            break;
        }
        per_second[(t / 1000) as usize] += 1;
        let delay = if t >= outage.0 && t < outage.1 {
            failures[n] += 1;
            let left = expiry_ms[n].checked_sub(t).map(Duration::from_millis);
            backoff_delay(&policy, failures[n], left, None, rng.unit())
        } else {
            failures[n] = 0;
            expiry_ms[n] = t + granted * 1000;
            refresh_delay(&policy, Duration::from_secs(granted), rng.unit())
        };
        heap.push(Reverse((t + delay.as_millis() as u64, n)));
    }
    let rate = |from_s: u64, to_s: u64| -> f64 {
        let total: u64 = per_second[from_s as usize..to_s as usize]
            .iter()
            .map(|c| u64::from(*c))
            .sum();
        total as f64 / (to_s - from_s) as f64
    };
    let peak_minute = |from_s: u64, to_s: u64| -> f64 {
        (from_s..to_s.saturating_sub(60))
            .step_by(60)
            .map(|s| {
                per_second[s as usize..s as usize + 60]
                    .iter()
                    .map(|c| u64::from(*c))
                    .sum::<u64>() as f64
                    / 60.0
            })
            .fold(0.0, f64::max)
    };
    let (o0, o1) = (outage.0 / 1000, outage.1 / 1000);
    let day = 86_400;
    println!("fleet: {nodes} nodes, {days} days, tokens asked 24 h, granted {granted} s; backoff base {:?} cap {:?}", policy.backoff_base, policy.backoff_cap);
    println!(
        "startup (first 10 min): {:.2} TokenRequests/s",
        rate(0, 600)
    );
    let steady: Vec<(u64, u64)> = vec![(day, o0), (o1 + 3600, days * day)];
    let steady_total: f64 = steady
        .iter()
        .map(|(a, b)| rate(*a, *b) * (*b - *a) as f64)
        .sum::<f64>();
    let steady_len: u64 = steady.iter().map(|(a, b)| b - a).sum();
    println!(
        "steady state (day 1 to 7, outside the outage and the hour after it): mean {:.3} TokenRequests/s, busiest minute {:.3}/s",
        steady_total / steady_len as f64,
        steady.iter().map(|(a, b)| peak_minute(*a, *b)).fold(0.0, f64::max)
    );
    println!(
        "30-minute outage (day 4, 12:00): mean {:.2} TokenRequests/s, busiest minute {:.2}/s, busiest second {}",
        rate(o0, o1),
        peak_minute(o0, o1),
        per_second[o0 as usize..o1 as usize].iter().max().unwrap()
    );
    println!(
        "after recovery: first 5 min mean {:.2}/s, busiest second {}",
        rate(o1, o1 + 300),
        per_second[o1 as usize..o1 as usize + 300]
            .iter()
            .max()
            .unwrap()
    );
}

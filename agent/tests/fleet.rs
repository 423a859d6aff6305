//! The fleet simulation's bounds as a test: 5,000 nodes running the agent's own planner with its
//! defaults, 1 h tokens, a 30-minute outage.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "../examples/simulate.rs"]
mod simulate;

#[test]
fn a_thirty_minute_outage_with_one_hour_tokens_stays_within_bounds() {
    let one_hour = simulate::Lifetime {
        name: "1h",
        status_s: 3600,
        valid_s: 3600,
    };
    let r = simulate::simulate(5000, 5, &one_hour);
    assert!(r.outage_mean <= 20.0, "outage mean {}/s", r.outage_mean);
    assert!(r.outage_peak <= 100, "busiest second {}", r.outage_peak);
    assert!(
        r.slowest_recovery_s <= 300.0,
        "a node waited {} s after the server returned",
        r.slowest_recovery_s
    );
    assert_eq!(r.expired_node_s, 0.0);
    // Steady state: the fleet over the mean refresh interval (3/8 of an hour).
    assert!(
        (r.steady_mean - 5000.0 / 1350.0).abs() < 0.2,
        "{}",
        r.steady_mean
    );
}

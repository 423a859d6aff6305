//! The fleet simulation's bounds as a test: 5,000 nodes running the agent's own planner with its
//! defaults, 1 h tokens, an API server outage of 10 and of 30 minutes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "../examples/simulate.rs"]
mod simulate;

fn one_hour() -> simulate::Lifetime {
    simulate::Lifetime {
        name: "1h".into(),
        status_s: 3600,
        valid_s: 3600,
    }
}

#[test]
fn one_hour_tokens_cost_at_most_two_requests_a_second_and_ride_out_ten_minutes() {
    let r = simulate::simulate(5000, 5, &one_hour(), &simulate::Scenario::day_four(10));
    // Steady state: the fleet over the mean refresh interval (3/4 of an hour): 1.85/s.
    assert!(r.steady_mean <= 2.0, "steady {}/s", r.steady_mean);
    assert!(
        (r.steady_mean - 5000.0 / 2700.0).abs() < 0.1,
        "{}",
        r.steady_mean
    );
    // Every scheduled refresh leaves at least 10 minutes (12 with 1 h tokens).
    assert!(r.min_margin_s >= 600.0, "margin {} s", r.min_margin_s);
    assert!(r.min_margin_s >= 719.0, "margin {} s", r.min_margin_s);
    assert!(r.outage_mean <= 20.0, "outage mean {}/s", r.outage_mean);
    assert!(r.outage_peak <= 100, "busiest second {}", r.outage_peak);
    assert!(r.after_mean <= 20.0, "after: mean {}/s", r.after_mean);
    assert!(
        r.after_peak <= 100,
        "after: busiest second {}",
        r.after_peak
    );
    assert!(
        r.slowest_recovery_s <= 300.0,
        "a node waited {} s after the server returned",
        r.slowest_recovery_s
    );
    assert_eq!(r.expired_node_s, 0.0, "a 10-minute outage expires no token");
}

#[test]
fn a_thirty_minute_outage_outlasts_some_tokens_but_not_the_load_bounds() {
    let r = simulate::simulate(5000, 5, &one_hour(), &simulate::Scenario::day_four(30));
    assert!(r.outage_mean <= 20.0, "outage mean {}/s", r.outage_mean);
    assert!(r.outage_peak <= 100, "busiest second {}", r.outage_peak);
    assert!(
        r.after_peak <= 100,
        "after: busiest second {}",
        r.after_peak
    );
    assert!(r.slowest_recovery_s <= 300.0, "{}", r.slowest_recovery_s);
    // 12-18 min of margin cannot cover 30 minutes: the nodes due early in it expire.
    assert!(r.expired_node_s > 0.0);
}

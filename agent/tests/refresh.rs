//! The refresher against the API stand-in: schedule, clock jumps, backoff, Retry-After, and the
//! health and metrics endpoints, with request counts asserted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::*;
use tern_apiserver::Fault;
use tern_kube::{AgentClient, Outcome};

#[test]
fn startup_refresh_writes_a_private_kubeconfig_and_serves_health_and_metrics() {
    let f = Fixture::new();
    let a = f.start();
    assert!(wait_until(Duration::from_secs(5), || f.token_requests()
        == 1
        && a.snapshot().token_expiry.is_some()));
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&f.cfg.kubeconfig), 0o600);
    assert_eq!(mode(&f.cfg.socket), 0o600);
    assert_eq!(mode(f.cfg.socket.parent().unwrap()), 0o700);
    // The written kubeconfig works against the server.
    f.s.set_node("node-1", &[]);
    let cfg = tern_kube::kubeconfig::load(&f.cfg.kubeconfig).unwrap();
    tern_kube::Client::new(&cfg)
        .unwrap()
        .get_node("node-1", Duration::from_secs(2))
        .unwrap();
    let exp = a.snapshot().token_expiry.unwrap();
    assert!(
        (exp - (f.s.now() + 86_400)).abs() <= 2,
        "asked for 24 h by default"
    );
    let (code, body) = http_get(a.http_addr(), "/healthz");
    assert_eq!(code, 200, "{body}");
    let (code, m) = http_get(a.http_addr(), "/metrics");
    assert_eq!(code, 200);
    assert!(
        m.contains(&format!("tern_agent_token_expiry_timestamp_seconds {exp}")),
        "{m}"
    );
    assert!(
        m.contains("tern_agent_refreshes_total{trigger=\"startup\"} 1"),
        "{m}"
    );
    assert_eq!(http_get(a.http_addr(), "/nope").0, 404);
    a.shutdown();
    assert!(!f.cfg.socket.exists(), "socket removed on shutdown");
    assert_eq!(f.token_requests(), 1);
}

#[test]
fn clamped_lifetime_is_refreshed_before_expiry_from_the_returned_timestamp() {
    let f = Fixture::new();
    f.s.set_max_token_expiration(Some(3600));
    let a = f.start();
    assert!(wait_until(Duration::from_secs(5), || a
        .snapshot()
        .token_expiry
        .is_some()));
    let snap = a.snapshot();
    let now = f.s.now();
    assert_eq!(snap.granted_seconds, Some(3600), "asked 24 h, granted 1 h");
    let exp = snap.token_expiry.unwrap();
    assert!((exp - (now + 3600)).abs() <= 2);
    let next = snap.next_attempt.unwrap();
    assert!(
        next - now >= 2520 - 2 && next - now <= 2880 + 2,
        "next refresh at 70-80 % of 1 h (12-18 min before expiry): {}",
        next - now
    );
    // Nothing more happens on its own in the meantime.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(f.token_requests(), 1);
    // Let the wall clock reach the scheduled time (sleeps are monotonic; the wall check fires).
    f.jump(next - now + 2);
    assert!(wait_until(Duration::from_secs(3), || f.token_requests() == 2));
    assert!(wait_until(Duration::from_secs(2), || a
        .snapshot()
        .token_expiry
        .unwrap_or(0)
        > exp));
    assert!(f.s.now() < exp, "refreshed before the old token expired");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(f.token_requests(), 2);
    a.shutdown();
}

#[test]
fn wall_clock_jump_past_expiry_refreshes_at_once() {
    let f = Fixture::new();
    let a = f.start();
    ready(&f, &a);
    let old = f.kubeconfig_token();
    let jumped = Instant::now();
    f.jump(25 * 3600);
    assert!(wait_until(Duration::from_secs(5), || f.token_requests() == 2));
    assert!(
        jumped.elapsed() < Duration::from_secs(60),
        "within a minute"
    );
    assert!(
        jumped.elapsed() < Duration::from_secs(3),
        "with a 100 ms wall check, at once: {:?}",
        jumped.elapsed()
    );
    assert!(wait_until(Duration::from_secs(2), || f.kubeconfig_token() != old));
    assert!(wait_until(Duration::from_secs(2), || a
        .snapshot()
        .refreshes
        .get("clock")
        == Some(&1)));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(f.token_requests(), 2);
    a.shutdown();
}

#[test]
fn api_down_backs_off_with_jitter_and_recovers_by_itself() {
    let f = Fixture::new();
    f.s.set_fault(Some(Fault::Status(500)));
    let a = f.start();
    std::thread::sleep(Duration::from_secs(4));
    let attempts: Vec<Instant> =
        f.s.requests()
            .iter()
            .filter(|r| r.path == TOKEN_PATH)
            .map(|r| r.at)
            .collect();
    let n = attempts.len();
    // base 20 ms, cap 500 ms, floor 100 ms: ~5 quick attempts, then ~250 ms mean spacing.
    assert!((8..=40).contains(&n), "attempts in 4 s: {n}");
    let gaps: Vec<f64> = attempts
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    assert!(gaps.iter().all(|g| *g >= 0.09 && *g <= 1.0), "{gaps:?}");
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
    assert!(var.sqrt() > 0.02, "jittered, not fixed: {gaps:?}");
    let late: f64 = gaps[gaps.len() - 4..].iter().sum::<f64>() / 4.0;
    let early: f64 = gaps[..3].iter().sum::<f64>() / 3.0;
    assert!(late > early, "spacing grows: {gaps:?}");
    assert!(
        a.snapshot()
            .failures
            .get("server_error")
            .copied()
            .unwrap_or(0) as usize
            == n
    );
    assert_eq!(http_get(a.http_addr(), "/healthz").0, 503, "no token yet");
    // Recovery without help (the next attempt is due within the 500 ms cap; 10 s leaves room
    // for a loaded CI machine: the cold run of 2026-12-03 missed a 2 s bound).
    f.s.set_fault(None);
    assert!(wait_until(Duration::from_secs(10), || a
        .snapshot()
        .token_expiry
        .is_some()));
    let after = f.token_requests();
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(f.token_requests(), after, "no more attempts once refreshed");
    assert_eq!(a.snapshot().consecutive_failures, 0);
    assert_eq!(http_get(a.http_addr(), "/healthz").0, 200);
    a.shutdown();
}

#[test]
fn retry_after_is_honoured() {
    let f = Fixture::new();
    f.s.set_fault(Some(Fault::TooManyRequests { retry_after: 2 }));
    let a = f.start();
    std::thread::sleep(Duration::from_millis(4500));
    let attempts: Vec<Instant> =
        f.s.requests()
            .iter()
            .filter(|r| r.path == TOKEN_PATH)
            .map(|r| r.at)
            .collect();
    assert!((2..=3).contains(&attempts.len()), "{}", attempts.len());
    assert!(attempts
        .windows(2)
        .all(|w| w[1] - w[0] >= Duration::from_secs(2)));
    // The channel is told to wait too, without an API call.
    match AgentClient::request_refresh(&f.cfg.socket, "test", Duration::from_secs(2)).unwrap() {
        Outcome::RateLimited {
            retry_after_seconds,
        } => assert!((1..=2).contains(&retry_after_seconds)),
        o => panic!("{o:?}"),
    }
    a.shutdown();
}

#[test]
fn expired_token_with_api_down_is_unhealthy() {
    let f = Fixture::new();
    let a = f.start();
    assert!(wait_until(Duration::from_secs(5), || a
        .snapshot()
        .token_expiry
        .is_some()));
    assert_eq!(http_get(a.http_addr(), "/healthz").0, 200);
    f.s.set_fault(Some(Fault::Status(500)));
    f.jump(25 * 3600);
    assert!(wait_until(Duration::from_secs(3), || a
        .snapshot()
        .consecutive_failures
        >= 1));
    let (code, body) = http_get(a.http_addr(), "/healthz");
    assert_eq!(code, 503);
    assert!(body.contains("expired"), "{body}");
    f.s.set_fault(None);
    assert!(wait_until(Duration::from_secs(3), || http_get(
        a.http_addr(),
        "/healthz"
    )
    .0 == 200));
    a.shutdown();
}

#[test]
fn a_node_clock_ahead_of_the_server_does_not_refresh_in_a_loop() {
    let f = Fixture::new();
    f.s.set_max_token_expiration(Some(3600));
    // Only the node's clock runs two hours ahead: every new 1 h token looks expired to it.
    f.clock.advance_secs(7200);
    let a = f.start();
    ready(&f, &a);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(f.token_requests(), 1, "refreshing every 100 ms");
    let next = a.snapshot().next_attempt.unwrap();
    let node_now = f.s.now() + 7200;
    assert!(
        next - node_now >= 900 - 2,
        "scheduled from the granted hour: {} s",
        next - node_now
    );
    a.shutdown();
}

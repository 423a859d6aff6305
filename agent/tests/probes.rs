//! The probe endpoints as the kubelet uses them and the metrics as Prometheus reads them: an API
//! outage fails readiness but never liveness, a stuck refresher loop fails liveness, and every
//! TokenRequest is counted by result and timed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write as _;
use std::time::{Duration, Instant};

use common::*;
use tern_apiserver::Fault;
use tern_kube::{AgentClient, Outcome};

fn code(a: &tern_agent::Agent, path: &str) -> u16 {
    http_get(a.http_addr(), path).0
}

#[test]
fn an_api_outage_fails_readiness_and_never_liveness() {
    let f = Fixture::new();
    let a = f.start();
    ready(&f, &a);
    for p in ["/livez", "/readyz", "/healthz"] {
        assert_eq!(code(&a, p), 200, "{p}");
    }
    // Without the kubeconfig the plugins cannot start pods: not ready until it is written again.
    std::fs::remove_file(&f.cfg.kubeconfig).unwrap();
    let (r, body) = http_get(a.http_addr(), "/readyz");
    assert_eq!(r, 503);
    assert!(body.contains("missing"), "{body}");
    assert_eq!(code(&a, "/livez"), 200);
    let o = AgentClient::request_refresh(&f.cfg.socket, "test", Duration::from_secs(5)).unwrap();
    assert!(matches!(o, Outcome::Refreshed { .. }), "{o:?}");
    assert_eq!(code(&a, "/readyz"), 200);
    // The API stops answering (every attempt runs into its 2 s deadline) and the token expires.
    f.s.set_fault(Some(Fault::Stall));
    f.jump(25 * 3600);
    let until = Instant::now() + Duration::from_secs(6);
    let mut not_ready = false;
    while Instant::now() < until {
        let (live, body) = http_get(a.http_addr(), "/livez");
        assert_eq!(live, 200, "liveness failed during an API outage: {body}");
        let (r, body) = http_get(a.http_addr(), "/readyz");
        if r == 503 {
            assert!(body.contains("expired"), "{body}");
            assert_eq!(code(&a, "/healthz"), 503, "/healthz is /readyz");
            not_ready = true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(not_ready, "an expired token must fail readiness");
    assert!(
        a.snapshot()
            .token_requests
            .get("timeout")
            .copied()
            .unwrap_or(0)
            >= 2,
        "{:?}",
        a.snapshot().token_requests
    );
    f.s.set_fault(None);
    assert!(wait_until(Duration::from_secs(8), || code(&a, "/readyz") == 200));
    assert_eq!(code(&a, "/livez"), 200);
    a.shutdown();
}

#[test]
fn a_stuck_refresher_loop_fails_liveness_until_it_moves_again() {
    let f = Fixture::new();
    let a = f.start();
    ready(&f, &a);
    // The agent's own token becomes a FIFO nobody writes: the next refresh blocks opening it,
    // beyond any deadline, which is what a hung filesystem does to the loop.
    let token = f.cfg.sa_dir.join("token");
    std::fs::remove_file(&token).unwrap();
    nix::unistd::mkfifo(&token, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    f.jump(25 * 3600);
    // Stall limit: 2 × (wall check 100 ms + request deadline 2 s) = 4.2 s.
    let t = Instant::now();
    assert!(wait_until(Duration::from_secs(10), || code(&a, "/livez") == 503));
    assert!(t.elapsed() >= Duration::from_secs(4), "{:?}", t.elapsed());
    assert!(http_get(a.http_addr(), "/livez").1.contains("stuck"));
    // Unblock it: the loop reads the token, refreshes, and is live again.
    let own = f.s.issue_token(NS, "tern-agent", 30 * 86_400);
    let mut w = std::fs::OpenOptions::new()
        .write(true)
        .open(&token)
        .unwrap();
    w.write_all(own.as_bytes()).unwrap();
    drop(w);
    std::fs::remove_file(&token).unwrap();
    f.renew_own_token();
    assert!(wait_until(Duration::from_secs(5), || code(&a, "/livez") == 200));
    assert!(wait_until(Duration::from_secs(5), || code(&a, "/readyz") == 200));
    a.shutdown();
}

#[test]
fn metrics_count_token_requests_by_result_and_time_them() {
    let mut f = Fixture::new();
    f.cfg.channel_min_interval = Duration::ZERO;
    let a = f.start();
    ready(&f, &a);
    let ask = || AgentClient::request_refresh(&f.cfg.socket, "test", Duration::from_secs(10));
    for fault in [
        Fault::Status(401),
        Fault::Status(503),
        Fault::Stall,
        Fault::TooManyRequests { retry_after: 1 },
    ] {
        f.s.set_fault(Some(fault));
        // A 503 or 429 carries Retry-After: the channel then says when to ask again.
        let o = loop {
            match ask().unwrap() {
                Outcome::RateLimited {
                    retry_after_seconds,
                } => std::thread::sleep(Duration::from_secs(retry_after_seconds)),
                o => break o,
            }
        };
        assert!(matches!(o, Outcome::Failed { .. }), "{o:?}");
    }
    f.s.set_fault(None);
    let (code, m) = http_get(a.http_addr(), "/metrics");
    assert_eq!(code, 200);
    for line in [
        "tern_agent_token_requests_total{result=\"success\"} 1",
        "tern_agent_token_requests_total{result=\"unauthorized\"} 1",
        "tern_agent_token_requests_total{result=\"unavailable\"} 1",
        "tern_agent_token_requests_total{result=\"timeout\"} 1",
        "tern_agent_token_requests_total{result=\"throttled\"} 1",
        "tern_agent_token_requests_total{result=\"error\"} 0",
        "# TYPE tern_agent_token_request_duration_seconds histogram",
        "tern_agent_token_request_duration_seconds_count 5",
        // Four answered at once, the stalled one after its 2 s deadline.
        "tern_agent_token_request_duration_seconds_bucket{le=\"1.0\"} 4",
        "tern_agent_token_request_duration_seconds_bucket{le=\"2.5\"} 5",
        "tern_agent_consecutive_failures 4",
    ] {
        assert!(m.contains(line), "missing {line:?} in:\n{m}");
    }
    let snap = a.snapshot();
    for (name, v) in [
        (
            "tern_agent_token_expiry_timestamp_seconds",
            snap.token_expiry,
        ),
        (
            "tern_agent_next_attempt_timestamp_seconds",
            snap.next_attempt,
        ),
    ] {
        assert!(
            m.contains(&format!("{name} {}", v.unwrap())),
            "{name} in:\n{m}"
        );
    }
    // Conventions: counters sample as <name>_total, durations and times are in seconds.
    for l in m.lines().filter(|l| l.starts_with("# TYPE ")) {
        let mut it = l.split_whitespace().skip(2);
        let (name, kind) = (it.next().unwrap(), it.next().unwrap());
        assert!(
            ["tern_agent_", "tern_cni_", "tern_build"]
                .iter()
                .any(|p| name.starts_with(p)),
            "{l}"
        );
        let samples: Vec<&str> = m
            .lines()
            .filter(|s| !s.starts_with('#') && s.starts_with(name))
            .collect();
        match kind {
            "counter" => assert!(
                samples
                    .iter()
                    .all(|s| s.starts_with(&format!("{name}_total"))),
                "{samples:?}"
            ),
            "gauge" => assert!(
                name.ends_with("_seconds") || name == "tern_agent_consecutive_failures",
                "a gauge without its unit: {name}"
            ),
            "histogram" => assert!(name.ends_with("_seconds"), "{name}"),
            "info" => assert!(
                samples
                    .iter()
                    .all(|s| s.starts_with(&format!("{name}_info{{"))),
                "{samples:?}"
            ),
            other => panic!("unexpected metric type {other} in {l}"),
        }
    }
    a.shutdown();
}

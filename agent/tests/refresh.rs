//! tern-agent against the API stand-in, with request counts asserted (issue 6, "Done when").
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
        next - now >= 900 - 2 && next - now <= 1800 + 2,
        "next refresh at a quarter to a half of 1 h: {}",
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
    // Recovery without help.
    f.s.set_fault(None);
    assert!(wait_until(Duration::from_secs(2), || a
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
fn two_hundred_concurrent_channel_requests_cause_one_token_request() {
    let f = Fixture::new();
    let a = f.start();
    assert!(wait_until(Duration::from_secs(5), || f.token_requests()
        == 1
        && a.snapshot().token_expiry.is_some()));
    let sock = f.cfg.socket.clone();
    let burst = |n: usize| -> Vec<Outcome> {
        let hs: Vec<_> = (0..n)
            .map(|_| {
                let sock = sock.clone();
                std::thread::spawn(move || {
                    AgentClient::request_refresh(&sock, "pod ADD got 401", Duration::from_secs(10))
                        .unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    };
    let outcomes = burst(200);
    assert_eq!(
        f.token_requests(),
        2,
        "exactly one TokenRequest for the burst"
    );
    let refreshed = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Refreshed { .. }))
        .count();
    assert!(refreshed >= 1);
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Outcome::Refreshed { .. } | Outcome::RateLimited { .. })),
        "{outcomes:?}"
    );
    let second = burst(20);
    assert!(
        second.iter().all(|o| matches!(o, Outcome::RateLimited { retry_after_seconds } if (1..=30).contains(retry_after_seconds))),
        "{second:?}"
    );
    assert_eq!(f.token_requests(), 2);
    let m = http_get(a.http_addr(), "/metrics").1;
    assert!(
        m.contains("tern_agent_refreshes_total{trigger=\"channel\"} 1"),
        "{m}"
    );
    a.shutdown();
}

#[test]
fn malformed_oversized_and_slow_requests_cannot_stall_the_agent() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;
    let mut f = Fixture::new();
    f.cfg.channel_read_timeout = Duration::from_millis(300);
    f.cfg.channel_min_interval = Duration::ZERO;
    let a = f.start();
    ready(&f, &a);
    let ask = |payload: &[u8]| -> Outcome {
        let mut c = UnixStream::connect(&f.cfg.socket).unwrap();
        c.write_all(payload).unwrap();
        let mut line = String::new();
        BufReader::new(&c).read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    };
    assert!(matches!(
        ask(b"GET / HTTP/1.1\r\n\r\n"),
        Outcome::Error { .. }
    ));
    assert!(matches!(
        ask(b"{\"op\":\"token\",\"token\":\"x\"}\n"),
        Outcome::Error { .. }
    ));
    assert!(
        matches!(ask(&vec![b'a'; 100_000]), Outcome::Error { reason } if reason.contains("longer than"))
    );
    // Slow clients hold connections open and send nothing...
    let slow: Vec<UnixStream> = (0..20)
        .map(|_| UnixStream::connect(&f.cfg.socket).unwrap())
        .collect();
    // ...while a real request is answered at once.
    let t = Instant::now();
    let o = AgentClient::request_refresh(&f.cfg.socket, "x", Duration::from_secs(3)).unwrap();
    assert!(matches!(o, Outcome::Refreshed { .. }), "{o:?}");
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    // And the slow ones are answered with an error after the read deadline.
    let mut line = String::new();
    BufReader::new(&slow[0]).read_line(&mut line).unwrap();
    assert!(line.contains("\"outcome\":\"error\""), "{line}");
    assert_eq!(
        f.token_requests(),
        2,
        "no bad request caused a TokenRequest"
    );
    a.shutdown();
}

#[test]
fn kubeconfig_is_never_partial_during_a_thousand_rewrites() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let mut f = Fixture::new();
    f.cfg.channel_min_interval = Duration::ZERO;
    let a = f.start();
    ready(&f, &a);
    let stop = Arc::new(AtomicBool::new(false));
    let (reads, bad) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let path = kubeconfig_path(&f);
    let reader = {
        let (stop, reads, bad, path) = (stop.clone(), reads.clone(), bad.clone(), path.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match tern_kube::kubeconfig::load(&path) {
                    Ok(c) if c.token.expiry().ok().flatten().is_some() => {
                        reads.fetch_add(1, Ordering::Relaxed)
                    }
                    _ => bad.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
    };
    // 999 channel-triggered refreshes + the startup one = 1,000 rewrites by the agent's own path.
    for _ in 0..999 {
        let o =
            AgentClient::request_refresh(&f.cfg.socket, "rewrite", Duration::from_secs(5)).unwrap();
        assert!(matches!(o, Outcome::Refreshed { .. }), "{o:?}");
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    assert_eq!(f.token_requests(), 1000);
    assert_eq!(
        bad.load(Ordering::Relaxed),
        0,
        "a read saw a partial or missing kubeconfig"
    );
    assert!(
        reads.load(Ordering::Relaxed) > 1000,
        "reads: {}",
        reads.load(Ordering::Relaxed)
    );
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temp files left");
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
fn fifty_parallel_lookups_that_see_401_cause_one_token_request() {
    let f = Fixture::new();
    let a = f.start();
    ready(&f, &a);
    f.s.set_pod("default", "web-0", "uid-0", &[], false);
    f.s.rotate_signing_key();
    f.renew_own_token(); // the kubelet re-projects the agent's token after rotation
    let hs: Vec<_> = (0..50)
        .map(|_| {
            let (kc, sock) = (f.cfg.kubeconfig.clone(), f.cfg.socket.clone());
            std::thread::spawn(move || {
                tern_kube::pod_lookup(&tern_kube::LookupRequest {
                    kubeconfig: &kc,
                    agent_socket: &sock,
                    namespace: "default",
                    name: "web-0",
                    uid: Some("uid-0"),
                    deadline: Duration::from_secs(5),
                })
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap().unwrap();
    }
    assert_eq!(f.token_requests(), 2);
    a.shutdown();
}

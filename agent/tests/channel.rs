//! The agent channel against the API stand-in: coalescing, rate limits, hostile clients, and
//! the rewrites it drives, with request counts asserted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use tern_kube::{AgentClient, Outcome};

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

/// The atomic-rewrite property with teeth at this count: writing the kubeconfig in place (truncate,
/// write, fsync) fails it in every run measured; the 1,000-rewrite soak is `tests/soak.rs`.
#[test]
fn kubeconfig_is_never_partial_during_a_hundred_rewrites() {
    assert_kubeconfig_never_partial(100);
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

#[test]
fn admit_pod_is_refused_by_an_agent_that_does_not_enforce_network_policy() {
    let f = Fixture::new();
    let a = f.start();
    ready(&f, &a);
    let req = tern_kube::Request::AdmitPod {
        namespace: "x".into(),
        name: "web".into(),
        uid: None,
        ips: vec!["10.0.1.2".parse().unwrap()],
        wait_ms: 5000,
    };
    let o = AgentClient::ask(&f.cfg.socket, &req, Duration::from_secs(5)).unwrap();
    assert!(
        matches!(&o, Outcome::Failed { reason } if reason.contains("does not enforce NetworkPolicy")),
        "{o:?}"
    );
    assert_eq!(f.token_requests(), 1, "an admission never asks for a token");
    a.shutdown();
}

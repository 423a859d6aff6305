//! The plugins' verb reports as the agent receives and serves them: reports sent with the
//! plugins' own sender are counted per plugin, verb and code and timed; malformed, oversized and
//! empty datagrams are rejected and counted apart; `/metrics` is served on `--metrics-address`
//! (and nothing else there), with `tern_build_info`; a bad `--metrics-address` or
//! `TERN_METRICS_ADDRESS`, or a relative `--metrics-socket`, stops the agent at start with a
//! message naming it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use common::*;
use tern_node::report::VerbReport;

fn sample(m: &str, line_start: &str) -> Option<String> {
    m.lines()
        .find(|l| l.starts_with(line_start) && l[line_start.len()..].starts_with(' '))
        .map(|l| l[line_start.len() + 1..].to_owned())
}

#[test]
fn reports_are_counted_by_plugin_verb_and_code_and_timed() {
    let mut f = Fixture::new();
    f.cfg.metrics_address = Some("127.0.0.1:0".parse().unwrap());
    let a = f.start();
    let sock = f.cfg.metrics_socket.clone();
    let ms = Duration::from_millis;
    let sent = [
        VerbReport::new("tern", "ADD", 0, ms(3)),
        VerbReport::new("tern", "ADD", 0, ms(7)),
        VerbReport::new("tern", "ADD", 7, ms(1)),
        VerbReport::new("tern", "DEL", 0, Duration::from_micros(500)),
        VerbReport::new("tern-tuning", "ADD", 0, ms(2)),
        VerbReport::new("tern-ipam", "GC", 0, ms(40)),
    ];
    for r in &sent {
        r.send_to(&sock);
    }
    let raw = UnixDatagram::unbound().unwrap();
    for bad in [
        &b"tern-verb/1 ptp ADD 0 1"[..],
        b"tern-verb/1 tern ADD 0 1 extra",
        b"",
        &[b'x'; 10_000][..],
    ] {
        raw.send_to(bad, &sock).unwrap();
    }
    let addr = a.metrics_addr().unwrap();
    assert_ne!(addr, a.http_addr());
    let want = [
        (
            "tern_cni_verb_total{plugin=\"tern\",verb=\"ADD\",code=\"0\"}",
            "2",
        ),
        (
            "tern_cni_verb_total{plugin=\"tern\",verb=\"ADD\",code=\"7\"}",
            "1",
        ),
        (
            "tern_cni_verb_total{plugin=\"tern\",verb=\"DEL\",code=\"0\"}",
            "1",
        ),
        (
            "tern_cni_verb_total{plugin=\"tern-tuning\",verb=\"ADD\",code=\"0\"}",
            "1",
        ),
        (
            "tern_cni_verb_total{plugin=\"tern-ipam\",verb=\"GC\",code=\"0\"}",
            "1",
        ),
        (
            "tern_cni_verb_duration_seconds_count{plugin=\"tern\",verb=\"ADD\"}",
            "3",
        ),
        (
            "tern_cni_verb_duration_seconds_bucket{le=\"0.001\",plugin=\"tern\",verb=\"ADD\"}",
            "1",
        ),
        (
            "tern_cni_verb_duration_seconds_bucket{le=\"0.004\",plugin=\"tern\",verb=\"ADD\"}",
            "2",
        ),
        (
            "tern_cni_verb_duration_seconds_bucket{le=\"0.008\",plugin=\"tern\",verb=\"ADD\"}",
            "3",
        ),
        (
            "tern_cni_verb_duration_seconds_count{plugin=\"tern\",verb=\"DEL\"}",
            "1",
        ),
        (
            "tern_cni_verb_duration_seconds_count{plugin=\"tern-ipam\",verb=\"GC\"}",
            "1",
        ),
        ("tern_agent_verb_reports_rejected_total", "4"),
        (
            &format!(
                "tern_build_info{{version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            ),
            "1",
        ),
    ];
    let mut last = String::new();
    let all_in = wait_until(Duration::from_secs(5), || {
        let (code, m) = http_get(addr, "/metrics");
        assert_eq!(code, 200);
        last = m;
        want.iter()
            .all(|(k, v)| sample(&last, k).as_deref() == Some(*v))
    });
    assert!(all_in, "want {want:#?}\nin:\n{last}");
    let sum: f64 = sample(
        &last,
        "tern_cni_verb_duration_seconds_sum{plugin=\"tern\",verb=\"ADD\"}",
    )
    .unwrap()
    .parse()
    .unwrap();
    assert!((sum - 0.011).abs() < 1e-9, "{sum}");
    // Only /metrics on the metrics address; the probes stay on --listen.
    assert_eq!(http_get(addr, "/livez").0, 404);
    assert_eq!(http_get(a.http_addr(), "/livez").0, 200);
    let (_, on_listen) = http_get(a.http_addr(), "/metrics");
    assert!(on_listen.contains("tern_cni_verb_total{"), "{on_listen}");
    a.shutdown();
    assert!(!f.cfg.metrics_socket.exists(), "socket removed at shutdown");
}

#[test]
fn a_bad_metrics_address_is_refused_at_start() {
    let base = [
        "run",
        "--api-server",
        "https://127.0.0.1:1",
        "--namespace",
        "n",
    ];
    for bad in [
        "9413",
        "localhost:9413",
        "0.0.0.0",
        ":9413",
        "::1:9413",
        "0.0.0.0:99999",
    ] {
        let mut args = base.to_vec();
        args.extend(["--metrics-address", bad]);
        let out = agent(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{bad}: {out:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("--metrics-address") && err.contains(&format!("{bad:?}")),
            "{bad}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        let out = agent(&base)
            .env("TERN_METRICS_ADDRESS", bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "env {bad}: {out:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("TERN_METRICS_ADDRESS") && err.contains(&format!("{bad:?}")),
            "env {bad}: {err}"
        );
    }
    let mut args = base.to_vec();
    args.extend(["--metrics-socket", "metrics.sock"]);
    let out = agent(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains("--metrics-socket metrics.sock must be an absolute path"),
        "{out:?}"
    );
}

//! The `tern-agent` binary as the DaemonSet runs it: logs without tokens, clean SIGTERM, and a
//! bad `CNI_TOKEN_REFRESH_DURATION` refused at start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tern_apiserver::Fault;
use tern_kube::{AgentClient, Outcome};

fn agent_cmd(f: &Fixture) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tern-agent"));
    c.arg("run")
        .args(["--api-server", &f.s.url()])
        .args(["--sa-dir", f.cfg.sa_dir.to_str().unwrap()])
        .args(["--namespace", NS])
        .args(["--kubeconfig", f.cfg.kubeconfig.to_str().unwrap()])
        .args(["--socket", f.cfg.socket.to_str().unwrap()])
        .args(["--metrics-socket", f.cfg.metrics_socket.to_str().unwrap()])
        .args([
            "--listen",
            "127.0.0.1:0",
            "--wall-check",
            "100ms",
            "--backoff-base",
            "20ms",
            "--backoff-cap",
            "200ms",
        ])
        .args(["--channel-interval", "0s"])
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("TERN_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

#[test]
fn logs_never_contain_a_token_and_sigterm_stops_cleanly() {
    let f = Fixture::new();
    let own = std::fs::read_to_string(f.cfg.sa_dir.join("token")).unwrap();
    let mut child = agent_cmd(&f).spawn().unwrap();
    let mut tokens = vec![own];
    assert!(wait_until(Duration::from_secs(10), || f
        .cfg
        .kubeconfig
        .exists()
        && f.cfg.socket.exists()));
    tokens.push(f.kubeconfig_token());
    let o = AgentClient::request_refresh(&f.cfg.socket, "test", Duration::from_secs(5)).unwrap();
    assert!(matches!(o, Outcome::Refreshed { .. }), "{o:?}");
    tokens.push(f.kubeconfig_token());
    f.s.set_fault(Some(Fault::Status(401)));
    let o = AgentClient::request_refresh(&f.cfg.socket, "test", Duration::from_secs(5)).unwrap();
    assert!(
        matches!(&o, Outcome::Failed { reason } if reason.contains("unauthorized")),
        "{o:?}"
    );
    f.s.set_fault(None);
    assert!(wait_until(Duration::from_secs(5), || f.kubeconfig_token() != tokens[2]));
    tokens.push(f.kubeconfig_token());
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "agent did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    assert!(!f.cfg.socket.exists());
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    for needle in [
        "tern-agent starting",
        "refreshed CNI token",
        "token refresh failed; backing off",
        "signal received",
    ] {
        assert!(log.contains(needle), "missing {needle:?} in:\n{log}");
    }
    for t in &tokens {
        assert!(!t.is_empty());
        assert!(!log.contains(t.trim()), "a token appeared in the log");
        // Not even the signature part alone.
        assert!(!log.contains(t.trim().rsplit('.').next().unwrap()));
    }
    assert!(
        !log.contains("eyJ"),
        "something JWT-shaped appeared in the log:\n{log}"
    );
}

#[test]
fn bad_refresh_duration_is_refused_at_start() {
    let f = Fixture::new();
    let out = agent_cmd(&f)
        .env("CNI_TOKEN_REFRESH_DURATION", "10")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CNI_TOKEN_REFRESH_DURATION") && err.contains("such as 10m"),
        "{err}"
    );
    assert_eq!(f.token_requests(), 0);
    assert!(!f.cfg.kubeconfig.exists());
}

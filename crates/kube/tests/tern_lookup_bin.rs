//! The `tern-lookup` binary as the plugins run it: one call on stdin, one answer on stdout.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn run(stdin: &[u8]) -> (i32, serde_json::Value, Duration) {
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern-lookup"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), v, t0.elapsed())
}

#[test]
fn a_call_that_is_not_one_is_code_6() {
    let (rc, v, _) = run(b"not json");
    assert_eq!((rc, v["code"].as_u64()), (1, Some(6)), "{v}");
}

/// Blocked for good (a kubeconfig that is a FIFO nobody writes): the helper still ends itself,
/// code 11, once its budget and the grace have passed — even with no plugin left to kill it.
#[test]
fn a_helper_blocked_for_good_gives_up_after_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("kubeconfig");
    let ok = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(ok.success());
    let call = serde_json::json!({"node": {"kubeconfig": fifo, "name": "n1", "timeoutMs": 200}});
    let (rc, v, took) = run(call.to_string().as_bytes());
    assert_eq!((rc, v["code"].as_u64()), (1, Some(11)), "{v}");
    assert!(
        took < Duration::from_secs(5),
        "gave up after {took:?} (budget 0.2 s + 1 s grace)"
    );
}

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

/// A kubeconfig that is a FIFO nobody writes is refused at once (code 11, naming it), never
/// waited on; it used to block the helper until its own deadline.
#[test]
fn a_fifo_kubeconfig_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("kubeconfig");
    let ok = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(ok.success());
    let call = serde_json::json!({"node": {"kubeconfig": fifo, "name": "n1", "timeoutMs": 5000}});
    let (rc, v, took) = run(call.to_string().as_bytes());
    assert_eq!((rc, v["code"].as_u64()), (1, Some(11)), "{v}");
    assert!(v["msg"].as_str().unwrap().contains("a FIFO"), "{v}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

/// An API server that accepts and never answers: the helper gives up with code 11 within its
/// budget and the grace, whatever it was waiting on. (Past budget + grace it also ends itself,
/// for a stall outside the request's own deadline, e.g. a resolver; none can be made here.)
#[test]
fn a_helper_that_gets_no_answer_gives_up_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        // Accept and hold the connection open without a byte until the client goes away.
        if let Ok((mut conn, _)) = listener.accept() {
            let _ = std::io::copy(&mut conn, &mut std::io::sink());
        }
    });
    let kc = dir.path().join("kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}', insecure-skip-tls-verify: true}}}}]\n\
             users: [{{name: u, user: {{token: abc}}}}]\n\
             contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
        ),
    )
    .unwrap();
    let call = serde_json::json!({"node": {"kubeconfig": kc, "name": "n1", "timeoutMs": 200}});
    let (rc, v, took) = run(call.to_string().as_bytes());
    assert_eq!((rc, v["code"].as_u64()), (1, Some(11)), "{v}");
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_secs(5),
        "gave up after {took:?} (budget 0.2 s + 1 s grace): {v}"
    );
    held.join().unwrap();
}

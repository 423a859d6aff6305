//! The built tern-tuning binary run as a runtime runs it, and `tern-tuning validate`. Needs root (`tern_testkit::root::skip`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod common;

use std::path::Path;

use common::*;
use serde_json::json;
use tern_testkit::exec::PluginCall;

/// The built binary, as a runtime runs it (default allowlist path; absent here → built-in).
#[test]
fn binary_add_and_validate() {
    if tern_testkit::root::skip() {
        return;
    }
    assert!(
        !Path::new(tern_net::sysctl::DEFAULT_ALLOWLIST_PATH).exists(),
        "this test expects no allowlist file on the machine"
    );
    let e = env("tt-bin", "eth0");
    let bin = env!("CARGO_BIN_EXE_tern-tuning");
    let conf = e.conf("1.0.0", keepalive());
    let out = PluginCall::new(bin, "ADD")
        .netns(e.hp.pod.path())
        .container_id(&e.cid)
        .netconf(&conf)
        .unwrap()
        .run()
        .unwrap();
    assert!(out.success(), "{}", out.describe());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "600");
    let out = PluginCall::new(bin, "DEL")
        .netns(e.hp.pod.path())
        .container_id(&e.cid)
        .netconf(&conf)
        .unwrap()
        .run()
        .unwrap();
    assert!(out.success(), "{}", out.describe());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "7200");

    // validate: a good conflist and a bad one.
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.conflist");
    std::fs::write(
        &good,
        serde_json::to_vec(&json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
            {"type": "ptp", "ipam": {"type": "host-local"}},
            {"type": "tern-tuning", "sysctl": {"net.ipv4.tcp_keepalive_time": "600"}}]}))
        .unwrap(),
    )
    .unwrap();
    let o = std::process::Command::new(bin)
        .args(["validate", good.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let bad = dir.path().join("bad.conflist");
    std::fs::write(
        &bad,
        serde_json::to_vec(&json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
            {"type": "tuning", "sysctl": {"net.ipv4.ip_forward": "1", "kernel.hostname": "x", "net.ipv4.tcp_fin_timeout": "1\n"}}]}))
        .unwrap(),
    )
    .unwrap();
    let o = std::process::Command::new(bin)
        .args(["validate", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.contains("plugins[0] (tuning)")
            && text.contains("net.ipv4.ip_forward")
            && text.contains("kernel.hostname"),
        "{text}"
    );
    let o = std::process::Command::new(bin)
        .args(["validate"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// `validate --allowlist PATH` with a PATH that does not exist is a usage error naming the
/// path (exit 2), not a silent fall back to the built-in list (kept for the default path).
#[test]
fn validate_explicit_missing_allowlist_is_an_error() {
    if tern_testkit::root::skip() {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_tern-tuning");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("good.conflist");
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
            {"type": "tern-tuning", "sysctl": {"net.ipv4.tcp_keepalive_time": "600"}}]}))
        .unwrap(),
    )
    .unwrap();
    let missing = dir.path().join("nonexistent-allowlist.conf");
    let o = std::process::Command::new(bin)
        .args(["validate", "--allowlist"])
        .arg(&missing)
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(missing.to_str().unwrap()),
        "message does not name the path: {stderr}"
    );
    // An existing explicit allowlist is used.
    let list = dir.path().join("allowlist.conf");
    std::fs::write(&list, "net\\.ipv4\\.tcp_keepalive_time\n").unwrap();
    let o = std::process::Command::new(bin)
        .args(["validate", "--allowlist"])
        .arg(&list)
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains(list.to_str().unwrap()), "{stdout}");
}

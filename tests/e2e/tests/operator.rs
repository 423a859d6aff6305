//! What an operator reads: `--version` on every shipped binary (name and workspace version, exit
//! 0, stdout only; without arguments a plugin still answers as a CNI plugin), and the plugins'
//! `logFile`: every failed verb logged with its command, container ID, code and message, the file
//! rotated past `logFileMaxBytes`, a cap of 0 refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::process::{Command, Stdio};
use tern_node::version::BINARIES;

use tern_testkit::exec::bin_dir;

#[test]
fn every_binary_prints_its_version() {
    if tern_testkit::root::skip() {
        return;
    }
    let want = env!("CARGO_PKG_VERSION");
    for b in BINARIES {
        let path = bin_dir().join(b);
        let out = Command::new(&path)
            .arg("--version")
            .env_clear()
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{b} --version: {out:?}");
        let first = text.lines().next().unwrap_or_default();
        assert!(
            first == format!("{b} {want}") || first.starts_with(&format!("{b} {want}: ")),
            "{b} --version printed {text:?}"
        );
        assert!(
            out.stderr.is_empty(),
            "{b}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_plugin_without_arguments_stays_a_cni_plugin() {
    if tern_testkit::root::skip() {
        return;
    }
    for b in ["tern", "tern-tuning", "tern-ipam"] {
        let out = Command::new(bin_dir().join(b))
            .env_clear()
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{b}");
        let err: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(err["code"], 4, "{b}: {err}");
    }
}

/// Runs `plugin` with `CNI_COMMAND=ADD` and `conf` on stdin; returns (exit code, stdout).
fn add(plugin: &str, id: &str, conf: &serde_json::Value) -> (i32, serde_json::Value) {
    let mut child = Command::new(bin_dir().join(plugin))
        .env_clear()
        .envs([
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", id),
            ("CNI_NETNS", "/var/run/netns/tern-no-such-netns"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/nonexistent"),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(conf.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), v)
}

#[test]
fn failed_verbs_are_logged_and_the_log_rotates() {
    if tern_testkit::root::skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("tern.log");
    // Its own state directory (the default is the node's /run/cni/tern, where a network
    // directory `logtest` was left on every machine this ran on).
    let state = dir.path().join("state");
    let conf = |cap: serde_json::Value| {
        serde_json::json!({
            "cniVersion": "1.1.0", "name": "logtest", "type": "tern",
            "logFile": log.to_str().unwrap(), "logFileMaxBytes": cap,
            "stateDir": state.to_str().unwrap(),
            "ipam": {"type": "tern-no-such-ipam"}
        })
    };
    let (status, err) = add("tern", "logtest-1", &conf(serde_json::json!(300)));
    assert_eq!(status, 1, "{err}");
    // CNI_NETNS is no network namespace: refused (8) before anything is made, the network's
    // state directory included (DESIGN, "Rules that hold everywhere").
    assert_eq!(err["code"], 8, "{err}");
    assert!(!state.exists(), "{} made by a refused ADD", state.display());
    let code = err["code"].as_u64().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("verb failed"))
        .unwrap_or_else(|| panic!("{text}"));
    for want in [
        "ERROR".to_owned(),
        "command=\"ADD\"".to_owned(),
        "container_id=\"logtest-1\"".to_owned(),
        format!("code={code}"),
        err["msg"].as_str().unwrap().to_owned(),
    ] {
        assert!(line.contains(&want), "{want:?} not in {line:?}");
    }
    // past the cap, the next invocation moves the file to .1 and starts a new one
    let mut n = 1;
    while !dir.path().join("tern.log.1").exists() {
        n += 1;
        assert!(
            n < 20,
            "no rotation after {n} invocations: {} bytes",
            std::fs::metadata(&log).unwrap().len()
        );
        add(
            "tern",
            &format!("logtest-{n}"),
            &conf(serde_json::json!(300)),
        );
    }
    let current = std::fs::read_to_string(&log).unwrap();
    assert!(
        current.contains(&format!("logtest-{n}")) && !current.contains("\"logtest-1\""),
        "{current}"
    );
    let size = |p: &str| std::fs::metadata(dir.path().join(p)).unwrap().len();
    assert!(size("tern.log") < 2 * 300 && size("tern.log.1") < 2 * 300);
    // a cap of zero is refused before anything happens
    let (status, err) = add("tern", "logtest-zero", &conf(serde_json::json!(0)));
    assert_eq!((status, err["code"].as_u64()), (1, Some(7)), "{err}");
    assert!(
        err["msg"].as_str().unwrap().contains("logFileMaxBytes"),
        "{err}"
    );
}

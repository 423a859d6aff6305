//! Every conflist in `cni-conf-examples/` is loadable by libcni (through `cnitool`, which parses it
//! with `libcni.ConfListFromFile` before anything runs) and says what the README says it does.
//! Running them against the tern plugins is the job of the plugins' own end-to-end tests.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use tern_testkit::exec::workspace_root;

fn load(name: &str) -> Value {
    let path = workspace_root().join("cni-conf-examples").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn default_conflist_is_c0() {
    if tern_testkit::root::skip() {
        return;
    }
    let c = load("10-tern.conflist");
    assert_eq!(c["name"], "tern");
    assert_eq!(c["cniVersion"], "1.0.0");
    let plugins = c["plugins"].as_array().unwrap();
    assert_eq!(plugins.len(), 2);
    assert_eq!(plugins[0]["type"], "tern");
    assert_eq!(plugins[0]["mtu"], 1500);
    assert_eq!(plugins[0]["ipam"]["type"], "host-local");
    assert_eq!(plugins[0]["ipam"]["ranges"][0][0]["subnet"], "10.99.0.0/24");
    assert_eq!(plugins[1]["type"], "tern-tuning");
    let sysctl = plugins[1]["sysctl"].as_object().unwrap();
    assert_eq!(sysctl["net.ipv4.tcp_keepalive_time"], "600");
    assert_eq!(sysctl["net.ipv4.tcp_keepalive_intvl"], "60");
    assert_eq!(sysctl["net.ipv4.tcp_keepalive_probes"], "5");
    assert_eq!(sysctl.len(), 3);
}

/// libcni accepts every example: `cnitool version <file>` parses it with libcni, then asks the
/// reference `host-local` (via a CNI_PATH holding only the reference plugins, so the question is
/// the file's syntax, not whether tern is built) — a libcni parse error would come back as code 0
/// before any plugin runs, and a missing plugin as "failed to find plugin".
#[test]
fn libcni_parses_every_example() {
    if tern_testkit::root::skip() {
        return;
    }
    let dir = workspace_root().join("cni-conf-examples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("conflist") {
            continue;
        }
        n += 1;
        let out = std::process::Command::new(tern_testkit::exec::cnitool_path())
            .env_clear()
            .env("CNI_PATH", "/nonexistent")
            .args(["version", path.to_str().unwrap()])
            .output()
            .expect("run cnitool (run scripts/setup to build it)");
        let stdout: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{}: cnitool printed non-JSON ({e}): {:?}",
                path.display(),
                out
            )
        });
        // Parsed by libcni; failed only at finding the first plugin binary.
        let msg = stdout["error"].as_str().unwrap_or_default();
        assert!(
            msg.contains("failed to find plugin"),
            "{}: {stdout}",
            path.display()
        );
    }
    assert!(n >= 1, "no conflists in {}", dir.display());
}

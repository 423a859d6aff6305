//! `tern-agent uninstall` on a node's directories: the conflist drains first (the mark beside it),
//! the conflist, the kubeconfig, the plugins and the mark go only when no tern attachment is left,
//! nothing else is touched; through the binary too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use tern_agent::uninstall::{count_attachments, uninstall, Outcome, UninstallArgs};

const CONFLIST: &str = r#"{"cniVersion": "1.0.0", "name": "k8s-pod-network", "plugins": [
    {"type": "tern", "ipam": {"type": "host-local", "ranges": [[{"subnet": "usePodCidr"}]]}},
    {"type": "tern-tuning", "sysctl": {"net.ipv4.tcp_keepalive_time": "600"}}]}"#;

struct Node {
    root: PathBuf,
}

impl Node {
    fn new(tag: &str) -> Node {
        let root =
            std::env::temp_dir().join(format!("tern-uninstall-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["bin", "net.d", "state/tern"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for p in [
            "tern",
            "tern-tuning",
            "tern-ipam",
            "tern-lookup",
            "host-local",
        ] {
            std::fs::write(root.join("bin").join(p), b"x").unwrap();
        }
        for f in ["tern-kubeconfig", "87-other.conflist"] {
            std::fs::write(root.join("net.d").join(f), b"{}").unwrap();
        }
        // the reference plugins as `tern-agent install` leaves them: portmap and bandwidth in
        // its ledger; a tuning of the node's own beside them
        let pm = tern_agent::install::reference::install(
            &root.join("bin"),
            &[
                ("portmap".into(), b"portmap v1.10.0".to_vec()),
                ("bandwidth".into(), b"bandwidth v1.10.0".to_vec()),
            ],
            true,
        )
        .unwrap();
        assert_eq!(pm.len(), 2);
        std::fs::write(root.join("bin/tuning"), b"the node's").unwrap();
        std::fs::write(root.join("net.d/10-tern.conflist"), CONFLIST).unwrap();
        Node { root }
    }

    fn args(&self) -> Vec<String> {
        let p = |d: &str| self.root.join(d).display().to_string();
        vec![
            "--cni-bin-dir".into(),
            p("bin"),
            "--cni-conf-dir".into(),
            p("net.d"),
            "--state-dir".into(),
            p("state"),
            // These tests run in the machine's own netns: its NAT, routes and NetworkPolicy
            // table are not theirs (a real-cluster tier running meanwhile owns them).
            "--remove-egress-nat".into(),
            "false".into(),
            "--remove-node-routes".into(),
            "false".into(),
            "--remove-network-policy".into(),
            "false".into(),
            // the wait for the runtime's repeat DELs has its own test
            "--sandbox-removal-wait".into(),
            "0s".into(),
        ]
    }

    fn parsed_waiting(&self, wait: &str) -> UninstallArgs {
        let mut args = self.args();
        let last = args.len() - 1;
        args[last] = wait.into();
        tern_agent::args::parse_subcommand("uninstall", &args).unwrap()
    }

    fn parsed(&self) -> UninstallArgs {
        tern_agent::args::parse_subcommand("uninstall", &self.args()).unwrap()
    }

    fn has(&self, rel: &str) -> bool {
        self.root.join(rel).exists()
    }

    /// The conflist as now on disk.
    fn conflist(&self) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.root.join("net.d/10-tern.conflist")).unwrap())
            .unwrap()
    }

    fn attach(&self, name: &str) {
        std::fs::write(self.root.join("state/tern").join(name), b"{}").unwrap();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn tern_files_present(n: &Node) -> bool {
    [
        "tern",
        "tern-tuning",
        "tern-ipam",
        "tern-lookup",
        "portmap",
        "bandwidth",
        ".tern-reference-plugins",
    ]
    .iter()
    .all(|p| n.has(&format!("bin/{p}")))
}

#[test]
fn with_an_attachment_left_the_conflist_drains() {
    let n = Node::new("left");
    n.attach("c0ffee_eth0.json");
    assert_eq!(count_attachments(&n.root.join("state")).unwrap(), 1);
    let before = n.conflist();
    for _ in 0..2 {
        assert_eq!(
            uninstall(&n.parsed()).unwrap(),
            Outcome::Draining { attachments: 1 }
        );
        // Draining: tern's plugin object says so, the rest of the conflist is as it was.
        let mut want = before.clone();
        want["plugins"][0]["draining"] = serde_json::json!(true);
        assert_eq!(n.conflist(), want);
        assert!(n.has("net.d/tern-uninstalling"), "the mark is missing");
        assert!(tern_agent::uninstall::uninstalling(
            &n.root.join("net.d/tern-kubeconfig")
        ));
        assert!(n.has("net.d/tern-kubeconfig"));
        assert!(tern_files_present(&n));
    }
    // the attachment gone, the next run removes the rest, the mark last
    std::fs::remove_file(n.root.join("state/tern/c0ffee_eth0.json")).unwrap();
    assert_eq!(uninstall(&n.parsed()).unwrap(), Outcome::Removed);
    assert!(!n.has("net.d/10-tern.conflist"));
    assert!(!n.has("net.d/tern-uninstalling"), "the mark is left");
    assert!(!n.has("net.d/tern-kubeconfig"));
    for p in [
        "tern",
        "tern-tuning",
        "tern-ipam",
        "tern-lookup",
        "portmap",
        "bandwidth",
        ".tern-reference-plugins",
    ] {
        assert!(!n.has(&format!("bin/{p}")), "{p} left");
    }
    // never anything that is not tern's
    assert!(n.has("bin/host-local") && n.has("bin/tuning") && n.has("net.d/87-other.conflist"));
}

#[test]
fn no_state_dir_means_no_attachment() {
    let n = Node::new("nostate");
    std::fs::remove_dir_all(n.root.join("state")).unwrap();
    assert_eq!(count_attachments(&n.root.join("state")).unwrap(), 0);
    // other files in the state dir are not attachments
    std::fs::create_dir_all(n.root.join("state/tern")).unwrap();
    n.attach("lock");
    assert_eq!(count_attachments(&n.root.join("state")).unwrap(), 0);
    assert_eq!(uninstall(&n.parsed()).unwrap(), Outcome::Removed);
    assert!(!n.has("net.d/10-tern.conflist") && !tern_files_present(&n));
}

/// The uninstall that finds no pods, right after a teardown (the state dir's mtime, which tern's
/// DEL sets): the conflist and plugins stay draining for the runtime's repeat DEL, what no DEL
/// needs goes at once, and the rest once the wait has passed since that teardown.
#[test]
fn a_recent_teardown_keeps_the_conflist_for_the_repeat_del() {
    let n = Node::new("recent");
    let state = n.root.join("state");
    std::fs::File::open(&state)
        .unwrap()
        .set_modified(std::time::SystemTime::now())
        .unwrap();
    let args = n.parsed_waiting("2s");
    let t0 = std::time::Instant::now();
    let waiting = std::thread::spawn(move || uninstall(&args).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(1000));
    assert!(!waiting.is_finished(), "no wait after a teardown 1 s ago");
    assert_eq!(n.conflist()["plugins"][0]["draining"], true);
    assert!(
        tern_files_present(&n),
        "a plugin went while a repeat DEL may come"
    );
    assert!(
        !n.has("net.d/tern-kubeconfig"),
        "the kubeconfig is kept while waiting"
    );
    assert_eq!(waiting.join().unwrap(), Outcome::Removed);
    assert!(t0.elapsed() >= std::time::Duration::from_millis(1900));
    assert!(!n.has("net.d/10-tern.conflist") && !tern_files_present(&n));
    assert!(!n.has("net.d/tern-uninstalling"), "the mark is left");

    // an install while it waits (the mark removed) supersedes it: nothing more removed
    let n = Node::new("superseded");
    let args = n.parsed_waiting("2s");
    let waiting = std::thread::spawn(move || uninstall(&args).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(500));
    std::fs::remove_file(n.root.join("net.d/tern-uninstalling")).unwrap();
    assert_eq!(waiting.join().unwrap(), Outcome::Superseded);
    assert!(n.has("net.d/10-tern.conflist") && tern_files_present(&n));
}

fn agent() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tern-agent"))
}

#[test]
fn the_binary_uninstalls_and_refuses_bad_flags() {
    let n = Node::new("bin");
    n.attach("a_eth0.json");
    let out = agent().arg("uninstall").args(n.args()).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("attachments are left"), "{err}");
    assert_eq!(n.conflist()["plugins"][0]["draining"], true);
    assert!(tern_files_present(&n));
    let out = agent()
        .args(["uninstall", "--plugins", "../etc/passwd"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("plain file name"));
    // without an API server the DaemonSet check cannot tell: nothing changes, the exit says so
    let out = agent()
        .arg("uninstall")
        .args(n.args())
        .args([
            "--if-daemonset-deleted",
            "tern-agent",
            "--api-server",
            "https://127.0.0.1:1",
        ])
        .args(["--sa-dir", Path::new("/nonexistent").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(n.has("net.d/tern-kubeconfig") && tern_files_present(&n));
}

#[test]
fn every_binary_says_its_version() {
    let out = agent().arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.trim() == format!("tern-agent {}", env!("CARGO_PKG_VERSION")),
        "{text}"
    );
}

#[test]
fn the_agent_logs_json_lines_on_request_and_refuses_unknown_formats() {
    let n = Node::new("json");
    let out = agent()
        .arg("uninstall")
        .args(n.args())
        .env("TERN_LOG_FORMAT", "json")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let line: serde_json::Value = serde_json::from_str(err.lines().last().unwrap())
        .unwrap_or_else(|e| panic!("not a JSON line ({e}): {err}"));
    assert_eq!(line["level"], "INFO", "{line}");
    assert!(line["fields"]["message"]
        .as_str()
        .unwrap()
        .contains("uninstall done"));
    for (k, v, want) in [
        ("TERN_LOG_FORMAT", "xml", "text or json"),
        ("TERN_LOG", "loud", "error, warn, info"),
    ] {
        let out = agent()
            .arg("uninstall")
            .args(n.args())
            .env(k, v)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{k}={v} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want) && err.contains(v), "{err}");
    }
}

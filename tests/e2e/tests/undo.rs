//! Undo on failure: each step of ADD made to fail through libcni, then nothing of that
//! ADD is left (no reservation, no veth, no route, no state). The ifname-taken and MTU cases are
//! case-05 in cases.rs. Needs root (`tern_testkit::root::skip`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use tern_testkit::exec::conflist;

/// IPAM fails (the range is exhausted): the failed ADD leaves nothing, the earlier attachment is
/// untouched.
#[test]
fn ipam_exhausted() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("exh");
    let mut t = node.tern(json!([[{"subnet": "10.99.0.0/30"}]]));
    t["mtu"] = json!(1400);
    node.tool
        .write_conflist(&conflist(C0_NAME, "1.0.0", vec![t]))
        .unwrap();
    let (p1, p2) = (node.pod("exh1"), node.pod("exh2"));
    node.tool.container_id("exh-1");
    let first = node.tool.add(p1.path()).unwrap();
    ok(&first, "first ADD");
    let a1 = result_addrs(first.json.as_ref().unwrap());
    assert_eq!(link_of(&p1, "eth0")["mtu"], 1400);

    node.tool.container_id("exh-2");
    let out = node.tool.add(p2.path()).unwrap();
    assert!(
        !out.success(),
        "ADD in an exhausted range succeeded:\n{}",
        out.describe()
    );
    assert!(
        out.error_msg()
            .unwrap()
            .contains("no IP addresses available"),
        "IPAM's message must reach the runtime:\n{}",
        out.describe()
    );
    assert!(!node.host.has_link(&host_veth("exh-2", "eth0")));
    assert!(!p2.has_link("eth0"));
    assert_eq!(node.reservations(), vec!["10.99.0.2".to_owned()]);
    assert_eq!(node.state_files().len(), 1);
    p1.exec_ok(&["ping", "-c1", "-W2", tern_testkit::netns::UPLINK_V4]);
    ok(&node.tool.del(p2.path()).unwrap(), "DEL of the failed ADD");
    assert!(
        node.host.has_link(&host_veth("exh-1", "eth0")),
        "DEL of exh-2 hit exh-1"
    );
    node.tool.container_id("exh-1");
    ok(&node.tool.del(p1.path()).unwrap(), "DEL");
    node.assert_nothing_left(&a1);
}

/// IPAM hands out an address no pod may have (IPv6 multicast) beside a good IPv4 one: tern
/// refuses it (code 102) before wiring anything, and the reservations are released.
#[test]
fn unusable_ipam_address_is_refused() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("kref");
    let t = node.tern(json!([[{"subnet": C0_SUBNET}], [{"subnet": "ff0e::/120"}]]));
    node.tool
        .write_conflist(&conflist(C0_NAME, "1.0.0", vec![t]))
        .unwrap();
    let pod = node.pod("kref");
    let out = node.tool.add(pod.path()).unwrap();
    assert!(
        !out.success(),
        "ADD with a multicast pod address succeeded:\n{}",
        out.describe()
    );
    assert_eq!(out.error_code(), Some(102), "{}", out.describe());
    assert!(
        out.error_msg().unwrap().contains("ff0e::"),
        "{}",
        out.describe()
    );
    assert!(!pod.has_link("eth0"), "pod end left");
    node.assert_nothing_left(&["10.99.0.2".parse().unwrap(), "ff0e::2".parse().unwrap()]);
    ok(
        &node.tool.del(pod.path()).unwrap(),
        "DEL after the failed ADD",
    );
}

/// An IPAM wrapper (test-only script) that runs host-local, then tells the test it holds an
/// allocation (`in-ipam`) and waits until the test says `go` (at most 10 s).
fn write_pausing_ipam(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let script = format!(
        "#!/bin/sh\n# test-script-ipam-pause: host-local, then a pause the test controls (ADD only).\n\
         d=$(dirname \"$0\")\nin=$(cat)\nout=$(printf '%s' \"$in\" | {hl})\nrc=$?\n\
         if [ \"$CNI_COMMAND\" = ADD ]; then touch \"$d/in-ipam\"; i=0; \
         while [ ! -e \"$d/go\" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; fi\n\
         printf '%s\\n' \"$out\"\nexit $rc\n",
        hl = tern_testkit::exec::ref_plugin_dir().join("host-local").display()
    );
    let p = dir.join("test-script-ipam-pause");
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The pod netns is deleted while IPAM runs (deterministically: IPAM pauses until the test has
/// deleted it). tern opened the netns before IPAM, so ADD completes in the now-anonymous netns;
/// the kernel destroys it (and both veth ends) when tern exits; the runtime's DEL then releases
/// the rest: nothing left.
#[test]
fn netns_vanishes_mid_add() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("van");
    let bin = node.tool.scratch().join("ipam-bin");
    write_pausing_ipam(&bin);
    let mut t = node.tern(Fam::V4.ranges());
    t["ipam"]["type"] = json!("test-script-ipam-pause");
    node.tool
        .write_conflist(&conflist(C0_NAME, "1.0.0", vec![t]))
        .unwrap();
    node.tool.cni_path(&cni_path_with(&bin));
    let pod = node.pod("van");
    let path = pod.path();
    let hv = host_veth(node.tool.get_container_id(), "eth0");

    let adder = {
        let cmd = node.tool.command("add", Some(&path));
        std::thread::spawn(move || {
            let mut cmd = cmd;
            cmd.output().unwrap()
        })
    };
    wait_for("IPAM to allocate", || bin.join("in-ipam").exists());
    drop(pod);
    assert!(!path.exists());
    std::fs::write(bin.join("go"), b"").unwrap();
    let out = adder.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let addrs = if out.status.success() {
        let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        // The anonymous netns dies with tern; its veth end takes the host end along.
        wait_for("the kernel to destroy the orphaned veth", || {
            !node.host.has_link(&hv)
        });
        result_addrs(&r)
    } else {
        // Were tern to notice and fail instead, its undo must have left nothing.
        let addrs = vec!["10.99.0.2".parse().unwrap()];
        node.assert_nothing_left(&addrs);
        addrs
    };
    let del = node.tool.del(&path).unwrap();
    ok(&del, "DEL after the netns vanished");
    node.assert_nothing_left(&addrs);
}

/// An IPAM plugin that logs to stderr on every verb (test-only script around host-local).
fn write_chatty_ipam(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let script = format!(
        "#!/bin/sh\n# test-script-ipam-chatty: host-local, with a log line on stderr.\n\
         echo \"chatty ipam: $CNI_COMMAND\" >&2\nexec {hl}\n",
        hl = tern_testkit::exec::ref_plugin_dir()
            .join("host-local")
            .display()
    );
    let p = dir.join("test-script-ipam-chatty");
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A delegate that writes to stderr while tern runs it from a helper thread (DEL runs IPAM beside
/// the veth deletion) is forwarded, never blocks: tern must not hold the stderr lock meanwhile.
#[test]
fn ipam_logging_to_stderr_never_blocks() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("chat");
    let bin = node.tool.scratch().join("ipam-bin");
    write_chatty_ipam(&bin);
    let mut t = node.tern(Fam::V4.ranges());
    t["ipam"]["type"] = json!("test-script-ipam-chatty");
    node.tool
        .write_conflist(&conflist(C0_NAME, "1.0.0", vec![t]))
        .unwrap();
    node.tool.cni_path(&cni_path_with(&bin));
    let pod = node.pod("chat");
    let path = pod.path();

    // The driver kills a plugin that outlives its deadline and reports it: a hang fails here.
    let add = node.tool.add(&path).expect("ADD ends");
    assert!(add.success(), "ADD: {}", add.describe());
    let addrs = result_addrs(add.json.as_ref().unwrap());
    for _ in 0..2 {
        let del = node.tool.del(&path).expect("DEL ends");
        assert!(del.success(), "DEL: {}", del.describe());
        assert!(
            del.stderr.contains("chatty ipam: DEL"),
            "the delegate's stderr is forwarded: {}",
            del.stderr
        );
    }
    node.assert_nothing_left(&addrs);
}

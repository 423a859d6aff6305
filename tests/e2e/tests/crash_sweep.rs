//! Crash consistency: SIGKILL swept over an ADD of the default chain C0 (tern + host-local, then
//! tern-tuning) through libcni, every 1 ms from 0 to 50 ms after the start and again while the
//! IPAM child runs, each kill followed by a DEL through libcni. Nothing may remain: no veth,
//! route, lease, tern state, tuning backup, changed pod sysctl, or temp file of an atomic write.
//! Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tern_testkit::netns::TestNetns;
use tern_testkit::procs;

/// When the kill lands.
#[derive(Clone, Copy, Debug)]
enum KillAt {
    /// `t` ms after cnitool was spawned.
    Millis(u64),
    /// `us` µs after the IPAM child (host-local) was seen running.
    IpamChild(u64),
}

/// What the sweep saw, for the closing line.
#[derive(Default, Debug)]
struct Tally {
    iterations: usize,
    finished_before_kill: usize,
    ipam_child_killed: usize,
    libcni_torn_caches: usize,
    host_local_torn: usize,
}

/// Runs one ADD killed at `at`, then DEL, and asserts nothing is left.
fn kill_then_del(
    node: &mut Node,
    pod: &TestNetns,
    keepalive: &[String],
    at: KillAt,
    n: usize,
    t: &mut Tally,
) {
    let cid = format!("sweep-{n}");
    node.tool.container_id(&cid);
    let mut cmd = node.tool.command("add", Some(&pod.path()));
    cmd.process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let pgid = i32::try_from(child.id()).unwrap();
    match at {
        KillAt::Millis(ms) => std::thread::sleep(Duration::from_millis(ms)),
        KillAt::IpamChild(us) => {
            if procs::wait_for_member(pgid, "host-local", Duration::from_secs(5)).is_some() {
                t.ipam_child_killed += 1;
                std::thread::sleep(Duration::from_micros(us));
            }
        }
    }
    if child.try_wait().unwrap().is_some() {
        t.finished_before_kill += 1;
    }
    // The whole group: cnitool, tern, host-local and tern-tuning, whichever still run.
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    child.wait().unwrap();
    procs::wait_group_gone(pgid, Duration::from_secs(5))
        .unwrap_or_else(|left| panic!("{at:?}: group outlived SIGKILL: {left:?}"));
    if del_after_kill(node, pod, &format!("{at:?}")) {
        t.libcni_torn_caches += 1;
    }
    assert!(!pod.has_link("eth0"), "{at:?}: pod end left after DEL");
    assert_eq!(
        keepalive_of(pod),
        keepalive,
        "{at:?}: pod keepalive not restored"
    );
    t.host_local_torn += remove_torn_reservations(node);
    node.assert_nothing_left(
        &(2..80)
            .map(|i| format!("10.99.0.{i}").parse().unwrap())
            .collect::<Vec<_>>(),
    );
    t.iterations += 1;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{at:?} took {:?}",
        started.elapsed()
    );
}

/// SIGKILL at 0, 1, … 50 ms after the start of ADD, then 16 times while host-local runs (0 to
/// 1.5 ms after it was seen), each followed by DEL through libcni: DEL exits 0 and nothing is
/// left; the next ADD works at once.
#[test]
fn sigkill_swept_over_add_then_del_leaves_nothing() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("sweep");
    let list = node.c0("1.0.0");
    node.tool.write_conflist(&list).unwrap();
    let pod = node.pod("sweep");
    let keepalive = keepalive_of(&pod);
    let t0 = Instant::now();
    let mut t = Tally::default();
    let mut n = 0;
    for ms in 0..=50 {
        kill_then_del(&mut node, &pod, &keepalive, KillAt::Millis(ms), n, &mut t);
        n += 1;
    }
    for i in 0..16 {
        kill_then_del(
            &mut node,
            &pod,
            &keepalive,
            KillAt::IpamChild(i * 100),
            n,
            &mut t,
        );
        n += 1;
    }
    node.tool.container_id("sweep-final");
    node.tool.timeout(Duration::from_secs(10));
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD after the sweep");
    ok(&node.tool.del(pod.path()).unwrap(), "final DEL");
    node.assert_nothing_left(&result_addrs(add.json.as_ref().unwrap()));
    eprintln!("crash sweep: {t:?} in {:?}", t0.elapsed());
    // Kills must land mid-ADD, and while host-local runs, or the sweep proves nothing.
    // On a fast machine the chain's ADD takes under 10 ms, so most of the 0-50 ms kills come
    // after it: ask for the first ten and the host-local ones to land mid-ADD.
    assert!(
        t.iterations - t.finished_before_kill >= 10,
        "too few kills landed mid-ADD: {t:?}"
    );
    assert!(
        t.ipam_child_killed >= 4,
        "host-local was rarely caught running: {t:?}"
    );
}

/// tern SIGKILLed while its IPAM child runs (a runtime's timeout kills the plugin it exec'd, not
/// its children), then DEL at once: the orphaned IPAM ADD finishes *before* DEL's IPAM call (the
/// attachment lock's fd is the child's too), so DEL releases what it took. The IPAM here logs its
/// ADD's start and end (1 s apart) and its DEL. (Before, DEL ran beside the orphan, which took its
/// lease after the release: the churn saw a host-local lease left, 1 in 250 kills.)
#[test]
fn del_after_a_killed_tern_waits_for_its_ipam_child() {
    if tern_testkit::root::skip() {
        return;
    }
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let node = Node::new("orphan");
    let pod = node.pod("orphan");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("slow-ipam");
    std::fs::write(
        &script,
        "#!/bin/sh\nd=$(dirname \"$0\")\ncat >/dev/null\n\
         if [ \"$CNI_COMMAND\" = DEL ]; then echo del >>\"$d/log\"; exit 0; fi\n\
         [ \"$CNI_COMMAND\" = ADD ] || exit 0\n\
         echo add-start >>\"$d/log\"\nsleep 1\necho add-end >>\"$d/log\"\n\
         echo '{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"10.99.0.50/24\"}]}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut conf = node.tern(Fam::V4.ranges());
    conf["ipam"] = serde_json::json!({"type": "slow-ipam"});
    conf["name"] = serde_json::json!("orphan");
    conf["cniVersion"] = serde_json::json!("1.0.0");
    let call = |verb: &str| {
        node.call("tern", verb)
            .container_id("orphan-1")
            .path(&cni_path_with(dir.path()))
            .netns(pod.path())
            .netconf(&conf)
            .unwrap()
    };
    let mut cmd = call("ADD").command();
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(&conf).unwrap())
        .unwrap();
    let log = dir.path().join("log");
    let start = Instant::now();
    while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("add-start")) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the IPAM never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let out = call("DEL").run().unwrap();
    ok(&out, "DEL after the kill");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "add-start\nadd-end\ndel\n",
        "DEL's IPAM call did not wait for the orphaned IPAM ADD"
    );
}

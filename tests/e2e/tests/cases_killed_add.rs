//! Bug-report case 07: ADD of the default chain C0 through libcni, SIGKILLed midway, then DEL;
//! nothing of tern's is left. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// case-07: ADD through libcni in its own process group, SIGKILLed after t ms for t in 5..320,
/// five sweeps; after each kill DEL exits 0 and nothing is left; the next ADD is not blocked by
/// a stale IPAM lock; no half-written file anywhere.
#[test]
fn case_07_add_killed_midway() {
    if tern_testkit::root::skip() {
        return;
    }
    let (mut node, _) = c0_node("c07");
    let pod = node.pod("c07");
    let keepalive = keepalive_of(&pod);
    let t0 = Instant::now();
    let mut completed = 0;
    let mut libcni_corrupt_caches = 0;
    let mut host_local_torn = 0;
    for sweep in 0..5 {
        for t in [5u64, 10, 20, 40, 80, 160, 320] {
            let cid = format!("c07-{sweep}-{t}");
            node.tool.container_id(&cid);
            let mut cmd = node.tool.command("add", Some(&pod.path()));
            cmd.process_group(0)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let started = Instant::now();
            let mut child = cmd.spawn().unwrap();
            let pgid = Pid::from_raw(i32::try_from(child.id()).unwrap());
            std::thread::sleep(Duration::from_millis(t));
            if child.try_wait().unwrap().is_some() {
                completed += 1;
            }
            // The whole group: cnitool, tern and host-local if they are still running.
            let _ = killpg(pgid, Signal::SIGKILL);
            child.wait().unwrap();
            // Nothing of the group may outlive the kill.
            while killpg(pgid, None).is_ok() {
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "group {pgid} survived SIGKILL"
                );
                std::thread::sleep(Duration::from_millis(2));
            }
            if del_after_kill(&mut node, &pod, &format!("{t} ms (sweep {sweep})")) {
                libcni_corrupt_caches += 1;
            }
            assert!(!pod.has_link("eth0"), "pod end left after DEL ({t} ms)");
            assert_eq!(
                keepalive_of(&pod),
                keepalive,
                "pod keepalive not restored after a kill at {t} ms"
            );
            host_local_torn += remove_torn_reservations(&node);
            node.assert_nothing_left(
                &(2..12)
                    .map(|i| format!("10.99.0.{i}").parse().unwrap())
                    .collect::<Vec<_>>(),
            );
        }
    }
    // The next ADD works at once (no stale lock), and its DEL leaves nothing.
    node.tool.container_id("c07-final");
    node.tool.timeout(Duration::from_secs(10));
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD after the kills");
    ok(&node.tool.del(pod.path()).unwrap(), "final DEL");
    node.assert_nothing_left(&result_addrs(add.json.as_ref().unwrap()));
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "case-07 took {:?}",
        t0.elapsed()
    );
    eprintln!("case-07: {completed} ADDs finished before the kill; {libcni_corrupt_caches} kills left a truncated libcni cache file, {host_local_torn} an empty host-local reservation");
    // Some kills must land mid-ADD, or the test proves nothing.
    assert!(completed < 35, "every ADD finished before its kill");
}

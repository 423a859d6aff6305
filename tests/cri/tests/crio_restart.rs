//! The CRI-O tier, part two: CRI-O SIGKILLed and restarted under live sandboxes, and the drop
//! guard after a failed check and after CRI-O died (see `crio_cri.rs` for the tier). Pod ranges
//! 10.99.231.0/24 (restart), 10.99.232.0/24 and 10.99.233.0/24 (the guard).
//!
//! Needs what `crio_cri.rs` needs: fails, never skips, without it.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod crio_common;

use std::path::PathBuf;

use common::{
    alive, assert_nothing_left, assert_root, cache_entries, in_netns_ok, link_exists,
    run_and_check, IFNAME,
};
use crio_common::{pair, start, trace};
use serde_json::Value;
use tern_cri::client::PodRef;
use tern_cri::containerd::{cgroup_dirs, host_routes_into, mount_points, tern_host_veth};
use tern_cri::crio::{pids_naming, Crio};
use tern_cri::proto::PodSandboxState;

#[test]
fn after_crio_was_killed_and_restarted_stop_and_remove_leave_nothing() {
    assert_root();
    const SUBNET: &str = "10.99.231.0/24";
    const NET: &str = "tern-crio-kill";
    let (mut c, chain) = start("kill", NET, SUBNET, None);
    let pod = PodRef::new("default", "survivor", "uid-survivor");
    let w = run_and_check(&mut c, &chain, &pod, SUBNET);
    let before = trace(&c).len();
    // SIGKILL: no shutdown, no DEL. The netns pin, veth, route, lease and cache entry stay.
    c.kill();
    assert!(link_exists(&tern_host_veth(&w.id, IFNAME)));
    c.restart().unwrap_or_else(|e| panic!("CRI-O restart: {e}"));
    let st = c.cri().unwrap().pod_sandbox_status(&w.id, false).unwrap();
    assert_eq!(
        st.status.unwrap().state,
        PodSandboxState::SandboxReady as i32,
        "the sandbox survives CRI-O's restart"
    );
    in_netns_ok(&w.netns, &["ip", "-4", "addr", "show", "dev", IFNAME]);
    // On start CRI-O asks each plugin's VERSION (CNI_NETNS "dummy"), then, restoring the
    // sandbox, CHECKs the chain with the cached result as prevResult.
    let since: Vec<(String, String)> = trace(&c)[before..]
        .iter()
        .filter(|t| t["containerId"] == w.id.as_str() || t["command"] == "VERSION")
        .map(|t| {
            pair(
                t["plugin"].as_str().unwrap(),
                t["command"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        since,
        [
            pair("tern", "VERSION"),
            pair("tern-tuning", "VERSION"),
            pair("tern", "CHECK"),
            pair("tern-tuning", "CHECK")
        ],
        "{:?}",
        &trace(&c)[before..]
    );
    c.cri().unwrap().stop_pod_sandbox(&w.id).unwrap();
    c.cri().unwrap().remove_pod_sandbox(&w.id).unwrap();
    assert_nothing_left(&mut c, &chain, &w, SUBNET);
    let problems = c.teardown();
    assert!(problems.is_empty(), "teardown had to repair: {problems:?}");
}

/// What a guard must have removed, captured while everything runs.
struct Footprint {
    dir: PathBuf,
    pid: u32,
    cgroup_parent: String,
    veth: String,
    netns: PathBuf,
    net: String,
    subnet: String,
}

fn footprint(c: &mut Crio, chain: &Value, subnet: &str) -> Footprint {
    let pod = PodRef::new("default", "guarded", "uid-guarded");
    let w = run_and_check(c, chain, &pod, subnet);
    Footprint {
        dir: c.dir().to_path_buf(),
        pid: c.pid().unwrap(),
        cgroup_parent: c.cgroup_parent().to_owned(),
        veth: tern_host_veth(&w.id, IFNAME),
        netns: w.netns,
        net: chain["name"].as_str().unwrap().to_owned(),
        subnet: subnet.to_owned(),
    }
}

fn assert_all_gone(f: &Footprint) {
    let pid = i32::try_from(f.pid).unwrap();
    assert!(!alive(pid), "CRI-O {pid} still running");
    assert!(pids_naming(&f.dir).is_empty(), "{:?}", pids_naming(&f.dir));
    assert!(cgroup_dirs(&f.cgroup_parent).is_empty());
    assert!(!f.dir.exists(), "{} left", f.dir.display());
    let prefix = f.dir.to_string_lossy().into_owned();
    let mounts: Vec<String> = mount_points()
        .into_iter()
        .filter(|m| m.starts_with(&prefix))
        .collect();
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    assert!(!f.netns.exists());
    assert!(!link_exists(&f.veth), "host veth {} left", f.veth);
    assert!(
        host_routes_into(&f.subnet).is_empty(),
        "{:?}",
        host_routes_into(&f.subnet)
    );
    assert!(
        cache_entries(&f.net).is_empty(),
        "{:?}",
        cache_entries(&f.net)
    );
}

#[test]
fn the_guard_cleans_up_when_a_check_fails() {
    assert_root();
    const SUBNET: &str = "10.99.232.0/24";
    let (mut c, chain) = start("guard", "tern-crio-guard", SUBNET, None);
    let f = footprint(&mut c, &chain, SUBNET);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _c = c;
        panic!("a failed check (deliberate)");
    }));
    assert!(r.is_err());
    assert_all_gone(&f);
}

#[test]
fn the_guard_cleans_up_after_crio_itself_died() {
    assert_root();
    const SUBNET: &str = "10.99.233.0/24";
    let (mut c, chain) = start("guard-kill", "tern-crio-guardk", SUBNET, None);
    let f = footprint(&mut c, &chain, SUBNET);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(f.pid).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // No CRI for the guard, no CNI DEL: the veth, route and cache entry stay until it acts.
    let problems = c.teardown();
    assert!(
        problems.iter().any(|p| p.contains("libcni cache entry")),
        "the guard did not have to remove the cache entry: {problems:?}"
    );
    drop(c);
    assert_all_gone(&f);
}

//! The CRI-O tier, part two: CRI-O SIGKILLed and restarted under live sandboxes, and the drop
//! guard after a failed check and after CRI-O died (see `crio_cri.rs` for the tier). Pod ranges
//! 10.99.231.0/24 (restart), 10.99.232.0/24 and 10.99.233.0/24 (the guard).
//!
//! Needs what `crio_cri.rs` needs: fails, never skips, without it.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod crio_common;

use common::{
    assert_guard_after_failed_check, assert_guard_after_runtime_died, in_netns_ok, link_exists,
    run_and_check, stop_and_remove, Footprint, IFNAME,
};
use crio_common::{pair, pairs, start, trace};
use tern_cri::client::PodRef;
use tern_cri::host::tern_host_veth;
use tern_cri::proto::PodSandboxState;
use tern_cri::Runtime;

#[test]
fn after_crio_was_killed_and_restarted_stop_and_remove_leave_nothing() {
    if tern_testkit::root::skip() {
        return;
    }
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
    let since = pairs(
        trace(&c)[before..]
            .iter()
            .filter(|t| t["containerId"] == w.id.as_str() || t["command"] == "VERSION"),
    );
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
    stop_and_remove(&mut c, &chain, &w, SUBNET);
    let problems = c.teardown();
    assert!(problems.is_empty(), "teardown had to repair: {problems:?}");
}

#[test]
fn the_guard_cleans_up_when_a_check_fails() {
    if tern_testkit::root::skip() {
        return;
    }
    const SUBNET: &str = "10.99.232.0/24";
    let (mut c, chain) = start("guard", "tern-crio-guard", SUBNET, None);
    let f = Footprint::capture(&mut c, &chain, SUBNET);
    assert_guard_after_failed_check(c, &f);
}

#[test]
fn the_guard_cleans_up_after_crio_itself_died() {
    if tern_testkit::root::skip() {
        return;
    }
    const SUBNET: &str = "10.99.233.0/24";
    let (mut c, chain) = start("guard-kill", "tern-crio-guardk", SUBNET, None);
    let f = Footprint::capture(&mut c, &chain, SUBNET);
    // No CRI for the guard, no CNI DEL: the veth, route and cache entry stay until it acts.
    assert_guard_after_runtime_died(c, &f, "libcni cache entry");
}

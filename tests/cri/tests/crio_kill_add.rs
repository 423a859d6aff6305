//! CRI-O SIGKILLed while tern's ADD runs, then restarted: what the dead RunPodSandbox left is
//! collected, nothing leaks, the kubelet's retry of the same pod gets a working sandbox. Pod
//! range 10.99.239.0/24.
//!
//! The ADD is held deterministically by a test-only IPAM stand-in in the instance's CNI bin dir
//! (`slow-ipam`: a script that, on ADD, records its PIDs and blocks reading a fifo, then `exec`s
//! the real `tern-ipam` binary): tern exec's it as it exec's any IPAM that is not its built-in.
//!
//! Needs what `crio_cri.rs` needs: fails, never skips, without it.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod crictl_cli;
mod crio_common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{
    alive, assert_nothing_left, cache_entries, in_netns_ok, leases, link_exists, run_and_check,
    state_files, IFNAME,
};
use crictl_cli::{crictl_cmd, pod_file};
use crio_common::{pair, start_with, trace};
use serde_json::Value;
use tern_cri::client::PodRef;
use tern_cri::crio::{instance_dir, Crio};
use tern_cri::host::{host_routes_into, tern_host_veth};
use tern_cri::Runtime;

const SUBNET: &str = "10.99.239.0/24";
const NET: &str = "tern-crio-midadd";
const TAG: &str = "midadd";

/// Writes `<dir>/bin/slow-ipam` (see the module doc) and its fifo `<dir>/slow.fifo`; on ADD,
/// until `<dir>/slow.released` exists, it writes "<its PID> <its parent's PID>" to
/// `<dir>/slow.entered` and blocks.
fn install_slow_ipam(dir: &Path) {
    let real = std::fs::read_link(dir.join("bin/tern-ipam")).unwrap();
    let fifo = dir.join("slow.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let script = format!(
        r#"#!/bin/sh
# Test-only: holds an IPAM ADD until the test writes to the fifo, then runs tern-ipam.
if [ "${{CNI_COMMAND-}}" = ADD ] && [ ! -e '{d}/slow.released' ]; then
  echo "$$ $PPID" >'{d}/slow.entered.part' && mv '{d}/slow.entered.part' '{d}/slow.entered'
  read _ <'{fifo}'
fi
exec '{real}' "$@"
"#,
        d = dir.display(),
        fifo = fifo.display(),
        real = real.display()
    );
    let path = dir.join("bin/slow-ipam");
    std::fs::write(&path, script).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&path, mode).unwrap();
}

/// The netns pins under CRI-O's namespaces dir.
fn netns_pins(c: &Crio) -> Vec<PathBuf> {
    std::fs::read_dir(c.netns_dir())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect()
}

fn wait_until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The deployed chain's shape (cniVersion 1.1.0, so CRI-O sends STATUS and GC) with the IPAM
/// behind `slow-ipam`.
fn start_slow() -> (Crio, Value) {
    start_with(TAG, NET, SUBNET, None, |chain| {
        chain["cniVersion"] = "1.1.0".into();
        chain["plugins"][0]["ipam"]["type"] = "slow-ipam".into();
        install_slow_ipam(&instance_dir(TAG));
    })
}

#[test]
fn crio_killed_mid_add_restarts_collects_the_orphan_and_the_retry_works() {
    if tern_testkit::root::skip() {
        return;
    }
    let (mut c, chain) = start_slow();
    let dir = c.dir().to_path_buf();
    let pod = PodRef::new("default", "midadd", "uid-midadd");

    // The kubelet's RunPodSandbox (crictl runp with the same pod config), held in tern's IPAM.
    let pod_json = pod_file(&c, &pod.name, &pod.uid);
    let runp = crictl_cmd(&c, &["runp", pod_json.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let entered = dir.join("slow.entered");
    wait_until("tern's IPAM ADD entered", 60, || entered.exists());
    let pids: Vec<i32> = std::fs::read_to_string(&entered)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let old = trace(&c)
        .iter()
        .find(|t| t["plugin"] == "tern" && t["command"] == "ADD")
        .map(|t| t["containerId"].as_str().unwrap().to_owned())
        .expect("traced ADD of tern");

    // SIGKILL CRI-O mid-ADD: the request fails, the plugins are orphaned and run on.
    c.kill();
    let out = runp.wait_with_output().unwrap();
    assert!(
        !out.status.success(),
        "runp must fail when CRI-O dies under it"
    );
    std::fs::write(dir.join("slow.released"), "").unwrap();
    // Released, the orphaned IPAM and tern finish the ADD: a full attachment no runtime knows.
    std::fs::write(dir.join("slow.fifo"), "go\n").unwrap();
    wait_until("the orphaned ADD's processes exit", 30, || {
        pids.iter().all(|p| !alive(*p))
    });
    // What the orphan left, so the checks below cannot pass vacuously: tern's veth, host route,
    // state and lease, and no libcni cache entry (CRI-O, which writes it, was dead).
    let orphan_veth = tern_host_veth(&old, IFNAME);
    assert!(link_exists(&orphan_veth), "the orphaned ADD made no veth");
    assert_eq!(
        host_routes_into(SUBNET).len(),
        1,
        "{:?}",
        host_routes_into(SUBNET)
    );
    assert!(
        state_files(&c)
            .iter()
            .any(|p| p.to_string_lossy().contains(&old)),
        "{:?}",
        state_files(&c)
    );
    assert_eq!(leases(&c, &chain).len(), 1, "{:?}", leases(&c, &chain));
    assert!(cache_entries(NET).is_empty(), "{:?}", cache_entries(NET));
    let pins_before = netns_pins(&c);

    // CRI-O restarted: the sandbox whose creation never finished is not restored (no DEL for
    // it), and its GC (the chain is 1.1.0) names no valid attachment, which libcni encodes as
    // `null`: tern collects the orphan's veth, route and state, tern-ipam its lease.
    let before = trace(&c).len();
    c.restart().unwrap_or_else(|e| panic!("CRI-O restart: {e}"));
    assert!(c.cri().unwrap().list_pod_sandbox().unwrap().is_empty());
    let is_gc = |t: &Value| t["plugin"] == "tern" && t["command"] == "GC";
    wait_until("CRI-O's GC after the restart", 30, || {
        trace(&c)[before..].iter().any(is_gc)
    });
    let since: Vec<Value> = trace(&c)[before..].to_vec();
    assert!(
        !since.iter().any(|t| t["command"] == "DEL"),
        "CRI-O DELs nothing it did not restore: {since:?}"
    );
    let gc = since.iter().find(|t| is_gc(t)).unwrap();
    assert!(gc["conf"]["cni.dev/valid-attachments"].is_null(), "{gc}");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20)
        && (link_exists(&orphan_veth) || !state_files(&c).is_empty())
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !link_exists(&orphan_veth),
        "the orphan's veth was not collected"
    );
    assert!(leases(&c, &chain).is_empty(), "{:?}", leases(&c, &chain));
    assert!(state_files(&c).is_empty(), "{:?}", state_files(&c));
    assert!(
        host_routes_into(SUBNET).is_empty(),
        "{:?}",
        host_routes_into(SUBNET)
    );
    // CRI-O keeps the pin of the netns it made for the dead sandbox (its leak, not tern's; the
    // drop guard unmounts it): empty, as the pod end of the veth went with the host end.
    assert_eq!(pins_before.len(), 1, "{pins_before:?}");
    assert_eq!(netns_pins(&c), pins_before);
    let links = in_netns_ok(&pins_before[0], &["ip", "-o", "link", "show"]);
    assert_eq!(
        links.lines().count(),
        1,
        "only lo in the dead sandbox's netns: {links}"
    );

    // The kubelet's retry of the same pod (same metadata, same attempt) is wired and works.
    let w = run_and_check(&mut c, &chain, &pod, SUBNET);
    assert_ne!(w.id, old);
    in_netns_ok(&w.netns, &["ip", "-4", "addr", "show", "dev", IFNAME]);
    assert_eq!(leases(&c, &chain), [w.ip.to_string()]);
    let calls: Vec<(String, String)> = trace(&c)
        .iter()
        .filter(|t| t["containerId"] == w.id.as_str())
        .map(|t| {
            pair(
                t["plugin"].as_str().unwrap(),
                t["command"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(calls[0], pair("tern", "ADD"));
    c.cri().unwrap().stop_pod_sandbox(&w.id).unwrap();
    c.cri().unwrap().remove_pod_sandbox(&w.id).unwrap();
    assert_nothing_left(&mut c, &chain, &w, SUBNET);
    let problems = c.teardown();
    assert!(problems.is_empty(), "teardown had to repair: {problems:?}");
}

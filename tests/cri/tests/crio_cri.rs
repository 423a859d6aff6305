//! The CRI-O tier: tern wired by CRI-O (built from its Go module by `scripts/build-go cri-o`),
//! driven through the CRI `runtime.v1` API by our client, as kubelet drives it.
//!
//! Each test starts its own private CRI-O (see `tern_cri::crio`) with a pod range of its own, so
//! the tests run in parallel: 10.99.230.0/24 (default chain), 10.99.236.0/24 (CNI 1.1.0);
//! `crio_restart.rs` has CRI-O killed and the drop guard. tern and tern-tuning run
//! behind a tracer that records what CRI-O passes them (environment and netconf), so the tests
//! assert CRI-O's side of the CNI contract too.
//!
//! Needs root, the CRI-O build (`bash scripts/build-go cri-o`), conmon, runc, podman,
//! busybox-static, jq, the reference CNI plugins and the release binaries: fails, never skips,
//! without them.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod crio_common;

use common::{
    api_with_kubeconfig, assert_no_routes_into, assert_nothing_left, assert_ping_both_ways,
    cache_entries, in_netns_ok, link_exists, pod_path, run_and_check, stop_and_remove, IFNAME,
};
use crio_common::{calls_for, commands, pair, pairs, start, start_with, trace};
use serde_json::Value;
use tern_cri::client::PodRef;
use tern_cri::host::tern_host_veth;
use tern_cri::proto::PodSandboxState;
use tern_cri::Runtime;

#[test]
fn sandboxes_on_the_default_chain_are_wired_reach_each_other_and_leave_nothing() {
    if tern_testkit::root::skip() {
        return;
    }
    const SUBNET: &str = "10.99.230.0/24";
    const NET: &str = "tern-crio-c0";
    let kdir = tempfile::tempdir().unwrap();
    let (api, kubeconfig) = api_with_kubeconfig(kdir.path());
    let a = PodRef::new("default", "pod-a", "uid-a-41c7");
    let b = PodRef::new("default", "pod-b", "uid-b-8e02");
    for p in [&a, &b] {
        api.set_pod(&p.namespace, &p.name, &p.uid, &[], false);
    }
    let (mut c, chain) = start("c0", NET, SUBNET, Some(&kubeconfig));

    let v = c.cri().unwrap().version().unwrap();
    assert_eq!(v.runtime_name, "cri-o", "{v:?}");
    assert_eq!(v.runtime_api_version, "v1", "{v:?}");

    let wa = run_and_check(&mut c, &chain, &a, SUBNET);
    let wb = run_and_check(&mut c, &chain, &b, SUBNET);
    assert_ne!(wa.ip, wb.ip);
    for p in [&a, &b] {
        assert_eq!(
            api.count(&pod_path(p)),
            1,
            "GETs of {}: {:?}",
            p.name,
            api.counts()
        );
    }

    // What CRI-O passed tern on ADD: the K8S_POD_* arguments (IgnoreUnknown first), the pinned
    // netns under namespaces_dir, eth0, no runtimeConfig (tern declares no capabilities).
    let add = trace(&c)
        .into_iter()
        .find(|t| t["plugin"] == "tern" && t["command"] == "ADD" && t["containerId"] == wa.id)
        .unwrap_or_else(|| panic!("no traced ADD of tern for {}: {:?}", wa.id, trace(&c)));
    let want = format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=pod-a;K8S_POD_INFRA_CONTAINER_ID={};K8S_POD_UID=uid-a-41c7",
        wa.id
    );
    assert_eq!(add["args"], want.as_str(), "CNI_ARGS: {add}");
    assert_eq!(add["netns"], wa.netns.to_str().unwrap(), "{add}");
    assert!(wa.netns.starts_with(c.netns_dir()));
    assert_eq!(add["ifname"], IFNAME);
    assert!(add["conf"].get("runtimeConfig").is_none(), "{add}");
    assert_eq!(add["conf"]["name"], NET);
    // CRI-O reads the pod's IPs back with CHECK right after the ADD (ocicni's
    // GetPodNetworkStatus): both plugins must pass it for the sandbox to be READY.
    assert_eq!(
        calls_for(&c, &wa.id),
        [
            pair("tern", "ADD"),
            pair("tern-tuning", "ADD"),
            pair("tern", "CHECK"),
            pair("tern-tuning", "CHECK")
        ],
        "{:?}",
        trace(&c)
    );

    let listed = c.cri().unwrap().list_pod_sandbox().unwrap();
    for w in [&wa, &wb] {
        let s = listed.iter().find(|s| s.id == w.id).unwrap();
        assert_eq!(s.state, PodSandboxState::SandboxReady as i32);
    }
    assert_ping_both_ways(&wa, &wb);

    // a: the ordinary StopPodSandbox + RemovePodSandbox.
    stop_and_remove(&mut c, &chain, &wa, SUBNET);
    let dels: Vec<Value> = trace(&c)
        .into_iter()
        .filter(|t| t["command"] == "DEL" && t["containerId"] == wa.id)
        .collect();
    assert_eq!(dels.len(), 2, "one DEL per plugin: {dels:?}");
    assert_eq!(
        dels[0]["plugin"], "tern-tuning",
        "DEL runs the chain backwards"
    );
    assert_eq!(dels[0]["netns"], wa.netns.to_str().unwrap());

    // b: its netns unmounted and unlinked under CRI-O's feet, then stopped and removed.
    nix::mount::umount2(&wb.netns, nix::mount::MntFlags::MNT_DETACH).unwrap();
    std::fs::remove_file(&wb.netns).unwrap();
    c.cri().unwrap().stop_pod_sandbox(&wb.id).unwrap();
    c.cri().unwrap().remove_pod_sandbox(&wb.id).unwrap();
    assert_nothing_left(&mut c, &chain, &wb, SUBNET);
    // CRI-O still passes the netns path it made, though it is gone: tern's DEL finds no netns
    // there and cleans up the host side from its state.
    let del = trace(&c)
        .into_iter()
        .find(|t| t["command"] == "DEL" && t["containerId"] == wb.id && t["plugin"] == "tern")
        .unwrap_or_else(|| panic!("no DEL of tern for {}: {:?}", wb.id, trace(&c)));
    assert_eq!(del["netns"], wb.netns.to_str().unwrap(), "{del}");
    assert!(!wb.netns.exists());
    // DEL carries the cached ADD result as prevResult.
    assert_eq!(
        del["conf"]["prevResult"]["ips"][0]["address"],
        format!("{}/32", wb.ip).as_str(),
        "{del}"
    );

    // A pod recreated under a new UID: tern refuses the stale sandbox, CRI-O cleans up.
    api.set_pod("default", "web", "uid-new-55aa", &[], false);
    let stale = PodRef::new("default", "web", "uid-old-0b0b");
    let err = c
        .run_sandbox(&stale)
        .expect_err("RunPodSandbox for a recreated pod must fail");
    assert!(
        err.message().contains("uid-new-55aa") && err.message().contains("uid-old-0b0b"),
        "CRI-O's error must carry tern's UID refusal: {err}"
    );
    assert!(c.cri().unwrap().list_pod_sandbox().unwrap().is_empty());
    assert!(cache_entries(NET).is_empty(), "{:?}", cache_entries(NET));
    // tern's ADD failed (the chain stopped there); CRI-O then DELs the whole chain, backwards,
    // with the netns still there: DEL of an attachment tern refused must succeed.
    let stale = pairs(trace(&c).iter().filter(|t| {
        t["args"]
            .as_str()
            .unwrap()
            .contains("K8S_POD_UID=uid-old-0b0b")
    }));
    assert_eq!(
        stale,
        [
            pair("tern", "ADD"),
            pair("tern-tuning", "DEL"),
            pair("tern", "DEL")
        ]
    );

    // DEL makes no API call: one GET per ADD.
    for p in [&a, &b] {
        assert_eq!(api.count(&pod_path(p)), 1, "{:?}", api.counts());
    }
    assert_no_routes_into(SUBNET);
    let problems = c.teardown();
    assert!(problems.is_empty(), "teardown had to repair: {problems:?}");
}

#[test]
fn a_cni_1_1_chain_gets_status_before_any_add_and_gc_keeps_the_live_sandbox() {
    if tern_testkit::root::skip() {
        return;
    }
    const SUBNET: &str = "10.99.236.0/24";
    const NET: &str = "tern-crio-v11";
    // CNI 1.1.0 with tern-ipam (Debian's host-local has no STATUS: tern passes its error on, and
    // CRI-O then never reports NetworkReady).
    let (mut c, chain) = start_with("v11", NET, SUBNET, None, |chain| {
        chain["cniVersion"] = "1.1.0".into();
        chain["plugins"][0]["ipam"]["type"] = "tern-ipam".into();
    });
    let pod = PodRef::new("default", "gc-survivor", "uid-gc-survivor");
    let w = run_and_check(&mut c, &chain, &pod, SUBNET);
    // Start-up: VERSION, then STATUS (NetworkReady waits for it), then GC with no sandbox.
    assert_eq!(
        commands(&c, 0)[..6],
        [
            pair("tern", "VERSION"),
            pair("tern-tuning", "VERSION"),
            pair("tern", "STATUS"),
            pair("tern-tuning", "STATUS"),
            pair("tern", "GC"),
            pair("tern-tuning", "GC")
        ]
    );
    let before = trace(&c).len();
    c.restart().unwrap_or_else(|e| panic!("CRI-O restart: {e}"));
    // After a restart the GC lists the restored sandbox as valid: it must stay wired.
    let gc = trace(&c)[before..]
        .iter()
        .find(|t| t["plugin"] == "tern" && t["command"] == "GC")
        .cloned()
        .unwrap_or_else(|| panic!("no GC after restart: {:?}", commands(&c, before)));
    assert_eq!(
        gc["conf"]["cni.dev/valid-attachments"],
        serde_json::json!([{"containerID": w.id, "ifname": IFNAME}]),
        "{gc}"
    );
    in_netns_ok(&w.netns, &["ip", "-4", "addr", "show", "dev", IFNAME]);
    assert!(link_exists(&tern_host_veth(&w.id, IFNAME)));
    stop_and_remove(&mut c, &chain, &w, SUBNET);
    let problems = c.teardown();
    assert!(problems.is_empty(), "teardown had to repair: {problems:?}");
}

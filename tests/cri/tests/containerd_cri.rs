//! The containerd tier: tern wired by containerd 1.6's CRI plugin, driven through the
//! CRI `runtime.v1` API by our client, as kubelet drives it.
//!
//! Each test starts its own private containerd (see `tern_cri::containerd`) with a pod range of
//! its own, so the tests run in parallel: 10.99.202.0/24 (default chain), 10.99.203.0/24 (UID
//! mismatch), 10.99.204.0/24 and 10.99.205.0/24 (the drop guard). The API server stand-in listens
//! on 127.0.0.1 in the root netns, where containerd (and so tern) runs. tern runs behind the
//! tracer (`tern_cri::trace`), so the tests also assert what containerd passes it.
//!
//! Needs root, containerd, runc, busybox-static, the reference CNI plugins and the release
//! binaries (scripts/setup): fails, never skips, without them.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::{
    alive, api_with_kubeconfig, assert_guard_after_failed_check, assert_guard_after_runtime_died,
    assert_no_routes_into, assert_nothing_left, assert_ping_both_ways, cache_entries, leases,
    pod_path, run_and_check, state_files, stop_and_remove, traced_on_free_range, tuning_backups,
    Footprint, IFNAME,
};
use serde_json::Value;
use tern_cri::chains::tern_chain;
use tern_cri::client::PodRef;
use tern_cri::containerd::{shim_pids, shim_socket_name, Containerd, Network, K8S_NAMESPACE};
use tern_cri::host::tern_host_veth;
use tern_cri::proto::PodSandboxState;
use tern_cri::Runtime;

/// A private containerd on the default chain (named `net`, on `subnet`), with the pod lookup
/// against `kubeconfig` when given. The kubeconfig lives outside the instance dir.
fn start(tag: &str, net: &str, subnet: &str, kubeconfig: Option<&Path>) -> (Containerd, Value) {
    let mut chain = Value::Null;
    let c = Containerd::start(&traced_on_free_range(tag, subnet), |dir| {
        chain = tern_chain(dir, net, subnet, kubeconfig).unwrap();
        vec![Network {
            handler: None,
            conflist: chain.clone(),
        }]
    })
    .unwrap_or_else(|e| panic!("private containerd: {e}"));
    (c, chain)
}

#[test]
fn sandboxes_on_the_default_chain_are_wired_reach_each_other_and_leave_nothing() {
    if tern_testkit::root::skip() {
        return;
    }
    const SUBNET: &str = "10.99.202.0/24";
    const NET: &str = "tern-cri-c0";
    let kdir = tempfile::tempdir().unwrap();
    let (api, kubeconfig) = api_with_kubeconfig(kdir.path());
    let a = PodRef::new("default", "pod-a", "uid-a-6f1c");
    let b = PodRef::new("default", "pod-b", "uid-b-93d2");
    for p in [&a, &b] {
        api.set_pod(&p.namespace, &p.name, &p.uid, &[], false);
    }
    let (mut c, chain) = start("c0", NET, SUBNET, Some(&kubeconfig));

    let v = c.cri().unwrap().version().unwrap();
    assert_eq!(v.runtime_name, "containerd", "{v:?}");
    assert_eq!(
        v.runtime_api_version, "v1",
        "containerd must serve runtime.v1: {v:?}"
    );

    let wa = run_and_check(&mut c, &chain, &a, SUBNET);
    let wb = run_and_check(&mut c, &chain, &b, SUBNET);
    assert_ne!(wa.ip, wb.ip);
    // K8S_POD_NAMESPACE / K8S_POD_NAME reached tern: exactly one GET per ADD, of that pod (and
    // K8S_POD_UID: tern compared it, see the UID test).
    for p in [&a, &b] {
        assert_eq!(
            api.count(&pod_path(p)),
            1,
            "GETs of {}: {:?}",
            p.name,
            api.counts()
        );
    }
    let listed = c.cri().unwrap().list_pod_sandbox().unwrap();
    for w in [&wa, &wb] {
        let s = listed
            .iter()
            .find(|s| s.id == w.id)
            .unwrap_or_else(|| panic!("ListPodSandbox lacks {}: {listed:?}", w.id));
        assert_eq!(s.state, PodSandboxState::SandboxReady as i32);
    }

    assert_ping_both_ways(&wa, &wb);

    // a: the ordinary StopPodSandbox + RemovePodSandbox.
    stop_and_remove(&mut c, &chain, &wa, SUBNET);

    // b: its netns deleted under containerd's feet (unmounted and unlinked, as `ip netns del`
    // does), then stopped and removed: containerd runs the DEL without a netns.
    nix::mount::umount2(&wb.netns, nix::mount::MntFlags::MNT_DETACH).unwrap();
    std::fs::remove_file(&wb.netns).unwrap();
    c.cri().unwrap().stop_pod_sandbox(&wb.id).unwrap();
    c.cri().unwrap().remove_pod_sandbox(&wb.id).unwrap();
    assert_nothing_left(&mut c, &chain, &wb, SUBNET);

    // DEL makes no API call: still one GET per pod.
    for p in [&a, &b] {
        assert_eq!(
            api.count(&pod_path(p)),
            1,
            "GETs of {} after DEL: {:?}",
            p.name,
            api.counts()
        );
    }
    assert!(c.cri().unwrap().list_pod_sandbox().unwrap().is_empty());
    assert_no_routes_into(SUBNET);
    // containerd 1.6's calls, as tern saw them: no CHECK, no VERSION; StopPodSandbox DELs the
    // chain with the netns path, RemovePodSandbox DELs it again with CNI_NETNS empty (and no
    // cached prevResult left); a netns deleted first gives an empty CNI_NETNS on both.
    let calls: Vec<Value> = std::fs::read_to_string(tern_cri::trace::log_path(c.dir()))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |id: &str| -> Vec<(String, String, bool)> {
        calls
            .iter()
            .filter(|t| t["containerId"] == id && t["plugin"] == "tern")
            .map(|t| {
                (
                    t["command"].as_str().unwrap().to_owned(),
                    t["netns"].as_str().unwrap().to_owned(),
                    t["conf"].get("prevResult").is_some(),
                )
            })
            .collect()
    };
    let a_ns = wa.netns.to_string_lossy().into_owned();
    assert_eq!(
        of(&wa.id),
        [
            ("ADD".to_owned(), a_ns.clone(), false),
            ("DEL".into(), a_ns, true),
            ("DEL".into(), String::new(), false)
        ]
    );
    assert_eq!(
        of(&wb.id)[1..],
        [
            ("DEL".to_owned(), String::new(), true),
            ("DEL".into(), String::new(), false)
        ]
    );
    // Our checks left the guard nothing to repair.
    let problems = c.teardown();
    assert!(problems.is_empty(), "teardown had to repair: {problems:?}");
}

#[test]
fn a_pod_whose_uid_differs_is_refused_by_tern_under_containerd_and_nothing_is_wired() {
    if tern_testkit::root::skip() {
        return;
    }
    const SUBNET: &str = "10.99.203.0/24";
    const NET: &str = "tern-cri-uid";
    let kdir = tempfile::tempdir().unwrap();
    let (api, kubeconfig) = api_with_kubeconfig(kdir.path());
    // The API has the pod recreated under a new UID; the sandbox is for the old one.
    api.set_pod("default", "web", "uid-new-55aa", &[], false);
    let (mut c, chain) = start("uid", NET, SUBNET, Some(&kubeconfig));
    let stale = PodRef::new("default", "web", "uid-old-0b0b");
    let err = c
        .run_sandbox(&stale)
        .expect_err("RunPodSandbox for a recreated pod must fail");
    let msg = err.message();
    assert!(
        msg.contains("uid-new-55aa") && msg.contains("uid-old-0b0b"),
        "containerd's error must carry tern's UID refusal: {err}"
    );
    assert_eq!(
        api.count("/api/v1/namespaces/default/pods/web"),
        1,
        "{:?}",
        api.counts()
    );
    // Nothing wired, nothing recorded: containerd cleaned its failed sandbox up.
    assert!(c.cri().unwrap().list_pod_sandbox().unwrap().is_empty());
    assert_no_routes_into(SUBNET);
    assert!(leases(&c, &chain).is_empty(), "{:?}", leases(&c, &chain));
    assert!(state_files(&c).is_empty(), "{:?}", state_files(&c));
    assert!(tuning_backups(&c).is_empty(), "{:?}", tuning_backups(&c));
    assert!(cache_entries(NET).is_empty(), "{:?}", cache_entries(NET));
    let terns: Vec<String> = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            c.sandbox_ids()
                .iter()
                .any(|id| tern_host_veth(id, IFNAME) == *n)
        })
        .collect();
    assert!(terns.is_empty(), "{terns:?}");

    // The same pod with the right UID is wired (the refusal was about the UID only).
    let fresh = PodRef::new("default", "web", "uid-new-55aa");
    let w = run_and_check(&mut c, &chain, &fresh, SUBNET);
    assert_eq!(api.count("/api/v1/namespaces/default/pods/web"), 2);
    stop_and_remove(&mut c, &chain, &w, SUBNET);
    let problems = c.teardown();
    assert!(problems.is_empty(), "teardown had to repair: {problems:?}");
}

/// What a containerd guard must also have removed: the shims and their sockets.
struct Shims {
    socket: String,
    pids: Vec<i32>,
    id: String,
}

/// The common footprint of one guarded sandbox, and its shims.
fn footprint(c: &mut Containerd, chain: &Value, subnet: &str) -> (Footprint, Shims) {
    let f = Footprint::capture(c, chain, subnet);
    let socket = c.socket().to_string_lossy().into_owned();
    let pids = shim_pids(&socket);
    assert!(!pids.is_empty(), "no shim found for {socket}");
    assert!(
        !f.sandbox_pids.is_empty(),
        "no sandbox process in {}",
        f.cgroup_parent
    );
    assert!(
        Path::new("/run/containerd/s")
            .join(shim_socket_name(&socket, K8S_NAMESPACE, &f.id))
            .exists(),
        "shim socket name scheme changed: teardown could not find it"
    );
    let id = f.id.clone();
    (f, Shims { socket, pids, id })
}

fn assert_shims_gone(s: &Shims) {
    for p in &s.pids {
        assert!(!alive(*p), "shim {p} still running");
    }
    assert!(shim_pids(&s.socket).is_empty());
    let sock =
        Path::new("/run/containerd/s").join(shim_socket_name(&s.socket, K8S_NAMESPACE, &s.id));
    assert!(!sock.exists(), "shim socket {} left", sock.display());
}

#[test]
fn the_guard_cleans_up_when_a_check_fails() {
    if tern_testkit::root::skip() {
        return;
    }
    const SUBNET: &str = "10.99.204.0/24";
    let (mut c, chain) = start("guard", "tern-cri-guard", SUBNET, None);
    let (f, shims) = footprint(&mut c, &chain, SUBNET);
    assert_guard_after_failed_check(c, &f);
    assert_shims_gone(&shims);
}

#[test]
fn the_guard_cleans_up_after_containerd_itself_died() {
    if tern_testkit::root::skip() {
        return;
    }
    const SUBNET: &str = "10.99.205.0/24";
    let (mut c, chain) = start("guard-kill", "tern-cri-guardk", SUBNET, None);
    let (f, shims) = footprint(&mut c, &chain, SUBNET);
    // No CRI for the guard, no CNI DEL: the shim, the sandbox process, the netns pin, the
    // rootfs mount, the veth and the cache entry stay behind until it acts.
    assert_guard_after_runtime_died(c, &f, "shim");
    assert_shims_gone(&shims);
}

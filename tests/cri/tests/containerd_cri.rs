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

use std::path::{Path, PathBuf};

use common::{
    alive, api_with_kubeconfig, assert_nothing_left, assert_root, cache_entries, in_netns_ok,
    leases, link_exists, pod_path, run_and_check, state_files, tuning_backups, IFNAME,
};
use serde_json::Value;
use tern_cri::chains::tern_chain;
use tern_cri::client::PodRef;
use tern_cri::containerd::{
    cgroup_dirs, cgroup_pids, host_routes_into, mount_points, shim_pids, shim_socket_name,
    tern_host_veth, Containerd, Network, Options, K8S_NAMESPACE,
};
use tern_cri::proto::PodSandboxState;

/// A private containerd on the default chain (named `net`, on `subnet`), with the pod lookup
/// against `kubeconfig` when given. The kubeconfig lives outside the instance dir.
fn start(tag: &str, net: &str, subnet: &str, kubeconfig: Option<&Path>) -> (Containerd, Value) {
    assert!(
        host_routes_into(subnet).is_empty(),
        "{subnet} is already routed on this host: {:?}",
        host_routes_into(subnet)
    );
    let mut chain = Value::Null;
    let c = Containerd::start(
        &Options {
            tag: tag.into(),
            subnets: vec![subnet.into()],
            trace: vec!["tern".into(), "tern-tuning".into()],
        },
        |dir| {
            chain = tern_chain(dir, net, subnet, kubeconfig).unwrap();
            vec![Network {
                handler: None,
                conflist: chain.clone(),
            }]
        },
    )
    .unwrap_or_else(|e| panic!("private containerd: {e}"));
    (c, chain)
}

#[test]
fn sandboxes_on_the_default_chain_are_wired_reach_each_other_and_leave_nothing() {
    assert_root();
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

    // Pod to pod, both ways, through the host's /32 routes.
    in_netns_ok(
        &wa.netns,
        &["busybox", "ping", "-c", "1", "-W", "3", &wb.ip.to_string()],
    );
    in_netns_ok(
        &wb.netns,
        &["busybox", "ping", "-c", "1", "-W", "3", &wa.ip.to_string()],
    );

    // a: the ordinary StopPodSandbox + RemovePodSandbox.
    c.cri().unwrap().stop_pod_sandbox(&wa.id).unwrap();
    let st = c.cri().unwrap().pod_sandbox_status(&wa.id, false).unwrap();
    assert_eq!(
        st.status.unwrap().state,
        PodSandboxState::SandboxNotready as i32,
        "a after StopPodSandbox"
    );
    c.cri().unwrap().remove_pod_sandbox(&wa.id).unwrap();
    assert_nothing_left(&mut c, &chain, &wa, SUBNET);

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
    assert!(
        host_routes_into(SUBNET).is_empty(),
        "{:?}",
        host_routes_into(SUBNET)
    );
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
    assert_root();
    const SUBNET: &str = "10.99.203.0/24";
    const NET: &str = "tern-cri-uid";
    let kdir = tempfile::tempdir().unwrap();
    let (api, kubeconfig) = api_with_kubeconfig(kdir.path());
    // The API has the pod recreated under a new UID; the sandbox is for the old one.
    api.set_pod("default", "web", "uid-new-55aa", &[], false);
    let (mut c, chain) = start("uid", NET, SUBNET, Some(&kubeconfig));
    let stale = PodRef::new("default", "web", "uid-old-0b0b");
    let err = c
        .run_sandbox(&stale, None)
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
    assert!(
        host_routes_into(SUBNET).is_empty(),
        "{:?}",
        host_routes_into(SUBNET)
    );
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
    c.cri().unwrap().stop_pod_sandbox(&w.id).unwrap();
    c.cri().unwrap().remove_pod_sandbox(&w.id).unwrap();
    assert_nothing_left(&mut c, &chain, &w, SUBNET);
    let problems = c.teardown();
    assert!(problems.is_empty(), "teardown had to repair: {problems:?}");
}

/// What a guard must have removed, captured while everything runs.
struct Footprint {
    dir: PathBuf,
    socket: String,
    pid: u32,
    shims: Vec<i32>,
    sandbox_pids: Vec<i32>,
    cgroups: Vec<PathBuf>,
    cgroup_parent: String,
    veth: String,
    id: String,
    net: String,
    subnet: String,
}

fn footprint(c: &mut Containerd, chain: &Value, subnet: &str) -> Footprint {
    let pod = PodRef::new("default", "guarded", "uid-guarded");
    let w = run_and_check(c, chain, &pod, subnet);
    let socket = c.socket().to_string_lossy().into_owned();
    let shims = shim_pids(&socket);
    assert!(!shims.is_empty(), "no shim found for {socket}");
    let sandbox_pids = cgroup_pids(c.cgroup_parent());
    assert!(
        !sandbox_pids.is_empty(),
        "no sandbox process in {}",
        c.cgroup_parent()
    );
    let cgroups = cgroup_dirs(c.cgroup_parent());
    assert!(
        !cgroups.is_empty(),
        "no cgroup made under {}",
        c.cgroup_parent()
    );
    assert!(
        Path::new("/run/containerd/s")
            .join(shim_socket_name(&socket, K8S_NAMESPACE, &w.id))
            .exists(),
        "shim socket name scheme changed: teardown could not find it"
    );
    Footprint {
        dir: c.dir().to_path_buf(),
        socket,
        pid: c.pid().unwrap(),
        shims,
        sandbox_pids,
        cgroups,
        cgroup_parent: c.cgroup_parent().to_owned(),
        veth: tern_host_veth(&w.id, IFNAME),
        id: w.id,
        net: chain["name"].as_str().unwrap().to_owned(),
        subnet: subnet.to_owned(),
    }
}

fn assert_all_gone(f: &Footprint) {
    let pid = i32::try_from(f.pid).unwrap();
    assert!(!alive(pid), "containerd {pid} still running");
    for p in f.shims.iter().chain(&f.sandbox_pids) {
        assert!(!alive(*p), "process {p} (shim or sandbox) still running");
    }
    assert!(shim_pids(&f.socket).is_empty());
    for cg in &f.cgroups {
        assert!(!cg.exists(), "cgroup {} left", cg.display());
    }
    assert!(cgroup_dirs(&f.cgroup_parent).is_empty());
    assert!(!f.dir.exists(), "{} left", f.dir.display());
    let prefix = f.dir.to_string_lossy().into_owned();
    let mounts: Vec<String> = mount_points()
        .into_iter()
        .filter(|m| m.starts_with(&prefix))
        .collect();
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
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
    let sock =
        Path::new("/run/containerd/s").join(shim_socket_name(&f.socket, K8S_NAMESPACE, &f.id));
    assert!(!sock.exists(), "shim socket {} left", sock.display());
}

#[test]
fn the_guard_cleans_up_when_a_check_fails() {
    assert_root();
    const SUBNET: &str = "10.99.204.0/24";
    let (mut c, chain) = start("guard", "tern-cri-guard", SUBNET, None);
    let f = footprint(&mut c, &chain, SUBNET);
    // A failing check while the sandbox runs: the guard drops during unwinding.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _c = c;
        panic!("a failed check (deliberate)");
    }));
    assert!(r.is_err());
    assert_all_gone(&f);
}

#[test]
fn the_guard_cleans_up_after_containerd_itself_died() {
    assert_root();
    const SUBNET: &str = "10.99.205.0/24";
    let (mut c, chain) = start("guard-kill", "tern-cri-guardk", SUBNET, None);
    let f = footprint(&mut c, &chain, SUBNET);
    // containerd is killed outright: no CRI for the guard, no CNI DEL; the shim, the sandbox
    // process, the netns pin, the rootfs mount, the veth and the cache entry stay behind.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(f.pid).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let problems = c.teardown();
    assert!(
        problems.iter().any(|p| p.contains("shim")),
        "the guard did not have to kill the shim: {problems:?}"
    );
    drop(c);
    assert_all_gone(&f);
}

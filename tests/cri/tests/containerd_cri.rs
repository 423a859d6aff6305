//! The containerd tier: tern wired by containerd 1.6's CRI plugin, driven through the
//! CRI `runtime.v1` API by our client, as kubelet drives it.
//!
//! Each test starts its own private containerd (see `tern_cri::containerd`) with a pod range of
//! its own, so the tests run in parallel: 10.99.202.0/24 (default chain), 10.99.203.0/24 (UID
//! mismatch), 10.99.204.0/24 and 10.99.205.0/24 (the drop guard). The API server stand-in listens
//! on 127.0.0.1 in the root netns, where containerd (and so tern) runs.
//!
//! Needs root, containerd, runc, busybox-static, the reference CNI plugins and the release
//! binaries (scripts/setup): fails, never skips, without them.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tern_apiserver::ApiServer;
use tern_cri::chains::{tern_chain, tuning_sysctls};
use tern_cri::client::PodRef;
use tern_cri::containerd::{
    cgroup_dirs, cgroup_pids, host_routes_into, mount_points, shim_pids, shim_socket_name,
    tern_host_veth, Containerd, Network, Options, K8S_NAMESPACE, LIBCNI_CACHE,
};
use tern_cri::proto::PodSandboxState;
use tern_cri::CriError;

const IFNAME: &str = "eth0";

fn sh(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (run scripts/setup?)"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `args` inside the network namespace at `netns` (`nsenter --net`).
fn in_netns(netns: &Path, args: &[&str]) -> std::process::Output {
    Command::new("nsenter")
        .arg(format!("--net={}", netns.display()))
        .args(args)
        .output()
        .unwrap()
}

fn in_netns_ok(netns: &Path, args: &[&str]) -> String {
    let out = in_netns(netns, args);
    assert!(
        out.status.success(),
        "in {}: {args:?}: {}\n{}{}",
        netns.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_root() {
    let uid = sh(Command::new("id").arg("-u"));
    assert_eq!(uid.trim(), "0", "the containerd tier needs root");
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// libcni result cache entries of network `net` (file names `<net>-<containerID>-<ifname>`).
fn cache_entries(net: &str) -> Vec<String> {
    std::fs::read_dir(LIBCNI_CACHE)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{net}-")))
        .collect()
}

fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// The stand-in API server and a token kubeconfig for it under `dir`.
fn api_with_kubeconfig(dir: &Path) -> (ApiServer, PathBuf) {
    let api = ApiServer::start().unwrap();
    let token = api.issue_token("kube-system", "tern-cni", 3600);
    let kubeconfig = tern_kube::kubeconfig::render(
        &api.url(),
        api.ca_pem().as_bytes(),
        &tern_kube::token::BearerToken::new(token),
    );
    let path = dir.join("tern-kubeconfig");
    std::fs::write(&path, kubeconfig).unwrap();
    (api, path)
}

fn pod_path(p: &PodRef) -> String {
    format!("/api/v1/namespaces/{}/pods/{}", p.namespace, p.name)
}

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

/// A wired sandbox, as the checks see it.
struct Wired {
    id: String,
    ip: Ipv4Addr,
    netns: PathBuf,
}

/// Runs a sandbox for `pod` and checks it: READY, a pod IP in `subnet`, its netns under our
/// state dir, inside it `eth0` with the /32, the routes via 169.254.1.1, `lo` up and the
/// sysctls; on the host the /32 route through tern's veth, the lease, tern's state file,
/// tern-tuning's backup and libcni's cache entry.
fn run_and_check(c: &mut Containerd, chain: &Value, pod: &PodRef, subnet: &str) -> Wired {
    let id = c
        .run_sandbox(pod, None)
        .unwrap_or_else(|e| panic!("RunPodSandbox {}: {e}", pod.name));
    let st = c.cri().unwrap().pod_sandbox_status(&id, false).unwrap();
    let status = st.status.expect("PodSandboxStatus.status");
    assert_eq!(
        status.state,
        PodSandboxState::SandboxReady as i32,
        "{} not READY: {status:?}",
        pod.name
    );
    let meta = status.metadata.expect("metadata");
    assert_eq!(
        (meta.name.as_str(), meta.uid.as_str()),
        (pod.name.as_str(), pod.uid.as_str())
    );
    let ip: Ipv4Addr = status
        .network
        .as_ref()
        .map(|n| n.ip.as_str())
        .unwrap_or_default()
        .parse()
        .unwrap_or_else(|e| panic!("pod IP of {}: {e}: {:?}", pod.name, status.network));
    let net: ipnet_v4::Net = subnet.parse().unwrap();
    assert!(
        net.contains(ip),
        "pod IP {ip} of {} not in {subnet}",
        pod.name
    );

    let netns = c.netns_path(&id).unwrap();
    assert!(
        netns.starts_with(c.dir().join("state")),
        "netns {} is not under the private state dir",
        netns.display()
    );
    // Inside the pod netns.
    let addrs: Value = serde_json::from_str(&in_netns_ok(
        &netns,
        &["ip", "-j", "-4", "addr", "show", "dev", IFNAME],
    ))
    .unwrap();
    let inet: Vec<String> = addrs[0]["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
        .collect();
    assert_eq!(
        inet,
        vec![format!("{ip}/32")],
        "addresses of {IFNAME} in {}",
        pod.name
    );
    assert_eq!(addrs[0]["mtu"], 1500, "mtu of {IFNAME}: {addrs}");
    assert!(
        addrs[0]["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "UP"),
        "{IFNAME} not up: {addrs}"
    );
    let lo: Value = serde_json::from_str(&in_netns_ok(
        &netns,
        &["ip", "-j", "link", "show", "dev", "lo"],
    ))
    .unwrap();
    assert!(
        lo[0]["flags"].as_array().unwrap().iter().any(|f| f == "UP"),
        "lo not up (the CRI plugin's loopback): {lo}"
    );
    let routes: Value =
        serde_json::from_str(&in_netns_ok(&netns, &["ip", "-j", "-4", "route", "show"])).unwrap();
    let routes = routes.as_array().unwrap();
    assert!(
        routes
            .iter()
            .any(|r| r["dst"] == "default" && r["gateway"] == "169.254.1.1" && r["dev"] == IFNAME),
        "no default route via 169.254.1.1 in {}: {routes:?}",
        pod.name
    );
    assert!(
        routes
            .iter()
            .any(|r| r["dst"] == "169.254.1.1" && r["dev"] == IFNAME && r["scope"] == "link"),
        "no link route to the gateway in {}: {routes:?}",
        pod.name
    );
    let sysctls = tuning_sysctls(chain);
    assert!(
        !sysctls.is_empty(),
        "the default chain sets no sysctl: {chain}"
    );
    for (key, want) in &sysctls {
        let file = format!("/proc/sys/{}", key.replace('.', "/"));
        let got = in_netns_ok(&netns, &["cat", &file]);
        assert_eq!(got.trim(), want, "{key} in {}", pod.name);
    }

    // On the host.
    let veth = tern_host_veth(&id, IFNAME);
    let to_pod: Vec<_> = host_routes_into(subnet)
        .into_iter()
        .filter(|(_, dst)| dst == &ip.to_string())
        .collect();
    assert_eq!(
        to_pod,
        vec![(veth.clone(), ip.to_string())],
        "host route to {ip} must go through tern's veth {veth}"
    );
    assert!(
        leases(c, chain).contains(&ip.to_string()),
        "no host-local lease for {ip}: {:?}",
        leases(c, chain)
    );
    assert!(
        state_files(c)
            .iter()
            .any(|p| p.to_string_lossy().contains(&id)),
        "no tern state file for {id}: {:?}",
        state_files(c)
    );
    assert!(
        tuning_backups(c)
            .iter()
            .any(|p| p.to_string_lossy().contains(&id)),
        "no tern-tuning backup for {id}: {:?}",
        tuning_backups(c)
    );
    let net_name = chain["name"].as_str().unwrap();
    assert!(
        cache_entries(net_name).iter().any(|n| n.contains(&id)),
        "no libcni cache entry for {id}: {:?}",
        cache_entries(net_name)
    );
    Wired { id, ip, netns }
}

fn leases(c: &Containerd, chain: &Value) -> Vec<String> {
    files_under(&Containerd::ipam_dir(c.dir()).join(chain["name"].as_str().unwrap()))
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
        .collect()
}

fn state_files(c: &Containerd) -> Vec<PathBuf> {
    files_under(&Containerd::tern_state_dir(c.dir()))
}

fn tuning_backups(c: &Containerd) -> Vec<PathBuf> {
    files_under(&Containerd::tuning_dir(c.dir()))
}

/// Nothing of sandbox `w` is left: no veth, no host route to its IP (nor any through a tern link
/// into the range), no lease, no tern state, no tuning backup, no libcni cache entry, no netns
/// file, and containerd no longer knows it.
fn assert_nothing_left(c: &mut Containerd, chain: &Value, w: &Wired, subnet: &str) {
    let veth = tern_host_veth(&w.id, IFNAME);
    assert!(!link_exists(&veth), "host veth {veth} of {} left", w.id);
    let routes = host_routes_into(subnet);
    assert!(
        !routes
            .iter()
            .any(|(dev, dst)| dst == &w.ip.to_string() || dev == &veth),
        "host route of {} ({}) left: {routes:?}",
        w.id,
        w.ip
    );
    assert!(
        !leases(c, chain).contains(&w.ip.to_string()),
        "lease {} left: {:?}",
        w.ip,
        leases(c, chain)
    );
    let state: Vec<_> = state_files(c)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(&w.id))
        .collect();
    assert!(state.is_empty(), "tern state of {} left: {state:?}", w.id);
    let backups: Vec<_> = tuning_backups(c)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(&w.id))
        .collect();
    assert!(
        backups.is_empty(),
        "tuning backup of {} left: {backups:?}",
        w.id
    );
    let net_name = chain["name"].as_str().unwrap();
    let cached: Vec<_> = cache_entries(net_name)
        .into_iter()
        .filter(|n| n.contains(&w.id))
        .collect();
    assert!(
        cached.is_empty(),
        "libcni cache entry of {} left: {cached:?}",
        w.id
    );
    assert!(!w.netns.exists(), "netns file {} left", w.netns.display());
    let temps: Vec<_> = files_under(c.dir())
        .into_iter()
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(".tmp"))
        .filter(|p| !p.starts_with(c.dir().join("root")))
        .collect();
    assert!(temps.is_empty(), "half-written files left: {temps:?}");
    match c.cri().unwrap().pod_sandbox_status(&w.id, false) {
        Err(CriError::Rpc { status, .. }) if status.code() == tonic::Code::NotFound => {}
        other => panic!(
            "sandbox {} still known after RemovePodSandbox: {other:?}",
            w.id
        ),
    }
}

/// A small IPv4 prefix type (the test's only need: containment).
mod ipnet_v4 {
    use std::net::Ipv4Addr;
    pub struct Net(u32, u32);
    impl std::str::FromStr for Net {
        type Err = String;
        fn from_str(s: &str) -> Result<Net, String> {
            let (a, p) = s.split_once('/').ok_or("no prefix")?;
            let a: Ipv4Addr = a.parse().map_err(|e| format!("{e}"))?;
            let p: u32 = p.parse().map_err(|e| format!("{e}"))?;
            let mask = if p == 0 { 0 } else { u32::MAX << (32 - p) };
            Ok(Net(u32::from(a) & mask, mask))
        }
    }
    impl Net {
        pub fn contains(&self, ip: Ipv4Addr) -> bool {
            u32::from(ip) & self.1 == self.0
        }
    }
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

fn alive(pid: i32) -> bool {
    // A zombie counts as gone: it holds no resource but its PID.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
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

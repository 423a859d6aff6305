//! What the CRI tiers check, whichever runtime wires the sandbox (containerd, CRI-O): a wired
//! sandbox inside and out, nothing left after remove, and the API server stand-in.
//!
//! Shared by the tier test files (`mod common;`): each binary uses a part.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tern_apiserver::ApiServer;
use tern_cri::chains::tuning_sysctls;
use tern_cri::client::PodRef;
use tern_cri::containerd::{host_routes_into, tern_host_veth, LIBCNI_CACHE};
use tern_cri::proto::PodSandboxState;
use tern_cri::CriError;

mod node;
pub use node::Node;

pub const IFNAME: &str = "eth0";

pub fn sh(cmd: &mut Command) -> String {
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

/// Runs `args` inside the network namespace at `netns` (`nsenter --net`); fails the test
/// unless it succeeds; returns its stdout.
pub fn in_netns_ok(netns: &Path, args: &[&str]) -> String {
    let out = Command::new("nsenter")
        .arg(format!("--net={}", netns.display()))
        .args(args)
        .output()
        .unwrap();
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

pub fn assert_root() {
    let uid = sh(Command::new("id").arg("-u"));
    assert_eq!(uid.trim(), "0", "the CRI tiers need root");
}

pub fn files_under(dir: &Path) -> Vec<PathBuf> {
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
pub fn cache_entries(net: &str) -> Vec<String> {
    std::fs::read_dir(LIBCNI_CACHE)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{net}-")))
        .collect()
}

pub fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// The stand-in API server and a token kubeconfig for it under `dir`.
pub fn api_with_kubeconfig(dir: &Path) -> (ApiServer, PathBuf) {
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

pub fn pod_path(p: &PodRef) -> String {
    format!("/api/v1/namespaces/{}/pods/{}", p.namespace, p.name)
}

/// A wired sandbox, as the checks see it.
pub struct Wired {
    /// The sandbox ID.
    pub id: String,
    /// Its pod IP.
    pub ip: Ipv4Addr,
    /// Its netns path.
    pub netns: PathBuf,
}

/// Runs a sandbox for `pod` and checks it: READY, a pod IP in `subnet`, its netns under our
/// state dir, inside it `eth0` with the /32, the routes via 169.254.1.1, `lo` up and the
/// sysctls; on the host the /32 route through tern's veth, the lease, tern's state file,
/// tern-tuning's backup and libcni's cache entry.
pub fn run_and_check<N: Node>(c: &mut N, chain: &Value, pod: &PodRef, subnet: &str) -> Wired {
    let id = c
        .run(pod)
        .unwrap_or_else(|e| panic!("RunPodSandbox {}: {e}", pod.name));
    let st = c.client().pod_sandbox_status(&id, false).unwrap();
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
    assert!(
        in_subnet(ip, subnet),
        "pod IP {ip} of {} not in {subnet}",
        pod.name
    );

    let netns = c.netns_path(&id).unwrap();
    assert!(
        netns.starts_with(c.netns_root()),
        "netns {} is not under the private {}",
        netns.display(),
        c.netns_root().display()
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
        "lo not up (the runtime's loopback): {lo}"
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

pub fn leases<N: Node>(c: &N, chain: &Value) -> Vec<String> {
    files_under(
        &tern_cri::containerd::Containerd::ipam_dir(c.dir()).join(chain["name"].as_str().unwrap()),
    )
    .iter()
    .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
    .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
    .collect()
}

pub fn state_files<N: Node>(c: &N) -> Vec<PathBuf> {
    files_under(&tern_cri::containerd::Containerd::tern_state_dir(c.dir()))
}

pub fn tuning_backups<N: Node>(c: &N) -> Vec<PathBuf> {
    files_under(&tern_cri::containerd::Containerd::tuning_dir(c.dir()))
}

/// Nothing of sandbox `w` is left: no veth, no host route to its IP (nor any through a tern link
/// into the range), no lease, no tern state, no tuning backup, no libcni cache entry, no netns
/// file, and the runtime no longer knows it.
pub fn assert_nothing_left<N: Node>(c: &mut N, chain: &Value, w: &Wired, subnet: &str) {
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
    match c.client().pod_sandbox_status(&w.id, false) {
        Err(CriError::Rpc { status, .. }) if status.code() == tonic::Code::NotFound => {}
        other => panic!(
            "sandbox {} still known after RemovePodSandbox: {other:?}",
            w.id
        ),
    }
}

/// Whether `ip` lies in the IPv4 prefix `subnet` (`a.b.c.d/len`; panics on a malformed one).
fn in_subnet(ip: Ipv4Addr, subnet: &str) -> bool {
    let (a, p) = subnet.split_once('/').unwrap();
    let (a, p): (Ipv4Addr, u32) = (a.parse().unwrap(), p.parse().unwrap());
    let mask = u32::MAX.checked_shl(32 - p).unwrap_or(0);
    u32::from(ip) & mask == u32::from(a) & mask
}

/// Whether `pid` runs (a zombie counts as gone: it holds no resource but its PID).
pub fn alive(pid: i32) -> bool {
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

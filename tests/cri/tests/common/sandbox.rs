//! A sandbox as the checks see it, whichever runtime wired it: run and checked inside and out,
//! pinged, stopped and removed, and nothing of it left.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use serde_json::Value;
use tern_cri::chains::tuning_sysctls;
use tern_cri::client::PodRef;
use tern_cri::host::{host_routes_into, tern_host_veth};
use tern_cri::proto::PodSandboxState;
use tern_cri::{CriError, Runtime};

use super::{
    cache_entries, files_under, in_netns_ok, leases, link_exists, state_files, tuning_backups,
    IFNAME,
};

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
pub fn run_and_check<R: Runtime>(c: &mut R, chain: &Value, pod: &PodRef, subnet: &str) -> Wired {
    let id = c
        .run_sandbox(pod)
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

/// Pod to pod, both ways, through the host's /32 routes.
pub fn assert_ping_both_ways(a: &Wired, b: &Wired) {
    for (from, to) in [(a, b), (b, a)] {
        in_netns_ok(
            &from.netns,
            &["busybox", "ping", "-c", "1", "-W", "3", &to.ip.to_string()],
        );
    }
}

/// The ordinary end of sandbox `w`: StopPodSandbox (then NOTREADY), RemovePodSandbox, and
/// nothing of it left.
pub fn stop_and_remove<R: Runtime>(c: &mut R, chain: &Value, w: &Wired, subnet: &str) {
    c.cri().unwrap().stop_pod_sandbox(&w.id).unwrap();
    let st = c.cri().unwrap().pod_sandbox_status(&w.id, false).unwrap();
    assert_eq!(
        st.status.unwrap().state,
        PodSandboxState::SandboxNotready as i32,
        "{} after StopPodSandbox",
        w.id
    );
    c.cri().unwrap().remove_pod_sandbox(&w.id).unwrap();
    assert_nothing_left(c, chain, w, subnet);
}

/// Nothing of sandbox `w` is left: no veth, no host route to its IP (nor any through a tern link
/// into the range), no lease, no tern state, no tuning backup, no libcni cache entry, no netns
/// file, and the runtime no longer knows it.
pub fn assert_nothing_left<R: Runtime>(c: &mut R, chain: &Value, w: &Wired, subnet: &str) {
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

/// Whether `ip` lies in the IPv4 prefix `subnet` (`a.b.c.d/len`; panics on a malformed one).
fn in_subnet(ip: Ipv4Addr, subnet: &str) -> bool {
    let (a, p) = subnet.split_once('/').unwrap();
    let (a, p): (Ipv4Addr, u32) = (a.parse().unwrap(), p.parse().unwrap());
    let mask = u32::MAX.checked_shl(32 - p).unwrap_or(0);
    u32::from(ip) & mask == u32::from(a) & mask
}

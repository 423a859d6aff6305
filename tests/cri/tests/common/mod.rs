//! What the CRI tiers check, whichever runtime wires the sandbox (containerd, CRI-O): a wired
//! sandbox inside and out, nothing left after remove, and the API server stand-in.
//!
//! Shared by the tier test files (`mod common;`): each binary uses a part.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tern_apiserver::ApiServer;
use tern_cri::chains::{ipam_dir, tern_state_dir, tuning_dir};
use tern_cri::client::PodRef;
use tern_cri::host::{host_routes_into, LIBCNI_CACHE};
use tern_cri::runtime::Options;
use tern_cri::Runtime;

mod guard;
mod sandbox;
#[allow(unused_imports)] // each binary uses a part
pub use guard::{assert_guard_after_failed_check, assert_guard_after_runtime_died, Footprint};
#[allow(unused_imports)]
pub use sandbox::{
    assert_nothing_left, assert_ping_both_ways, run_and_check, stop_and_remove, Wired,
};

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

/// Options for a private runtime on `subnet`, tern and tern-tuning traced; `subnet` must not be
/// routed on this host yet (another run, or something else, would share it).
pub fn traced_on_free_range(tag: &str, subnet: &str) -> Options {
    assert_no_routes_into(subnet);
    Options {
        tag: tag.into(),
        subnets: vec![subnet.into()],
        trace: vec!["tern".into(), "tern-tuning".into()],
    }
}

/// No host route into `subnet`.
pub fn assert_no_routes_into(subnet: &str) {
    let routes = host_routes_into(subnet);
    assert!(
        routes.is_empty(),
        "routes into {subnet} on this host: {routes:?}"
    );
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

pub fn leases<R: Runtime>(c: &R, chain: &Value) -> Vec<String> {
    files_under(&ipam_dir(c.dir()).join(chain["name"].as_str().unwrap()))
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
        .collect()
}

pub fn state_files<R: Runtime>(c: &R) -> Vec<PathBuf> {
    files_under(&tern_state_dir(c.dir()))
}

/// tern-tuning's per-attachment files: all but its node-wide cache of a new netns's sysctls.
pub fn tuning_backups<R: Runtime>(c: &R) -> Vec<PathBuf> {
    tern_testkit::node::tuning_attachment_files(&tuning_dir(c.dir()))
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

//! The CRI-O tier through `crictl`'s CLI, as an operator drives a node: pod and container config
//! files, `runp` / `inspectp` / `create` / `start` / `exec -s` / `stopp` / `rmp`, on tern's
//! default chain. Pod range 10.99.238.0/24.
//!
//! Needs what `crio_cri.rs` needs, plus `crictl` (`bash scripts/build-go cri-tools`): fails,
//! never skips, without it.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod crictl_cli;
mod crio_common;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use common::{assert_nothing_left, link_exists, Wired, IFNAME};
use crictl_cli::{container_file, crictl, crictl_ok, pod_file};
use crio_common::{calls_for, pair, start};
use serde_json::Value;
use tern_cri::chains::tuning_sysctls;
use tern_cri::crio::Crio;
use tern_cri::host::{host_routes_into, tern_host_veth};
use tern_cri::Runtime;

const SUBNET: &str = "10.99.238.0/24";

/// `crictl runp`, then `inspectp -o json`: the sandbox READY with its IP in the range and its
/// netns under CRI-O's namespaces dir; then a container started in it.
fn runp(c: &Crio, name: &str, uid: &str) -> (Wired, String) {
    let pod = pod_file(c, name, uid);
    let id = crictl_ok(c, &["runp", pod.to_str().unwrap()]);
    let v: Value = serde_json::from_str(&crictl_ok(c, &["inspectp", "-o", "json", &id])).unwrap();
    assert_eq!(v["status"]["state"], "SANDBOX_READY", "{v}");
    assert_eq!(v["status"]["metadata"]["uid"], uid, "{v}");
    let ip: Ipv4Addr = v["status"]["network"]["ip"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .unwrap_or_else(|e| panic!("inspectp IP of {name}: {e}: {v}"));
    let netns = v["info"]["runtimeSpec"]["linux"]["namespaces"]
        .as_array()
        .and_then(|a| a.iter().find(|n| n["type"] == "network"))
        .and_then(|n| n["path"].as_str())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no netns path in inspectp: {v}"));
    assert!(netns.starts_with(c.netns_dir()), "{}", netns.display());
    assert!(
        host_routes_into(SUBNET).contains(&(tern_host_veth(&id, IFNAME), ip.to_string())),
        "no host route to {ip} through tern's veth: {:?}",
        host_routes_into(SUBNET)
    );
    let ctr = crictl_ok(
        c,
        &[
            "create",
            "--no-pull",
            &id,
            container_file(c).to_str().unwrap(),
            pod.to_str().unwrap(),
        ],
    );
    crictl_ok(c, &["start", &ctr]);
    (Wired { id, ip, netns }, ctr)
}

fn unmount_and_remove(netns: &Path) {
    nix::mount::umount2(netns, nix::mount::MntFlags::MNT_DETACH).unwrap();
    std::fs::remove_file(netns).unwrap();
}

#[test]
fn crictl_runp_inspectp_stopp_rmp_on_the_default_chain_leave_nothing() {
    if tern_testkit::root::skip() {
        return;
    }
    const NET: &str = "tern-crio-cctl";
    let (mut c, chain) = start("cctl", NET, SUBNET, None);

    let (a, ca) = runp(&c, "cctl-a", "uid-cctl-a");
    let (b, cb) = runp(&c, "cctl-b", "uid-cctl-b");
    assert_ne!(a.ip, b.ip);
    let listed = crictl_ok(&c, &["pods", "-q", "--state", "ready"]);
    for w in [&a, &b] {
        assert!(listed.lines().any(|l| l == w.id), "{listed}");
    }

    // From inside each pod's container (it joined the sandbox's netns): the other pod answers,
    // eth0 holds the pod's /32, the keepalive sysctls tern-tuning set are what the container sees.
    for ((w, ctr), other) in [((&a, &ca), &b), ((&b, &cb), &a)] {
        crictl_ok(
            &c,
            &[
                "exec",
                "-s",
                ctr,
                "ping",
                "-c",
                "1",
                "-W",
                "3",
                &other.ip.to_string(),
            ],
        );
        let addr = crictl_ok(
            &c,
            &["exec", "-s", ctr, "ip", "-4", "addr", "show", "dev", IFNAME],
        );
        assert!(addr.contains(&format!("{}/32", w.ip)), "{addr}");
        let sysctls = tuning_sysctls(&chain);
        assert!(
            sysctls.iter().any(|(k, _)| k.contains("keepalive")),
            "{sysctls:?}"
        );
        for (key, want) in sysctls {
            let file = format!("/proc/sys/{}", key.replace('.', "/"));
            let got = crictl_ok(&c, &["exec", "-s", ctr, "cat", &file]);
            assert_eq!(got, want, "{key} in {}", w.id);
        }
    }

    // a: its container stopped as the kubelet stops it first (busybox's sleep, PID 1, ignores
    // SIGTERM: no grace period), then stopp and rmp.
    crictl_ok(&c, &["stop", "--timeout", "0", &ca]);
    crictl_ok(&c, &["stopp", &a.id]);
    let v: Value =
        serde_json::from_str(&crictl_ok(&c, &["inspectp", "-o", "json", &a.id])).unwrap();
    assert_eq!(v["status"]["state"], "SANDBOX_NOTREADY", "{v}");
    assert!(
        !link_exists(&tern_host_veth(&a.id, IFNAME)),
        "stopp left the veth"
    );
    crictl_ok(&c, &["rmp", &a.id]);
    assert_nothing_left(&mut c, &chain, &a, SUBNET);
    let (ok, _, err) = crictl(&c, &["inspectp", &a.id]);
    assert!(!ok && err.contains("NotFound"), "inspectp after rmp: {err}");

    // b: its netns pin removed first (unmounted and unlinked), then stopp and rmp: tern's DEL
    // gets the path that is gone and cleans up from its state.
    unmount_and_remove(&b.netns);
    crictl_ok(&c, &["stop", "--timeout", "0", &cb]);
    crictl_ok(&c, &["stopp", &b.id]);
    crictl_ok(&c, &["rmp", &b.id]);
    assert_nothing_left(&mut c, &chain, &b, SUBNET);
    assert_eq!(
        calls_for(&c, &b.id),
        [
            pair("tern", "ADD"),
            pair("tern-tuning", "ADD"),
            pair("tern", "CHECK"),
            pair("tern-tuning", "CHECK"),
            pair("tern-tuning", "DEL"),
            pair("tern", "DEL")
        ]
    );

    assert_eq!(crictl_ok(&c, &["pods", "-q"]), "");
    assert_eq!(crictl_ok(&c, &["ps", "-a", "-q"]), "");
    assert!(
        host_routes_into(SUBNET).is_empty(),
        "{:?}",
        host_routes_into(SUBNET)
    );
    let problems = c.teardown();
    assert!(problems.is_empty(), "teardown had to repair: {problems:?}");
}

//! Kernel tests of a pod's own sysctls against the chain's (docs/decisions/0016,
//! a pod's own sysctls win): CRI-O writes a pod's `securityContext.sysctls` when it creates the netns,
//! before the chain, so tern-tuning must leave a netns-wide key whose value differs from a new
//! netns's, and still write the rest. Needs root (`tern_testkit::root::skip`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod common;

use common::*;
use serde_json::{json, Value};

fn backup_json(e: &Env) -> Value {
    serde_json::from_slice(&std::fs::read(e.backup_file()).unwrap()).unwrap()
}

/// The pod netns holds tcp_keepalive_time 300 before the chain (as CRI-O's pinns writes it):
/// ADD keeps 300 and sets the other two keys; the backup says which; CHECK expects 300; a repeated
/// ADD decides the same and still repairs the keys it wrote; DEL restores only what ADD wrote.
#[test]
fn sysctl_the_runtime_wrote_before_the_chain_is_kept() {
    if tern_testkit::root::skip() {
        return;
    }
    let e = env("tt-rs1", "eth0");
    let defaults: Vec<String> = KEEPALIVE.iter().map(|(k, _)| e.pod_sysctl(k)).collect();
    assert_ne!(defaults[0], "300", "a new netns already holds 300");
    e.hp.pod.set_sysctl("net/ipv4/tcp_keepalive_time", "300");
    let conf = conf_for(&e);

    let out = e.add(&conf);
    assert_eq!(out.status, 0, "{}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "300");
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_intvl"), "60");
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_probes"), "5");
    let b = backup_json(&e);
    assert_eq!(
        b["keptSysctl"],
        json!([["net.ipv4.tcp_keepalive_time", "300"]])
    );
    let written: Vec<&str> = b["sysctl"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_str().unwrap())
        .collect();
    assert_eq!(
        written,
        [
            "net.ipv4.tcp_keepalive_intvl",
            "net.ipv4.tcp_keepalive_probes"
        ]
    );
    let out = e.check(&conf);
    assert_eq!(out.status, 0, "CHECK: {}", out.msg());

    // Drift on a key ADD wrote: the repeated ADD writes it again (its value differs from a new
    // netns's only because of the first ADD); the kept key stays kept.
    e.hp.pod.set_sysctl("net/ipv4/tcp_keepalive_intvl", "61");
    let out = e.add(&conf);
    assert_eq!(out.status, 0, "second ADD: {}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_intvl"), "60");
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "300");
    assert_eq!(backup_json(&e), b, "a repeated ADD changed the backup");

    // CHECK holds the kept key to the runtime's value.
    e.hp.pod.set_sysctl("net/ipv4/tcp_keepalive_time", "301");
    let out = e.check(&conf);
    assert_eq!(out.code(), Some(106), "{}", out.msg());
    assert!(out.msg().contains("the runtime's"), "{}", out.msg());
    e.hp.pod.set_sysctl("net/ipv4/tcp_keepalive_time", "300");

    let out = e.del(&conf);
    assert_eq!(out.status, 0, "DEL: {}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "300");
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_intvl"), defaults[1]);
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_probes"), defaults[2]);
}

/// A key of the pod's interface is written whatever it holds (an earlier plugin of the chain,
/// not the runtime, can have set it: the interface did not exist when the netns was made); a new
/// netns's values are cached per boot beside the backups, and a broken cache is rebuilt.
#[test]
fn interface_keys_are_written_and_the_cache_is_rebuilt() {
    if tern_testkit::root::skip() {
        return;
    }
    let e = env("tt-rs2", "eth0").with_allowlist(
        "net\\.ipv4\\.conf\\.IFNAME\\.arp_notify\nnet\\.ipv4\\.tcp_keepalive_time\n",
    );
    e.hp.pod.set_sysctl("net/ipv4/conf/eth0/arp_notify", "1");
    let conf = e.conf(
        "1.1.0",
        json!({"sysctl": {"net.ipv4.conf.IFNAME.arp_notify": "0", "net.ipv4.tcp_keepalive_time": "600"}}),
    );
    let cache = e.backup_dir().join("new-netns-sysctls.cache");
    std::fs::create_dir_all(e.backup_dir()).unwrap();
    std::fs::write(&cache, b"{ not json").unwrap();

    let out = e.add(&conf);
    assert_eq!(out.status, 0, "{}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.conf.eth0.arp_notify"), "0");
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "600");
    assert!(backup_json(&e).get("keptSysctl").is_none());
    let c: Value = serde_json::from_slice(&std::fs::read(&cache).unwrap()).unwrap();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(c["bootID"], boot_id.trim());
    assert_eq!(c["values"][0]["key"], "net/ipv4/tcp_keepalive_time");
    assert_eq!(
        c["values"][0]["new"], "7200",
        "a new netns's tcp_keepalive_time"
    );
    assert_eq!(c["values"].as_array().unwrap().len(), 1, "{c}");
    assert_eq!(e.del(&conf).status, 0);
    assert_eq!(e.pod_sysctl("net.ipv4.conf.eth0.arp_notify"), "1");
}

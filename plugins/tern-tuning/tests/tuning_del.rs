//! Kernel tests of tern-tuning's DEL and its backup: idempotent when things are gone, the first
//! backup kept, fields DEL does not need ignored, invalid entries skipped, a failed restore kept
//! for a retry. Needs root (`tern_testkit::root::skip`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};
use tern_testkit::exec::PluginCall;

/// DEL succeeds when the netns is gone (backup removed), when CNI_NETNS is empty, and when the
/// link is gone.
#[test]
fn del_when_things_are_gone() {
    if tern_testkit::root::skip() {
        return;
    }
    let e = env("tt-gone", "eth0");
    let conf = e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "606"}, "mtu": 1400}),
    );
    assert_eq!(e.add(&conf).status, 0);
    // Link gone: sysctls still restored, attributes skipped.
    e.hp.pod.ip(&["link", "del", "eth0"]);
    assert!(!e.hp.pod.has_link("eth0"));
    let out = e.del(&conf);
    assert_eq!(out.status, 0, "{}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "7200");
    assert!(!e.backup_file().exists());

    let e = env("tt-gone2", "eth0");
    assert_eq!(e.add(&conf_for(&e)).status, 0);
    let out = e.run(
        "DEL",
        Some(Path::new("/run/netns/tern-gone-for-good")),
        &conf_for(&e),
    );
    assert_eq!(out.status, 0, "{}", out.msg());
    assert!(!e.backup_file().exists());

    let e = env("tt-gone3", "eth0");
    assert_eq!(e.add(&conf_for(&e)).status, 0);
    assert_eq!(e.run("DEL", None, &conf_for(&e)).status, 0);
    assert!(!e.backup_file().exists());
}

/// A repeated ADD keeps the original values in the backup, so DEL restores the pre-tuning state.
#[test]
fn repeated_add_keeps_original_backup() {
    if tern_testkit::root::skip() {
        return;
    }
    let e = env("tt-twice", "eth0");
    let c1 = e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "607"}}),
    );
    let c2 = e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "608"}}),
    );
    assert_eq!(e.add(&c1).status, 0);
    assert_eq!(e.add(&c2).status, 0);
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "608");
    assert_eq!(e.del(&c2).status, 0);
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "7200");
}

/// DEL needs only the container ID, ifname and `dataDir` (CNI spec "DEL": complete without error
/// even if resources are missing). Fields of the wrong type, duplicated sysctl keys and unknown
/// `CNI_ARGS` fail ADD but must not stop DEL, or libcni would stop the chain's DEL there and the
/// main plugin's veth, state and lease would stay.
#[test]
fn del_ignores_fields_it_does_not_need() {
    if tern_testkit::root::skip() {
        return;
    }
    let e = env("tt-delmal", "eth0");
    let before = e.pod_sysctl("net.ipv4.tcp_keepalive_time");
    let good = e.conf("1.0.0", keepalive());
    assert_eq!(e.add(&good).status, 0);
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), "600");

    let mut bad = good.clone();
    bad["sysctl"]["net.ipv4.tcp_keepalive_time"] = json!(600);
    bad["mac"] = json!(5);
    bad["mtu"] = json!("big");
    bad["promisc"] = json!("yes");
    bad["args"] = json!({"cni": {"sysctl": "none"}});
    let out = e.add(&bad);
    assert_eq!(out.code(), Some(6), "{}", out.msg());
    assert!(e.backup_file().exists(), "a failed ADD removed the backup");

    let out = e.run_raw(
        "DEL",
        Some(&e.hp.pod.path()),
        serde_json::to_vec(&bad).unwrap(),
        "FOO=1",
    );
    assert_eq!(out.status, 0, "DEL: {}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
    assert!(!e.backup_file().exists());

    // Duplicated sysctl keys: refused by ADD (7), ignored by DEL.
    assert_eq!(e.add(&good).status, 0);
    let raw = serde_json::to_string(&good).unwrap().replacen(
        '{',
        r#"{"sysctl":{"net.ipv4.tcp_fin_timeout":"30","net.ipv4.tcp_fin_timeout":"31"},"#,
        1,
    );
    let out = e.run_raw("DEL", Some(&e.hp.pod.path()), raw.into_bytes(), "");
    assert_eq!(out.status, 0, "DEL with duplicated keys: {}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
    assert!(!e.backup_file().exists());

    // A dataDir of the wrong type: no ADD can have made a backup with it; nothing to do.
    let mut odd = bad.clone();
    odd["dataDir"] = json!(7);
    let out = e.del(&odd);
    assert_eq!(out.status, 0, "DEL with dataDir 7: {}", out.msg());
}

/// A backup somebody tampered with: invalid entries (a key escaping `/proc/sys/net`, a bad MAC)
/// are skipped with a warning naming them, never written; the valid ones are restored; DEL
/// succeeds and removes the backup (the binary, so the warning on stderr can be read).
#[test]
fn del_skips_invalid_backup_entries_and_restores_the_rest() {
    if tern_testkit::root::skip() {
        return;
    }
    let e = env("tt-tamper", "eth0");
    let before = e.pod_sysctl("net.ipv4.tcp_keepalive_time");
    let domain_before = host_sysctl("kernel/domainname");
    let conf = e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "609"}, "mtu": 1400}),
    );
    assert_eq!(e.add(&conf).status, 0);
    let mut saved: Value =
        serde_json::from_slice(&std::fs::read(e.backup_file()).unwrap()).unwrap();
    let list = saved["sysctl"].as_array_mut().unwrap();
    list.insert(0, json!(["net/../kernel/domainname", "pwned"]));
    list.push(json!(["kernel.domainname", "pwned2"]));
    saved["mac"] = json!("not-a-mac");
    std::fs::write(e.backup_file(), serde_json::to_vec(&saved).unwrap()).unwrap();

    let bin = env!("CARGO_BIN_EXE_tern-tuning");
    let out = PluginCall::new(bin, "DEL")
        .netns(e.hp.pod.path())
        .container_id(&e.cid)
        .netconf(&conf)
        .unwrap()
        .run()
        .unwrap();
    assert!(out.success(), "{}", out.describe());
    for named in ["net/../kernel/domainname", "kernel.domainname", "not-a-mac"] {
        assert!(out.stderr.contains(named), "{named}: {}", out.describe());
    }
    assert_eq!(host_sysctl("kernel/domainname"), domain_before);
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
    assert!(e.hp.pod.ip(&["link", "show", "eth0"]).contains("mtu 1500"));
    assert!(!e.backup_file().exists());
}

/// The one case DEL keeps the backup and fails: a *valid* entry the kernel refuses on a sysctl
/// that still exists. The other entries are restored anyway; once the entry is fixed, a retried
/// DEL finishes and removes the backup.
#[test]
fn del_keeps_backup_when_a_valid_restore_fails() {
    if tern_testkit::root::skip() {
        return;
    }
    let e = env("tt-keep", "eth0");
    let before = e.pod_sysctl("net.ipv4.tcp_keepalive_time");
    let conf = e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "610", "net.ipv4.tcp_fin_timeout": "20"}}),
    );
    assert_eq!(e.add(&conf).status, 0);
    let mut saved: Value =
        serde_json::from_slice(&std::fs::read(e.backup_file()).unwrap()).unwrap();
    let good = saved["sysctl"].clone();
    // A well-formed value the kernel rejects (EINVAL).
    saved["sysctl"][1] = json!(["net.ipv4.tcp_fin_timeout", "soon"]);
    std::fs::write(e.backup_file(), serde_json::to_vec(&saved).unwrap()).unwrap();
    let out = e.del(&conf);
    assert_eq!(out.code(), Some(5), "{}", out.msg());
    assert!(
        out.msg().contains("net.ipv4.tcp_fin_timeout") && out.msg().contains("kept"),
        "{}",
        out.msg()
    );
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
    assert!(e.backup_file().exists());

    saved["sysctl"] = good;
    std::fs::write(e.backup_file(), serde_json::to_vec(&saved).unwrap()).unwrap();
    assert_eq!(e.del(&conf).status, 0);
    assert!(!e.backup_file().exists());
}

//! Kernel tests of tern-tuning's link attributes (MAC, MTU, promisc, allmulti, txQLen): applied,
//! checked, restored, and undone with the sysctls when one fails. Needs root: fails without it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod common;

use common::*;
use serde_json::json;

/// Link attributes: applied, reported (MAC in the result), checked, restored.
#[test]
fn link_attributes_applied_checked_restored() {
    let e = env("tt-link", "eth0");
    let before = e.hp.pod.ip(&["-d", "link", "show", "eth0"]);
    let conf = e.conf(
        "1.1.0",
        json!({"mac": "0a:58:0a:01:00:05", "mtu": 1300, "promisc": true, "allmulti": true, "txQLen": 123}),
    );
    let out = e.add(&conf);
    assert_eq!(out.status, 0, "{}", out.msg());
    assert_eq!(
        out.json.unwrap()["interfaces"][0]["mac"],
        "0a:58:0a:01:00:05"
    );
    let shown = e.hp.pod.ip(&["-d", "link", "show", "eth0"]);
    for want in [
        "0a:58:0a:01:00:05",
        "mtu 1300",
        "PROMISC",
        "ALLMULTI",
        "qlen 123",
    ] {
        assert!(shown.contains(want), "{want} missing: {shown}");
    }
    assert_eq!(e.check(&conf).status, 0);
    e.hp.pod.ip(&["link", "set", "eth0", "mtu", "1400"]);
    let out = e.check(&conf);
    assert_eq!(out.code(), Some(106), "{}", out.msg());
    assert!(
        out.msg().contains("mtu: expected 1300, current 1400"),
        "{}",
        out.msg()
    );

    assert_eq!(e.del(&conf).status, 0);
    let after = e.hp.pod.ip(&["-d", "link", "show", "eth0"]);
    let strip = |s: &str| {
        s.split_whitespace()
            .filter(|w| !w.starts_with("link-netns"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        !after.contains("PROMISC") && !after.contains("ALLMULTI") && after.contains("mtu 1500"),
        "{after}"
    );
    let mac_before = before
        .split("link/ether ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    assert!(after.contains(&mac_before), "mac not restored: {after}");
    assert!(strip(&after).contains("qlen 1000"), "{after}");
}

/// A link attribute the kernel rejects after sysctls and the MAC were applied: all undone.
#[test]
fn failed_link_attribute_undoes_sysctls_and_earlier_attributes() {
    let e = env("tt-rb2", "eth0");
    let before = e.pod_sysctl("net.ipv4.tcp_keepalive_time");
    let mac_before = e.hp.pod.ip(&["link", "show", "eth0"]);
    let conf = e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "605"}, "mac": "0a:58:0a:01:00:06", "mtu": 70000}),
    );
    let out = e.add(&conf);
    assert_eq!(out.code(), Some(101), "{}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
    let now = e.hp.pod.ip(&["link", "show", "eth0"]);
    assert!(!now.contains("0a:58:0a:01:00:06"), "{now}");
    assert_eq!(
        mac_before
            .split("link/ether")
            .nth(1)
            .map(|s| s.split_whitespace().next()),
        now.split("link/ether")
            .nth(1)
            .map(|s| s.split_whitespace().next())
    );
    assert!(!e.backup_file().exists());
}

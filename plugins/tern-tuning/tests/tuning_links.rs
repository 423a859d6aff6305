//! Kernel tests of tern-tuning's link attributes (MAC, MTU, promisc, allmulti, txQLen): applied,
//! checked, restored, and undone with the sysctls when one fails. Needs root (`tern_testkit::root::skip`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod common;

use common::*;
use serde_json::json;

/// Link attributes: applied, reported (MAC in the result), checked, restored.
#[test]
fn link_attributes_applied_checked_restored() {
    if tern_testkit::root::skip() {
        return;
    }
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
    // The veth's host end follows the MTU (found by its ifindex: this prevResult lists no host
    // interface), and the result reports it (1.1.0).
    let host_end = || e.hp.host.ip(&["link", "show", &e.peer]);
    assert!(host_end().contains("mtu 1300"), "{}", host_end());
    assert_eq!(e.check(&conf).status, 0);
    e.hp.host.ip(&["link", "set", &e.peer, "mtu", "1500"]);
    let out = e.check(&conf);
    assert!(
        out.msg().contains(&format!(
            "mtu of the host end {}: expected 1300, current 1500",
            e.peer
        )),
        "{}",
        out.msg()
    );
    e.hp.host.ip(&["link", "set", &e.peer, "mtu", "1300"]);
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
    assert!(
        host_end().contains("mtu 1500"),
        "host end not restored: {}",
        host_end()
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
    if tern_testkit::root::skip() {
        return;
    }
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

/// `mtu` on a veth whose other end is not in the plugin's netns (here both ends are in the pod):
/// refused with code 7 before any change, since tern-tuning could not keep both ends equal.
#[test]
fn mtu_on_a_veth_without_its_host_end_is_refused() {
    if tern_testkit::root::skip() {
        return;
    }
    let e = env("tt-nopeer", "eth1");
    e.hp.pod.add_veth("eth0", "eth0p");
    let e = Env {
        ifname: "eth0".into(),
        ..e
    };
    let conf = e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "607"}, "mtu": 1400}),
    );
    let before = e.pod_sysctl("net.ipv4.tcp_keepalive_time");
    let out = e.add(&conf);
    assert_eq!(out.code(), Some(7), "{}", out.msg());
    assert!(
        out.msg()
            .contains("the other end of veth eth0 is not in the plugin's network namespace"),
        "{}",
        out.msg()
    );
    assert!(e.hp.pod.ip(&["link", "show", "eth0"]).contains("mtu 1500"));
    assert!(e.hp.pod.ip(&["link", "show", "eth0p"]).contains("mtu 1500"));
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
    assert!(!e.backup_file().exists());
}

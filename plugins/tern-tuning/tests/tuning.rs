//! Kernel tests of tern-tuning's sysctls in throwaway namespaces: every cniVersion, IFNAME keys,
//! the allowlist, rollback of a rejected write. Needs root (`tern_testkit::root::skip`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod common;

use common::*;
use serde_json::json;
use tern_cni::Version;

/// Keepalive set in the pod netns, the host's untouched, for every
/// supported cniVersion; CHECK passes; DEL restores; a second DEL succeeds.
#[test]
fn keepalive_every_version_add_check_del() {
    if tern_testkit::root::skip() {
        return;
    }
    for v in Version::ALL {
        let v = v.as_str();
        let e = env(&format!("tt-ka{}", v.replace('.', "")), "eth0");
        let host_before = host_sysctl("net/ipv4/tcp_keepalive_time");
        let fake_host_before = e.hp.host.sysctl("net.ipv4.tcp_keepalive_time");
        let pod_before: Vec<String> = KEEPALIVE.iter().map(|(k, _)| e.pod_sysctl(k)).collect();
        let conf = e.conf(v, keepalive());

        let out = e.add(&conf);
        assert_eq!(out.status, 0, "{v}: {}", out.msg());
        let result = out.json.unwrap();
        assert_eq!(result["cniVersion"], v);
        assert_eq!(
            result["interfaces"][0]["name"], "eth0",
            "{v}: prevResult not passed through"
        );
        assert_eq!(result["ips"][0]["address"], "10.1.0.5/32");
        assert_eq!(
            result["ips"][0].get("version").is_some(),
            v.starts_with("0."),
            "{v}"
        );
        for (k, val) in KEEPALIVE {
            assert_eq!(e.pod_sysctl(k), val, "{v}: {k}");
        }
        assert_eq!(
            host_sysctl("net/ipv4/tcp_keepalive_time"),
            host_before,
            "{v}: host changed"
        );
        assert_eq!(
            e.hp.host.sysctl("net.ipv4.tcp_keepalive_time"),
            fake_host_before
        );
        assert!(e.backup_file().exists());
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(e.backup_file()).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);

        if Version::parse(v).unwrap().allows_check() {
            let out = e.check(&conf);
            assert_eq!(out.status, 0, "{v}: CHECK {}", out.msg());
        }

        let out = e.del(&conf);
        assert_eq!(out.status, 0, "{v}: DEL {}", out.msg());
        let pod_after: Vec<String> = KEEPALIVE.iter().map(|(k, _)| e.pod_sysctl(k)).collect();
        assert_eq!(pod_after, pod_before, "{v}: DEL did not restore");
        assert!(!e.backup_file().exists());
        assert_eq!(e.del(&conf).status, 0, "{v}: second DEL");
    }
}

#[test]
fn missing_prev_result_is_an_error_and_nothing_is_written() {
    if tern_testkit::root::skip() {
        return;
    }
    let e = env("tt-noprev", "eth0");
    let before = e.pod_sysctl("net.ipv4.tcp_keepalive_time");
    let mut conf = e.conf("1.0.0", keepalive());
    conf.as_object_mut().unwrap().remove("prevResult");
    let out = e.add(&conf);
    assert_eq!(out.code(), Some(7), "{}", out.msg());
    assert!(out.msg().contains("prevResult"));
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
}

/// IFNAME keys with a dotted interface name and a plain one, ADD and CHECK; CHECK names
/// key, expected and current after a change; slash form works the same way.
#[test]
fn ifname_keys_with_dotted_and_plain_names() {
    if tern_testkit::root::skip() {
        return;
    }
    for ifname in ["eth0.100", "eth0"] {
        let e = env(&format!("tt-if{}", ifname.len()), ifname).with_allowlist(
            "net\\.ipv4\\.conf\\.IFNAME\\.rp_filter\nnet\\.ipv6\\.conf\\.IFNAME\\.accept_ra\nnet/ipv4/conf/IFNAME/arp_ignore\n",
        );
        let conf = e.conf(
            "1.0.0",
            json!({"sysctl": {
                "net.ipv4.conf.IFNAME.rp_filter": "2",
                "net.ipv6.conf.IFNAME.accept_ra": "0",
                "net/ipv4/conf/IFNAME/arp_ignore": "1",
            }}),
        );
        let out = e.add(&conf);
        assert_eq!(out.status, 0, "{ifname}: {}", out.msg());
        let dir = format!("/proc/sys/net/ipv4/conf/{ifname}");
        assert_eq!(
            e.hp.pod
                .exec_ok(&["cat", &format!("{dir}/rp_filter")])
                .trim(),
            "2"
        );
        assert_eq!(
            e.hp.pod
                .exec_ok(&["cat", &format!("{dir}/arp_ignore")])
                .trim(),
            "1"
        );
        assert_eq!(
            e.hp.pod
                .exec_ok(&[
                    "cat",
                    &format!("/proc/sys/net/ipv6/conf/{ifname}/accept_ra")
                ])
                .trim(),
            "0"
        );
        assert_eq!(e.check(&conf).status, 0, "{ifname}");

        e.hp.pod
            .set_sysctl(&format!("net/ipv4/conf/{ifname}/rp_filter"), "0");
        let out = e.check(&conf);
        assert_ne!(out.status, 0);
        assert_eq!(out.code(), Some(106), "{ifname}: {}", out.msg());
        let msg = out.msg();
        assert!(
            msg.contains("net.ipv4.conf.IFNAME.rp_filter")
                && msg.contains("expected \\\"2\\\"")
                && msg.contains("current \\\"0\\\""),
            "{ifname}: {msg}"
        );
        assert_eq!(e.del(&conf).status, 0);
        assert_eq!(
            e.hp.pod
                .exec_ok(&["cat", &format!("{dir}/arp_ignore")])
                .trim(),
            "0"
        );
    }
}

/// The allowlist cannot be bypassed.
#[test]
fn allowlist_cannot_be_bypassed() {
    if tern_testkit::root::skip() {
        return;
    }
    // (a) an allowed key with a disallowed one: nothing written, not even the allowed key.
    let e = env("tt-al-a", "eth0");
    let before = e.pod_sysctl("net.ipv4.tcp_keepalive_time");
    // A new netns inherits ip_forward from the initial one (devconf_inherit_init_net=0).
    let forward_before = e.pod_sysctl("net.ipv4.ip_forward");
    let flipped = if forward_before == "1" { "0" } else { "1" };
    let out = e.add(&e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "601", "net.ipv4.ip_forward": flipped}}),
    ));
    assert_eq!(out.code(), Some(7), "{}", out.msg());
    assert!(
        out.msg().contains("net.ipv4.ip_forward") && out.msg().contains("built-in"),
        "{}",
        out.msg()
    );
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
    assert_eq!(e.pod_sysctl("net.ipv4.ip_forward"), forward_before);
    assert!(!e.backup_file().exists());

    // (b) the allowlist path is a directory, or holds an invalid regex: fail closed.
    let mut e = env("tt-al-b", "eth0");
    let dir = e.data.path().join("allowlist-dir");
    std::fs::create_dir(&dir).unwrap();
    e.plugin.allowlist_path = dir;
    let out = e.add(&e.conf("1.0.0", keepalive()));
    assert_eq!(out.code(), Some(7), "{}", out.msg());
    assert!(out.msg().contains("directory"), "{}", out.msg());
    let e = e.with_allowlist("net\\.ipv4\\.tcp_keepalive_time\nnet.ipv4.(\n");
    let out = e.add(&e.conf("1.0.0", keepalive()));
    assert_eq!(out.code(), Some(7), "{}", out.msg());
    assert!(out.msg().contains("line 2"), "{}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);

    // (c) the same key twice in the raw JSON.
    let e = env("tt-al-c", "eth0");
    let raw = serde_json::to_string(&e.conf("1.0.0", json!({}))).unwrap();
    let raw = raw.replacen(
        '{',
        r#"{"sysctl":{"net.ipv4.tcp_keepalive_time":"602","net.ipv4.tcp_keepalive_time":"603"},"#,
        1,
    );
    let out = e.run_raw("ADD", Some(&e.hp.pod.path()), raw.into_bytes(), "");
    assert_eq!(out.code(), Some(7), "{}", out.msg());
    assert!(out.msg().contains("duplicate key"), "{}", out.msg());
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);

    // (d) escapes under a sloppy `net.*` line.
    let e = env("tt-al-d", "eth0").with_allowlist("net.*\n");
    for key in [
        "kernel.hostname",
        "net/../kernel/hostname",
        "net.ipv4/../../kernel/hostname",
        "net..kernel.hostname",
    ] {
        let out = e.add(&e.conf("1.0.0", json!({"sysctl": {key: "pwned"}})));
        assert_eq!(out.code(), Some(7), "{key}: {}", out.msg());
    }
    // IFNAME with ifname `..`: refused (the dispatcher already refuses such an ifname).
    let mut dots = env("tt-al-e", "eth0").with_allowlist("net.*\n");
    dots.ifname = "..".into();
    let out = dots.add(&dots.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.conf.IFNAME.rp_filter": "2"}}),
    ));
    assert_ne!(out.status, 0);
    assert!(matches!(out.code(), Some(4) | Some(7)), "{}", out.msg());
    // A key with a newline, a value with a newline, a host-only key.
    for (k, v) in [
        ("net.ipv4.tcp_syncookies\nkernel.hostname", "1"),
        ("net.ipv4.tcp_syncookies", "1\nkernel.hostname=x"),
        ("net.core.netdev_max_backlog", "1001"),
    ] {
        let out = e.add(&e.conf("1.0.0", json!({"sysctl": {k: v}})));
        assert_eq!(out.code(), Some(7), "{k:?}={v:?}: {}", out.msg());
    }
    assert_eq!(host_sysctl("kernel/hostname"), nix_hostname());

    // (e) only allowed keys: succeeds.
    let e = env("tt-al-f", "eth0");
    assert_eq!(e.add(&e.conf("1.0.0", keepalive())).status, 0);
}

/// A kernel-rejected sysctl value: code 103 naming key, value and errno; the earlier sysctl is
/// rolled back, no link attribute changed, no backup left.
#[test]
fn rejected_sysctl_rolls_back_everything() {
    if tern_testkit::root::skip() {
        return;
    }
    let e = env("tt-rb1", "eth0");
    let before = e.pod_sysctl("net.ipv4.tcp_keepalive_time");
    let conf = e.conf(
        "1.0.0",
        json!({"sysctl": {"net.ipv4.tcp_keepalive_time": "604", "net.ipv4.tcp_fin_timeout": "soon"}, "mtu": 1280}),
    );
    let out = e.add(&conf);
    assert_eq!(out.code(), Some(103), "{}", out.msg());
    let msg = out.msg();
    assert!(
        msg.contains("net.ipv4.tcp_fin_timeout") && msg.contains("soon") && msg.contains("EINVAL"),
        "{msg}"
    );
    assert_eq!(e.pod_sysctl("net.ipv4.tcp_keepalive_time"), before);
    assert!(e.hp.pod.ip(&["link", "show", "eth0"]).contains("mtu 1500"));
    assert!(!e.backup_file().exists());
}

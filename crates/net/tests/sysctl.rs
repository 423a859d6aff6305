//! Kernel tests of namespace sysctls: real namespaces, real /proc/sys/net. Needs root.
//!
//! Host-only keys: on this kernel (6.x) `net.core.netdev_max_backlog`, `net.core.default_qdisc`
//! and the other `net.core.*` globals, plus e.g. `net.ipv4.cipso_cache_bucket_size`, exist only
//! in the initial network namespace; a pod netns has no such file, so a write must fail with
//! nothing written and nothing created.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use tern_net::netns::NetNs;
use tern_net::sysctl::{self, Allowlist, SysctlKey, SysctlValue};
use tern_net::Error;
use tern_testkit::netns::{HostAndPod, TestNetns};

fn kv(key: &str, value: &str, ifname: &str) -> (SysctlKey, SysctlValue) {
    (
        SysctlKey::parse(key, ifname).unwrap(),
        SysctlValue::parse(key, value).unwrap(),
    )
}

fn host_value(rel: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/{rel}"))
        .unwrap()
        .trim_end()
        .to_string()
}

#[test]
fn keepalive_set_in_pod_netns_host_untouched() {
    if tern_testkit::root::skip() {
        return;
    }
    let hp = HostAndPod::new("sc-ka");
    let pod = NetNs::open(hp.pod.path()).unwrap();
    let host_before = host_value("net/ipv4/tcp_keepalive_time");
    let fake_host_before = hp.host.sysctl("net.ipv4.tcp_keepalive_time");

    let items = [
        kv("net.ipv4.tcp_keepalive_time", "301", "eth0"),
        kv("net.ipv4.tcp_keepalive_intvl", "31", "eth0"),
        kv("net.ipv4.tcp_keepalive_probes", "4", "eth0"),
    ];
    let prev = sysctl::write_all(&pod, &items).unwrap();
    assert_eq!(prev.len(), 3);
    assert_eq!(prev[0].0.raw(), "net.ipv4.tcp_keepalive_time");
    assert_eq!(
        prev[0].1, "7200",
        "a fresh netns starts from the kernel default"
    );

    assert_eq!(hp.pod.sysctl("net.ipv4.tcp_keepalive_time"), "301");
    assert_eq!(hp.pod.sysctl("net.ipv4.tcp_keepalive_intvl"), "31");
    assert_eq!(hp.pod.sysctl("net.ipv4.tcp_keepalive_probes"), "4");
    let keys: Vec<SysctlKey> = items.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(sysctl::read(&pod, &keys).unwrap(), ["301", "31", "4"]);

    assert_eq!(
        host_value("net/ipv4/tcp_keepalive_time"),
        host_before,
        "real host changed"
    );
    assert_eq!(
        hp.host.sysctl("net.ipv4.tcp_keepalive_time"),
        fake_host_before
    );
}

#[test]
fn multi_value_sysctl_round_trips() {
    if tern_testkit::root::skip() {
        return;
    }
    let ns = TestNetns::new("sc-multi");
    let pod = NetNs::open(ns.path()).unwrap();
    let key = SysctlKey::parse("net.ipv4.ip_local_port_range", "eth0").unwrap();
    let prev = sysctl::write_all(
        &pod,
        &[(key.clone(), SysctlValue::parse("k", "20000 30000").unwrap())],
    )
    .unwrap();
    // The kernel prints a tab; restoring the read value must be accepted.
    assert_eq!(
        sysctl::read(&pod, std::slice::from_ref(&key)).unwrap(),
        ["20000\t30000"]
    );
    // A configured value may not carry the tab; a value read back from the kernel may.
    assert!(SysctlValue::parse("k", &prev[0].1).is_err());
    let restore = SysctlValue::from_kernel("k", &prev[0].1).unwrap();
    sysctl::write_all(&pod, &[(key.clone(), restore)]).unwrap();
    assert_eq!(sysctl::read(&pod, &[key]).unwrap(), [prev[0].1.clone()]);
}

#[test]
fn a_failed_write_that_changed_the_value_is_restored() {
    if tern_testkit::root::skip() {
        return;
    }
    let ns = TestNetns::new("sc-part");
    let pod = NetNs::open(ns.path()).unwrap();
    let before_rmem = ns.sysctl("net.ipv4.tcp_rmem");
    let before_time = ns.sysctl("net.ipv4.tcp_keepalive_time");
    // Valid by the value rules, refused by the kernel at "2000x" with EINVAL, after it stored
    // the first two fields (6.18): the write errs and yet changed the value.
    for bad in ["4096 1000 2000x", "4096\t1001\t2000x"] {
        let items = [
            kv("net.ipv4.tcp_keepalive_time", "303", "eth0"),
            (
                SysctlKey::parse("net.ipv4.tcp_rmem", "eth0").unwrap(),
                SysctlValue::from_kernel("net.ipv4.tcp_rmem", bad).unwrap(),
            ),
        ];
        let e = sysctl::write_all(&pod, &items).unwrap_err();
        assert!(
            matches!(&e, Error::SysctlWrite { key, rollback_failures, .. }
                if key == "net.ipv4.tcp_rmem" && rollback_failures.is_empty()),
            "{e:?}"
        );
        assert_eq!(ns.sysctl("net.ipv4.tcp_rmem"), before_rmem, "{bad:?}");
        assert_eq!(ns.sysctl("net.ipv4.tcp_keepalive_time"), before_time);
    }
}

#[test]
fn rejected_value_rolls_back_earlier_writes() {
    if tern_testkit::root::skip() {
        return;
    }
    let ns = TestNetns::new("sc-rb");
    let pod = NetNs::open(ns.path()).unwrap();
    let before_time = ns.sysctl("net.ipv4.tcp_keepalive_time");
    let before_probes = ns.sysctl("net.ipv4.tcp_keepalive_probes");
    let items = [
        kv("net.ipv4.tcp_keepalive_time", "302", "eth0"),
        kv("net.ipv4.tcp_keepalive_probes", "5", "eth0"),
        // Not a number: proc_dointvec answers EINVAL.
        kv("net.ipv4.tcp_fin_timeout", "soon", "eth0"),
    ];
    let e = sysctl::write_all(&pod, &items).unwrap_err();
    match &e {
        Error::SysctlWrite {
            key,
            value,
            errno,
            rollback_failures,
            ..
        } => {
            assert_eq!(key, "net.ipv4.tcp_fin_timeout");
            assert_eq!(value, "soon");
            assert_eq!(*errno, nix::errno::Errno::EINVAL);
            assert!(rollback_failures.is_empty());
        }
        other => panic!("expected SysctlWrite, got {other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("net.ipv4.tcp_fin_timeout")
            && msg.contains("\"soon\"")
            && msg.contains("EINVAL"),
        "{msg}"
    );
    assert_eq!(e.cni_code(), tern_cni::code::SYSCTL_WRITE);
    assert_eq!(ns.sysctl("net.ipv4.tcp_keepalive_time"), before_time);
    assert_eq!(ns.sysctl("net.ipv4.tcp_keepalive_probes"), before_probes);
}

#[test]
fn host_only_key_fails_before_any_write_and_creates_nothing() {
    if tern_testkit::root::skip() {
        return;
    }
    let ns = TestNetns::new("sc-hostonly");
    let pod = NetNs::open(ns.path()).unwrap();
    assert!(std::path::Path::new("/proc/sys/net/core/netdev_max_backlog").exists());
    let before = ns.sysctl("net.ipv4.tcp_keepalive_time");
    let items = [
        kv("net.ipv4.tcp_keepalive_time", "303", "eth0"),
        kv("net.core.netdev_max_backlog", "1001", "eth0"),
    ];
    let e = sysctl::write_all(&pod, &items).unwrap_err();
    assert!(matches!(e, Error::SysctlMissing { .. }), "{e}");
    assert!(e.to_string().contains("net.core.netdev_max_backlog"), "{e}");
    assert_eq!(e.cni_code(), 7);
    assert_eq!(
        ns.sysctl("net.ipv4.tcp_keepalive_time"),
        before,
        "earlier key written"
    );
    let out = ns.exec(&["test", "-e", "/proc/sys/net/core/netdev_max_backlog"]);
    assert!(!out.status.success(), "file created in pod netns");
}

#[test]
fn per_interface_key_with_dotted_ifname() {
    if tern_testkit::root::skip() {
        return;
    }
    let hp = HostAndPod::with_pod_link("sc-if", "eth0.100", "vethsc0");
    let pod = NetNs::open(hp.pod.path()).unwrap();
    let items = [
        kv("net.ipv4.conf.IFNAME.rp_filter", "2", "eth0.100"),
        kv("net/ipv6/conf/IFNAME/accept_ra", "0", "eth0.100"),
    ];
    sysctl::write_all(&pod, &items).unwrap();
    assert_eq!(
        hp.pod
            .exec_ok(&["cat", "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"])
            .trim(),
        "2"
    );
    assert_eq!(
        hp.pod
            .exec_ok(&["cat", "/proc/sys/net/ipv6/conf/eth0.100/accept_ra"])
            .trim(),
        "0"
    );
    // Interface missing from the netns: SysctlMissing, nothing written.
    let e =
        sysctl::write_all(&pod, &[kv("net.ipv4.conf.IFNAME.rp_filter", "1", "eth9")]).unwrap_err();
    assert!(matches!(e, Error::SysctlMissing { .. }), "{e}");
}

#[test]
fn host_helpers_act_in_the_callers_netns() {
    if tern_testkit::root::skip() {
        return;
    }
    let hp = HostAndPod::with_pod_link("sc-host", "eth0", "vethsc1");
    let host = NetNs::open(hp.host.path()).unwrap();
    let key = SysctlKey::parse("net.ipv4.conf.IFNAME.proxy_arp", "vethsc1").unwrap();
    let value = SysctlValue::parse("proxy_arp", "1").unwrap();
    let prev = host
        .run_in(|| sysctl::write_host(&key, &value))
        .unwrap()
        .unwrap();
    assert_eq!(prev, "0");
    assert_eq!(hp.host.sysctl("net.ipv4.conf.vethsc1.proxy_arp"), "1");
    assert_eq!(
        host.run_in(|| sysctl::read_host(&key)).unwrap().unwrap(),
        "1"
    );
    // From the test's own netns the link does not exist.
    assert!(matches!(
        sysctl::read_host(&key),
        Err(Error::SysctlMissing { .. })
    ));
}

#[test]
fn ensure_host_writes_only_a_different_value() {
    if tern_testkit::root::skip() {
        return;
    }
    let hp = HostAndPod::with_pod_link("sc-ensure", "eth0", "vethse1");
    let host = NetNs::open(hp.host.path()).unwrap();
    let key = SysctlKey::parse("net.ipv4.conf.IFNAME.proxy_arp", "vethse1").unwrap();
    let one = SysctlValue::parse("proxy_arp", "1").unwrap();
    let ensure = |v: &SysctlValue| host.run_in(|| sysctl::ensure_host(&key, v)).unwrap();
    assert!(ensure(&one).unwrap(), "0 -> 1 is a write");
    assert_eq!(hp.host.sysctl("net.ipv4.conf.vethse1.proxy_arp"), "1");
    assert!(!ensure(&one).unwrap(), "already 1: no write");
    let zero = SysctlValue::parse("proxy_arp", "0").unwrap();
    assert!(ensure(&zero).unwrap());
    assert_eq!(hp.host.sysctl("net.ipv4.conf.vethse1.proxy_arp"), "0");
}

/// Every escape is refused before anything is written, even under a sloppy
/// allowlist line `net.*`.
#[test]
fn escapes_refused_even_with_sloppy_allowlist() {
    if tern_testkit::root::skip() {
        return;
    }
    let sloppy = Allowlist::from_patterns(&["net.*"], "test allowlist").unwrap();
    for (key, ifname) in [
        ("kernel.hostname", "eth0"),
        ("net/../kernel/hostname", "eth0"),
        ("net.ipv4/../../kernel/hostname", "eth0"),
        ("net..kernel.hostname", "eth0"),
        ("net.ipv4.tcp_syncookies\nkernel.hostname", "eth0"),
        ("net.ipv4.conf.IFNAME.rp_filter", ".."),
    ] {
        let parsed = SysctlKey::parse(key, ifname);
        assert!(
            matches!(parsed, Err(Error::InvalidSysctlKey { .. })),
            "{key:?}/{ifname:?} accepted: {parsed:?}"
        );
        assert_eq!(parsed.unwrap_err().cni_code(), 7);
        let _ = sloppy.is_allowed(key); // whatever the allowlist says, parsing refused it
    }
    assert!(matches!(
        SysctlValue::parse("net.ipv4.tcp_syncookies", "1\nkernel.hostname=x"),
        Err(Error::InvalidSysctlValue { .. })
    ));
    // A pattern that matches only part of a key does not allow it.
    let partial = Allowlist::from_patterns(&[r"tcp_keepalive"], "test allowlist").unwrap();
    assert!(!partial.is_allowed("net.ipv4.tcp_keepalive_time"));
    // A key not in the (default) allowlist.
    let e = Allowlist::builtin()
        .check("net.ipv4.ip_forward")
        .unwrap_err();
    assert!(e.to_string().contains("built-in"), "{e}");
}

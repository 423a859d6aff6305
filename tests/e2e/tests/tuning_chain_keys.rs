//! tern-tuning in chain C0, end to end (bug-report cases 16 and 17): IFNAME keys with dotted and
//! plain interface names in ADD and CHECK; the allowlist cannot be bypassed. Needs root.
//!
//! The allowlist path is fixed in the binary (`/etc/cni/tuning/allowlist.conf`; no override a
//! netconf or environment could reach). Tests that need their own allowlist run libcni (or the
//! plugin) in a private mount namespace with a per-test directory bind-mounted over `/etc/cni`
//! (`Node::private_allowlist`), so the machine's `/etc/cni` is never written and tests cannot race.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};
use tern_testkit::netns::TestNetns;

/// `cat /proc/sys/<rel>` in `ns`, with `rel` in slash form (dotted interface names survive).
fn proc_sys(ns: &TestNetns, rel: &str) -> String {
    ns.exec_ok(&["cat", &format!("/proc/sys/{rel}")])
        .trim_end()
        .to_owned()
}

/// Every `net/ipv{4,6}/conf/<dir>/{rp_filter,accept_ra}` value in `ns`, as `path=value` lines.
fn conf_snapshot(ns: &TestNetns) -> Vec<String> {
    let out = ns.exec_ok(&[
        "sh",
        "-c",
        "for f in /proc/sys/net/ipv4/conf/*/rp_filter /proc/sys/net/ipv6/conf/*/accept_ra; do echo \"$f=$(cat $f)\"; done",
    ]);
    out.lines().map(str::to_owned).collect()
}

/// The machine's hostname (`kernel.hostname` is not per netns: a write from a pod netns would
/// change it).
fn machine_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

/// Allowlist lines for case-16: C0's keepalive keys and the IFNAME keys, dotted and (rp_filter
/// only) slashed.
const CASE16_ALLOW: &[&str] = &[
    r"net\.ipv4\.tcp_keepalive_time",
    r"net\.ipv4\.tcp_keepalive_intvl",
    r"net\.ipv4\.tcp_keepalive_probes",
    r"net\.ipv4\.conf\.IFNAME\.rp_filter",
    r"net\.ipv6\.conf\.IFNAME\.accept_ra",
    r"net/ipv4/conf/IFNAME/rp_filter",
];

/// case-16: `net.ipv4.conf.IFNAME.rp_filter=2` and `net.ipv6.conf.IFNAME.accept_ra=0` through
/// libcni with C0, for ifname `eth0.100` and `eth0`: ADD writes under `conf/<ifname>/`, CHECK
/// passes, and after rp_filter is set to 0 in the pod CHECK fails naming key, expected, current.
#[test]
fn case_16_ifname_keys_dotted_and_plain() {
    if tern_testkit::root::skip() {
        return;
    }
    for ifname in ["eth0.100", "eth0"] {
        let tag = format!("c16{}", ifname.len());
        let mut node = Node::new(&tag);
        node.private_allowlist(Some(CASE16_ALLOW));
        let mut sysctl = keepalive_sysctls();
        sysctl["net.ipv4.conf.IFNAME.rp_filter"] = json!("2");
        sysctl["net.ipv6.conf.IFNAME.accept_ra"] = json!("0");
        let list = node.chain("1.0.0", Fam::V4, vec![node.tuning(sysctl)]);
        node.tool.write_conflist(&list).unwrap();
        node.tool.ifname(ifname);
        let pod = node.pod(&tag);
        assert_ne!(proc_sys(&pod, "net/ipv4/conf/default/rp_filter"), "2");
        assert_ne!(proc_sys(&pod, "net/ipv6/conf/default/accept_ra"), "0");
        let pod_conf = conf_snapshot(&pod);
        let host_conf = conf_snapshot(&node.host);

        let add = node.tool.add(pod.path()).unwrap();
        ok(&add, &format!("ADD with ifname {ifname}"));
        let rp = format!("net/ipv4/conf/{ifname}/rp_filter");
        let ra = format!("net/ipv6/conf/{ifname}/accept_ra");
        assert_eq!(proc_sys(&pod, &rp), "2", "{ifname}: rp_filter");
        assert_eq!(proc_sys(&pod, &ra), "0", "{ifname}: accept_ra");
        // Nothing else changed: the pod's other conf dirs, the host's.
        let after: Vec<String> = conf_snapshot(&pod)
            .into_iter()
            .filter(|l| !l.contains(&format!("/conf/{ifname}/")))
            .collect();
        assert_eq!(after, pod_conf, "{ifname}: another pod conf dir changed");
        let host_after: Vec<String> = conf_snapshot(&node.host)
            .into_iter()
            .filter(|l| !l.contains("/conf/tern"))
            .collect();
        assert_eq!(host_after, host_conf, "{ifname}: a host conf dir changed");

        ok(&node.tool.check(pod.path()).unwrap(), "CHECK");
        pod.set_sysctl(&rp, "0");
        let out = node.tool.check(pod.path()).unwrap();
        assert!(
            !out.success(),
            "CHECK missed rp_filter=0:\n{}",
            out.describe()
        );
        let msg = out.error_msg().unwrap_or("").to_owned();
        for needle in [
            "net.ipv4.conf.IFNAME.rp_filter",
            &rp,
            "expected \"2\"",
            "current \"0\"",
        ] {
            assert!(msg.contains(needle), "{ifname}: {needle:?} not in {msg}");
        }
        let del = node.tool.del(pod.path()).unwrap();
        ok(&del, "DEL");
        node.assert_nothing_left(&result_addrs(add.json.as_ref().unwrap()));
    }
}

/// case-16, slash form: `net/ipv4/conf/IFNAME/rp_filter` with ifname `eth0.100` works like the
/// dotted key when its slash spelling is allowlisted; `net/ipv6/conf/IFNAME/accept_ra`, whose
/// slash spelling is not, is refused with code 7. Neither writes anywhere else.
#[test]
fn case_16_slash_form_keys() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("c16s");
    node.private_allowlist(Some(CASE16_ALLOW));
    node.tool.ifname("eth0.100");
    let pod = node.pod("c16s");
    let pod_conf = conf_snapshot(&pod);
    let host_conf = conf_snapshot(&node.host);

    let list = node.chain(
        "1.0.0",
        Fam::V4,
        vec![node.tuning(json!({"net/ipv4/conf/IFNAME/rp_filter": "2"}))],
    );
    node.tool.write_conflist(&list).unwrap();
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD with a slash-form key");
    assert_eq!(proc_sys(&pod, "net/ipv4/conf/eth0.100/rp_filter"), "2");
    ok(&node.tool.check(pod.path()).unwrap(), "CHECK slash form");
    ok(&node.tool.del(pod.path()).unwrap(), "DEL");
    node.assert_nothing_left(&result_addrs(add.json.as_ref().unwrap()));

    let list = node.chain(
        "1.0.0",
        Fam::V4,
        vec![node.tuning(json!({"net/ipv6/conf/IFNAME/accept_ra": "0"}))],
    );
    node.tool.write_conflist(&list).unwrap();
    let add = node.tool.add(pod.path()).unwrap();
    failed_with(
        &add,
        7,
        "net/ipv6/conf/IFNAME/accept_ra",
        "slash key not allowlisted",
    );
    assert_eq!(
        proc_sys(&pod, "net/ipv6/conf/eth0.100/accept_ra"),
        proc_sys(&pod, "net/ipv6/conf/default/accept_ra"),
        "refused key written"
    );
    ok(&node.tool.del(pod.path()).unwrap(), "DEL after refusal");
    node.assert_nothing_left(&["10.99.0.2".parse().unwrap()]);
    assert_eq!(conf_snapshot(&pod), pod_conf, "pod conf changed");
    let host_after: Vec<String> = conf_snapshot(&node.host)
        .into_iter()
        .filter(|l| !l.contains("/conf/tern"))
        .collect();
    assert_eq!(host_after, host_conf, "host conf changed");
}

/// ADD C0 with `sysctl` through libcni must fail in tern-tuning with `code` and `needles` in
/// its message; the pod's keepalive and port range are unchanged, no backup; DEL leaves nothing.
fn refused_through_libcni(node: &mut Node, pod: &TestNetns, sysctl: Value, needles: &[&str]) {
    let list = node.chain("1.0.0", Fam::V4, vec![node.tuning(sysctl.clone())]);
    node.tool.write_conflist(&list).unwrap();
    let before = keepalive_of(pod);
    let range = pod.sysctl("net.ipv4.ip_local_port_range");
    let host = machine_hostname();
    let out = node.tool.add(pod.path()).unwrap();
    assert!(
        !out.success(),
        "ADD with {sysctl} succeeded:\n{}",
        out.describe()
    );
    let text = out.json.as_ref().map(Value::to_string).unwrap_or_default();
    for n in needles {
        assert!(
            text.contains(n),
            "{n:?} not in the error of {sysctl}:\n{}",
            out.describe()
        );
    }
    assert_eq!(
        keepalive_of(pod),
        before,
        "{sysctl}: an allowed key was applied"
    );
    assert_eq!(pod.sysctl("net.ipv4.ip_local_port_range"), range);
    assert_eq!(machine_hostname(), host, "{sysctl}: the hostname changed");
    assert!(node.tuning_backups().is_empty(), "{sysctl}: backup written");
    ok(&node.tool.del(pod.path()).unwrap(), "DEL after refusal");
    node.assert_nothing_left(&["10.99.0.2".parse().unwrap()]);
}

const KEEPALIVE_ONLY: &[&str] = &[
    r"net\.ipv4\.tcp_keepalive_time",
    r"net\.ipv4\.tcp_keepalive_intvl",
    r"net\.ipv4\.tcp_keepalive_probes",
];

/// case-17 (a), (b), (e) through libcni with C0 and a per-test allowlist file.
#[test]
fn case_17_allowlist_file_through_libcni() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("c17");
    let pod = node.pod("c17");
    node.private_allowlist(Some(KEEPALIVE_ONLY));
    // (a) an allowed key with one the file does not allow (the built-in list would): refused
    // before any write, naming the key and the file.
    let mut mixed = keepalive_sysctls();
    mixed["net.ipv4.ip_local_port_range"] = json!("20000 30000");
    refused_through_libcni(
        &mut node,
        &pod,
        mixed,
        &[
            "net.ipv4.ip_local_port_range",
            "/etc/cni/tuning/allowlist.conf",
        ],
    );
    // (b) the allowlist path is a directory; then a file with an invalid regex: closed, even
    // for keys the built-in list allows.
    node.private_allowlist(None);
    refused_through_libcni(&mut node, &pod, keepalive_sysctls(), &["allowlist"]);
    node.private_allowlist(Some(&[r"net\.ipv4\.tcp_keepalive_time", r"net\.ipv4\.("]));
    refused_through_libcni(&mut node, &pod, keepalive_sysctls(), &["allowlist"]);
    // A line that matches only part of a key does not allow it.
    node.private_allowlist(Some(&[r"net\.ipv4\.tcp_keepalive"]));
    refused_through_libcni(
        &mut node,
        &pod,
        keepalive_sysctls(),
        &["net.ipv4.tcp_keepalive_time"],
    );
    // (e) only allowed keys: succeeds, values in the pod, and DEL restores.
    node.private_allowlist(Some(KEEPALIVE_ONLY));
    let list = node.c0("1.0.0");
    node.tool.write_conflist(&list).unwrap();
    let before = keepalive_of(&pod);
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD with only allowed keys");
    assert_eq!(keepalive_of(&pod), wanted());
    ok(&node.tool.del(pod.path()).unwrap(), "DEL");
    assert_eq!(keepalive_of(&pod), before);
    node.assert_nothing_left(&result_addrs(add.json.as_ref().unwrap()));
}

/// case-17 (d) through libcni: escapes under the sloppy allowlist line `net.*` are refused with
/// code 7 and the hostname is never written.
#[test]
fn case_17_escapes_refused_under_a_sloppy_allowlist() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("c17d");
    let pod = node.pod("c17d");
    node.private_allowlist(Some(&["net.*"]));
    for key in [
        "kernel.hostname",
        "net/../kernel/hostname",
        "net.ipv4/../../kernel/hostname",
        "net..kernel.hostname",
        "net.ipv4.conf.IFNAME/../../../kernel/hostname",
    ] {
        let mut sysctl = keepalive_sysctls();
        sysctl[key] = json!("tern-e2e-escaped");
        refused_through_libcni(&mut node, &pod, sysctl, &[key, "\"code\":7"]);
    }
    // A key with a newline, a value with a newline.
    let mut sysctl = keepalive_sysctls();
    sysctl["net.ipv4.tcp_keepalive_time\nkernel.hostname"] = json!("1");
    refused_through_libcni(&mut node, &pod, sysctl, &["\"code\":7"]);
    let mut sysctl = keepalive_sysctls();
    sysctl["net.ipv4.tcp_keepalive_time"] = json!("600\n700");
    refused_through_libcni(&mut node, &pod, sysctl, &["\"code\":7"]);
}

/// case-17 (c) and (d)'s ifname `..`, by direct invocation: libcni cannot send either. It
/// re-marshals each plugin through a Go map (a duplicated key arrives once, the last value), and
/// tern, first in the chain, refuses ifname `..` before tern-tuning runs.
#[test]
fn case_17_duplicate_key_and_dotdot_ifname_direct() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("c17c");
    let etc = node.private_allowlist(Some(&["net.*"]));
    let pod = node.pod("c17c");
    let list = node.chain("1.0.0", Fam::V4, vec![]);
    node.tool.write_conflist(&list).unwrap();
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "tern ADD");
    let prev = add.json.clone().unwrap();
    let before = keepalive_of(&pod);
    let host = machine_hostname();

    let raw = format!(
        r#"{{"cniVersion":"1.0.0","name":"c0","type":"tern-tuning","dataDir":{},
"sysctl":{{"net.ipv4.tcp_keepalive_time":"600","net.ipv4.tcp_keepalive_time":"700"}},
"prevResult":{}}}"#,
        json!(node.tuning_dir()),
        prev
    );
    let out = node
        .call("tern-tuning", "ADD")
        .etc_cni(&etc)
        .container_id(node.tool.get_container_id())
        .netns(pod.path())
        .stdin(raw.into_bytes())
        .run()
        .unwrap();
    failed_with(
        &out,
        7,
        "net.ipv4.tcp_keepalive_time",
        "duplicate sysctl key",
    );
    assert_eq!(keepalive_of(&pod), before, "a duplicate key was applied");

    let mut conf = Node::plugin_conf(
        &node.chain(
            "1.0.0",
            Fam::V4,
            vec![node.tuning(json!({"net.ipv4.conf.IFNAME.rp_filter": "2"}))],
        ),
        1,
    );
    conf["prevResult"] = prev.clone();
    let out = node
        .call("tern-tuning", "ADD")
        .etc_cni(&etc)
        .container_id(node.tool.get_container_id())
        .netns(pod.path())
        .ifname("..")
        .netconf(&conf)
        .unwrap()
        .run()
        .unwrap();
    assert!(!out.success(), "ifname ..:\n{}", out.describe());
    assert!(
        matches!(out.error_code(), Some(4 | 7)),
        "ifname ..: {}",
        out.describe()
    );
    assert_eq!(machine_hostname(), host);
    assert!(node.tuning_backups().is_empty(), "backup written");
    ok(&node.tool.del(pod.path()).unwrap(), "DEL");
    node.assert_nothing_left(&result_addrs(&prev));
}

//! tern-tuning in chain C0, end to end: the keepalive values land in the pod netns and nowhere
//! else for every cniVersion (libcni for 0.3.0–1.0.0, direct invocation with tern-ipam for 1.1.0).
//! Needs root. IFNAME keys and the allowlist: `tuning_chain_keys.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};

fn keepalive_through_libcni(version: &str) {
    let tag = format!("ka{}", version.replace('.', ""));
    let mut node = Node::new(&tag);
    let list = node.c0(version);
    node.tool.write_conflist(&list).unwrap();
    let pod = node.pod(&tag);
    let pod_before = keepalive_of(&pod);
    let host_before = keepalive_of(&node.host);
    let machine_before = machine_keepalive();
    assert_ne!(
        pod_before,
        wanted(),
        "C0's values must differ from a new netns's"
    );
    assert_ne!(
        host_before,
        wanted(),
        "C0's values must differ from the host's"
    );

    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, &format!("ADD C0 at {version}"));
    let result = add.json.clone().unwrap();
    assert_eq!(result["cniVersion"], version, "{result}");
    assert_eq!(keepalive_of(&pod), wanted(), "{version}: pod not tuned");
    assert_eq!(
        keepalive_of(&node.host),
        host_before,
        "{version}: host changed"
    );
    assert_eq!(
        machine_keepalive(),
        machine_before,
        "{version}: machine changed"
    );
    let backups = node.tuning_backups();
    assert_eq!(backups.len(), 1, "{version}: backups {backups:?}");

    if version != "0.3.0" && version != "0.3.1" {
        ok(&node.tool.check(pod.path()).unwrap(), "CHECK");
        pod.set_sysctl("net/ipv4/tcp_keepalive_probes", "9");
        let out = node.tool.check(pod.path()).unwrap();
        assert!(
            !out.success(),
            "CHECK missed a changed value:\n{}",
            out.describe()
        );
        let msg = out.error_msg().unwrap_or("").to_owned();
        assert!(
            msg.contains("net.ipv4.tcp_keepalive_probes")
                && msg.contains("expected \"5\"")
                && msg.contains("current \"9\""),
            "{version}: {msg}"
        );
    }

    let del = node.tool.del(pod.path()).unwrap();
    ok(&del, "DEL");
    assert_eq!(
        keepalive_of(&pod),
        pod_before,
        "{version}: DEL did not restore"
    );
    assert_eq!(keepalive_of(&node.host), host_before);
    node.assert_nothing_left(&result_addrs(&result));
}

#[test]
fn keepalive_in_pod_only_v0_3_0() {
    if tern_testkit::root::skip() {
        return;
    }
    keepalive_through_libcni("0.3.0");
}

#[test]
fn keepalive_in_pod_only_v0_3_1() {
    if tern_testkit::root::skip() {
        return;
    }
    keepalive_through_libcni("0.3.1");
}

#[test]
fn keepalive_in_pod_only_v0_4_0() {
    if tern_testkit::root::skip() {
        return;
    }
    keepalive_through_libcni("0.4.0");
}

#[test]
fn keepalive_in_pod_only_v1_0_0() {
    if tern_testkit::root::skip() {
        return;
    }
    keepalive_through_libcni("1.0.0");
}

/// 1.1.0, which Debian's libcni cannot drive: each plugin invoked as a runtime would, tern with
/// tern-ipam, then tern-tuning with tern's result as prevResult; CHECK and DEL in reverse.
#[test]
fn keepalive_in_pod_only_v1_1_0() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("ka110");
    let mut tern = node.tern(Fam::Dual.ranges());
    tern["ipam"]["type"] = json!("tern-ipam");
    let list = tern_testkit::exec::conflist(
        C0_NAME,
        "1.1.0",
        vec![tern, node.tuning(keepalive_sysctls())],
    );
    let pod = node.pod("ka110");
    let pod_before = keepalive_of(&pod);
    let host_before = keepalive_of(&node.host);
    let cid = "ka110-container";
    let call = |i: usize, verb: &str, prev: Option<&Value>| {
        let mut c = Node::plugin_conf(&list, i);
        if let Some(p) = prev {
            c["prevResult"] = p.clone();
        }
        let plugin = c["type"].as_str().unwrap().to_owned();
        node.call(&plugin, verb)
            .container_id(cid)
            .netns(pod.path())
            .netconf(&c)
            .unwrap()
            .run()
            .unwrap()
    };
    let add = call(0, "ADD", None);
    ok(&add, "tern ADD 1.1.0");
    let r0 = add.json.clone().unwrap();
    let add = call(1, "ADD", Some(&r0));
    ok(&add, "tern-tuning ADD 1.1.0");
    let r1 = add.json.clone().unwrap();
    assert_eq!(r1, r0, "tern-tuning must pass prevResult through");
    assert_eq!(r1["cniVersion"], "1.1.0");
    assert_eq!(keepalive_of(&pod), wanted());
    assert_eq!(keepalive_of(&node.host), host_before);
    ok(&call(0, "CHECK", Some(&r1)), "tern CHECK");
    ok(&call(1, "CHECK", Some(&r1)), "tern-tuning CHECK");
    ok(&call(1, "DEL", Some(&r1)), "tern-tuning DEL");
    ok(&call(0, "DEL", Some(&r1)), "tern DEL");
    assert_eq!(keepalive_of(&pod), pod_before);
    node.assert_nothing_left(&result_addrs(&r1));
}

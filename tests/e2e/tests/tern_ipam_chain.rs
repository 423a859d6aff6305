//! tern + tern-tuning + tern-ipam through libcni at 1.0.0, dual-stack: ADD, CHECK, DEL of the
//! chain, the leases tern-ipam keeps, nothing left. Needs root (`tern_testkit::root::skip`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;
use tern_testkit::exec::conflist;

/// tern + tern-tuning + tern-ipam through libcni at 1.0.0, dual-stack: ADD (addresses from both
/// ranges, keepalive in the pod, leases on disk), CHECK, a broken CHECK, DEL (nothing left).
#[test]
fn chain_with_tern_ipam_via_libcni_1_0_0_dual() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("tipam");
    let list = conflist(
        C0_NAME,
        "1.0.0",
        vec![
            ipam_conf(&node, "1.0.0", Fam::Dual),
            node.tuning(keepalive_sysctls()),
        ],
    );
    node.tool.write_conflist(&list).unwrap();
    let pod = node.pod("tipam");
    let before = keepalive_of(&pod);
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD through libcni");
    let result = add.json.clone().unwrap();
    assert_eq!(result["cniVersion"], "1.0.0");
    assert_eq!(
        result_addrs(&result),
        Fam::Dual.nth_addrs(0),
        "addresses: {result}"
    );
    assert_eq!(result["dns"]["nameservers"], json!(["10.96.0.10"]));
    let mut got = addrs_of(&pod, "eth0");
    got.retain(|a| !a.starts_with("fe80"));
    assert_eq!(got, vec!["10.99.0.2/32", "fd99::2/128"]);
    assert_eq!(
        keepalive_of(&pod),
        KEEPALIVE
            .iter()
            .map(|(_, v)| (*v).to_owned())
            .collect::<Vec<_>>()
    );
    let cid = node.tool.get_container_id().to_owned();
    assert_eq!(
        leases(&node).into_values().collect::<Vec<_>>(),
        vec![cid.clone(), cid.clone()]
    );
    pod.exec_ok(&["ping", "-c1", "-W2", tern_testkit::netns::UPLINK_V4]);
    ok(
        &node.tool.check(pod.path()).unwrap(),
        "CHECK through libcni",
    );
    // tern-ipam's CHECK: the lease must still be this attachment's.
    let lease = node.data_dir().join(C0_NAME).join("10.99.0.2");
    let saved = std::fs::read(&lease).unwrap();
    std::fs::remove_file(&lease).unwrap();
    let out = node.tool.check(pod.path()).unwrap();
    assert!(
        !out.success(),
        "CHECK without the lease passed:\n{}",
        out.describe()
    );
    assert!(out.describe().contains("10.99.0.2"), "{}", out.describe());
    std::fs::write(&lease, saved).unwrap();
    ok(
        &node.tool.check(pod.path()).unwrap(),
        "CHECK with the lease back",
    );
    ok(&node.tool.del(pod.path()).unwrap(), "DEL through libcni");
    assert_eq!(keepalive_of(&pod), before, "DEL did not restore keepalive");
    node.assert_nothing_left(&result_addrs(&result));
    ok(&node.tool.del(pod.path()).unwrap(), "DEL again");
}

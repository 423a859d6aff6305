//! Cases from real bug reports (numbered as reported): 01 (A, B), 03, 05 (A, B) and 10 (07 is in
//! `cases_killed_add.rs`, 26 in `cases_mtu.rs`, 27 in `cases_netns_file.rs`, 28 in
//! `plugins/tern-ipam/tests/range_bounds.rs`), with the
//! default chain C0 (tern, host-local 10.99.0.0/24, then tern-tuning with the three TCP keepalive
//! sysctls and a per-test `dataDir`, `Node::c0_followers`). Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;

/// case-01 A: the netns is deleted, then DEL through libcni with the old path.
#[test]
fn case_01a_del_after_netns_deleted() {
    if tern_testkit::root::skip() {
        return;
    }
    let (node, _) = c0_node("c01a");
    let pod = node.pod("c01a");
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD");
    assert_tuned(&pod);
    let addrs = result_addrs(add.json.as_ref().unwrap());
    let path = pod.path();
    drop(pod);
    for round in ["DEL", "repeated DEL"] {
        let del = node.tool.del(&path).unwrap();
        ok(&del, round);
        assert!(del.stdout.is_empty(), "{}", del.describe());
        node.assert_nothing_left(&addrs);
    }
}

/// case-01 B: DEL each plugin directly with `CNI_NETNS=""` and the ADD result as prevResult,
/// then delete the netns.
#[test]
fn case_01b_del_with_empty_netns() {
    if tern_testkit::root::skip() {
        return;
    }
    let (node, list) = c0_node("c01b");
    let pod = node.pod("c01b");
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD");
    assert_tuned(&pod);
    let result = add.json.clone().unwrap();
    let addrs = result_addrs(&result);
    let cid = node.tool.get_container_id().to_owned();
    del_each(&node, &list, &cid, "", Some(&result));
    node.assert_nothing_left(&addrs);
    // Without a netns path tern-tuning cannot restore (the pod's values stay as tuned, the
    // netns is about to go); it drops its backup, which assert_nothing_left checks.
    drop(pod);
    del_each(&node, &list, &cid, "", Some(&result));
    node.assert_nothing_left(&addrs);
}

/// case-03: DEL each plugin directly without prevResult (the runtime lost its cache).
#[test]
fn case_03_del_without_prev_result() {
    if tern_testkit::root::skip() {
        return;
    }
    let (node, list) = c0_node("c03");
    let pod = node.pod("c03");
    let before = keepalive_of(&pod);
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD");
    assert_tuned(&pod);
    let addrs = result_addrs(add.json.as_ref().unwrap());
    let cid = node.tool.get_container_id().to_owned();
    let ns = pod.path().display().to_string();
    del_each(&node, &list, &cid, &ns, None);
    assert!(!pod.has_link("eth0"), "pod end left");
    assert_eq!(keepalive_of(&pod), before, "tern-tuning did not restore");
    node.assert_nothing_left(&addrs);
    del_each(&node, &list, &cid, &ns, None);
}

/// case-05 A: the pod already holds `eth0` (a veth end): ADD fails with an error JSON, nothing
/// is reserved or created, the existing `eth0` keeps its ifindex, no pod sysctl changed.
#[test]
fn case_05a_ifname_taken() {
    if tern_testkit::root::skip() {
        return;
    }
    let (node, _) = c0_node("c05a");
    let pod = node.pod("c05a");
    pod.add_veth("eth0", "other0");
    let before = ifindex(&pod, "eth0");
    let keepalive = keepalive_of(&pod);
    assert_ne!(
        keepalive[0], KEEPALIVE[0].1,
        "C0's value must differ from the default"
    );
    let out = node.tool.add(pod.path()).unwrap();
    failed_with(&out, 100, "eth0 already exists", "ADD into a taken ifname");
    assert_eq!(
        ifindex(&pod, "eth0"),
        before,
        "the existing eth0 was replaced"
    );
    assert_eq!(link_of(&pod, "eth0")["linkinfo"]["info_kind"], "veth");
    assert_eq!(keepalive_of(&pod), keepalive, "a pod sysctl changed");
    node.assert_nothing_left(&["10.99.0.2".parse().unwrap()]);
    // The runtime's DEL of the failed ADD must not take the foreign eth0 with it.
    ok(
        &node.tool.del(pod.path()).unwrap(),
        "DEL after the failed ADD",
    );
    assert_eq!(
        ifindex(&pod, "eth0"),
        before,
        "DEL removed a link tern did not create"
    );
}

/// case-05 B: `"mtu": 70000`: ADD fails with code 7; nothing left (no tern-tuning backup either:
/// tuning never ran); no pod sysctl changed.
#[test]
fn case_05b_mtu_70000() {
    if tern_testkit::root::skip() {
        return;
    }
    let (mut node, mut list) = c0_node("c05b");
    list["plugins"][0]["mtu"] = json!(70000);
    node.tool.write_conflist(&list).unwrap();
    let pod = node.pod("c05b");
    let keepalive = keepalive_of(&pod);
    assert_ne!(
        keepalive[0], KEEPALIVE[0].1,
        "C0's value must differ from the default"
    );
    let out = node.tool.add(pod.path()).unwrap();
    failed_with(&out, 7, "70000", "ADD with mtu 70000");
    assert!(!pod.has_link("eth0"));
    assert_eq!(keepalive_of(&pod), keepalive, "a pod sysctl changed");
    assert!(
        !node.tuning_dir().exists(),
        "tern-tuning ran: its dataDir was created"
    );
    node.assert_nothing_left(&["10.99.0.2".parse().unwrap()]);
}

/// case-10: `CNI_NETNS` is the plugin's own netns: tern's ADD and DEL and tern-tuning's ADD (with
/// a keepalive sysctl and a valid prevResult, so only the netns can be the reason) are refused
/// with code 8 before any change; the host link `brt-dummy0` is intact, the host's keepalive
/// unchanged.
#[test]
fn case_10_own_netns_refused() {
    if tern_testkit::root::skip() {
        return;
    }
    let (node, list) = c0_node("c10");
    node.host.add_veth("brt-dummy0", "brt-peer0");
    node.host
        .ip(&["addr", "add", "198.51.100.7/24", "dev", "brt-dummy0"]);
    let before = link_of(&node.host, "brt-dummy0");
    let addrs_before = addrs_of(&node.host, "brt-dummy0");
    let keepalive = keepalive_of(&node.host);
    let machine = machine_keepalive();
    assert_ne!(
        keepalive[0], KEEPALIVE[0].1,
        "C0's value must differ from the host's"
    );
    let conf = Node::plugin_conf(&list, 0);
    for (verb, ifname) in [
        ("ADD", "eth0"),
        ("DEL", "brt-dummy0"),
        ("ADD", "brt-dummy0"),
    ] {
        let out = node
            .call("tern", verb)
            .netns("/proc/self/ns/net")
            .ifname(ifname)
            .netconf(&conf)
            .unwrap()
            .run()
            .unwrap();
        failed_with(
            &out,
            8,
            "should not be the same",
            &format!("{verb} {ifname} in own netns"),
        );
    }
    // tern-tuning, with a prevResult naming brt-dummy0 in "the pod" (really the host).
    let mut tconf = Node::plugin_conf(&list, 1);
    tconf["prevResult"] = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "brt-dummy0", "sandbox": "/proc/self/ns/net"}],
        "ips": [{"interface": 0, "address": "198.51.100.7/24"}],
    });
    for ifname in ["brt-dummy0", "eth0"] {
        let out = node
            .call("tern-tuning", "ADD")
            .netns("/proc/self/ns/net")
            .ifname(ifname)
            .netconf(&tconf)
            .unwrap()
            .run()
            .unwrap();
        failed_with(
            &out,
            8,
            "should not be the same",
            &format!("tern-tuning ADD {ifname} in own netns"),
        );
    }
    assert!(
        !node.tuning_dir().exists(),
        "tern-tuning wrote a backup for a refused ADD"
    );
    // Through libcni as well: the plugin resolves /proc/self in its own process.
    let out = node.tool.add("/proc/self/ns/net").unwrap();
    failed_with(
        &out,
        8,
        "should not be the same",
        "ADD through libcni into /proc/self/ns/net",
    );
    let after = link_of(&node.host, "brt-dummy0");
    for k in ["ifindex", "flags", "mtu", "address", "operstate"] {
        assert_eq!(before[k], after[k], "brt-dummy0 {k} changed");
    }
    assert_eq!(
        addrs_of(&node.host, "brt-dummy0"),
        addrs_before,
        "brt-dummy0 addresses changed"
    );
    assert_eq!(
        keepalive_of(&node.host),
        keepalive,
        "the host's keepalive changed"
    );
    assert_eq!(
        machine_keepalive(),
        machine,
        "the machine's keepalive changed"
    );
    node.assert_nothing_left(&["10.99.0.2".parse().unwrap()]);
}

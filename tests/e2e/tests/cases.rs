//! Cases from real bug reports (numbered as reported): 01 (A, B), 03, 05 (A, B), 10, 26 and 27
//! (07 is in `cases_killed_add.rs`, 28 in `plugins/tern-ipam/tests/range_bounds.rs`), with the
//! default chain C0 (tern, host-local 10.99.0.0/24, then tern-tuning with the three TCP keepalive
//! sysctls and a per-test `dataDir`, `Node::c0_followers`). Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::{json, Value};
use tern_testkit::netns::TestNetns;

/// DELs each plugin of `list` directly, in reverse order as libcni does, with `netns` (possibly
/// empty) and `prev` as prevResult (`None`: no prevResult key). Each must exit 0 with nothing on
/// stdout.
fn del_each(node: &Node, list: &Value, cid: &str, netns: &str, prev: Option<&Value>) {
    let n = list["plugins"].as_array().unwrap().len();
    for i in (0..n).rev() {
        let mut conf = Node::plugin_conf(list, i);
        if let Some(p) = prev {
            conf["prevResult"] = p.clone();
        }
        let plugin = conf["type"].as_str().unwrap().to_owned();
        let out = node
            .call(&plugin, "DEL")
            .container_id(cid)
            .env("CNI_NETNS", netns)
            .netconf(&conf)
            .unwrap()
            .run()
            .unwrap();
        ok(
            &out,
            &format!(
                "DEL {plugin} (CNI_NETNS={netns:?}, prevResult: {})",
                prev.is_some()
            ),
        );
        assert!(
            out.stdout.is_empty(),
            "DEL {plugin} printed:\n{}",
            out.describe()
        );
    }
}

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

/// C0's tern-tuning ran: the pod holds the configured keepalive values.
fn assert_tuned(pod: &TestNetns) {
    let want: Vec<String> = KEEPALIVE.iter().map(|(_, v)| (*v).to_owned()).collect();
    assert_eq!(
        keepalive_of(pod),
        want,
        "C0's keepalive not applied in the pod"
    );
}

fn ifindex(ns: &TestNetns, dev: &str) -> u64 {
    link_of(ns, dev)["ifindex"].as_u64().unwrap()
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

/// Unmounts the netns file of `pod`: the file stays, a plain file now, and the namespace goes with
/// its last reference (the pod end of the veth, and its peer on the host, with it).
fn unmount_netns(pod: &TestNetns) {
    let path = pod.path();
    let out = std::process::Command::new("umount")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "umount {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.is_file(), "{} is not a plain file", path.display());
}

/// tern's `ipMasq` rules in `node`'s host netns (the comments of chain `inet tern_ipmasq masq`).
fn masq_rules(node: &Node) -> Vec<String> {
    let out = node
        .host
        .exec(&["nft", "-j", "list", "chain", "inet", "tern_ipmasq", "masq"]);
    if !out.status.success() {
        return Vec::new();
    }
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["rule"]["comment"].as_str().map(str::to_owned))
        .collect()
}

/// libcni's cache entries of `node` (files under `CNI_CACHE_DIR`).
fn cache_entries(node: &Node) -> Vec<PathBuf> {
    files_under(&node.tool.cache_dir())
}

/// Chain C0 with tern-ipam (so every plugin of the chain is tern's) and `ipMasq`, written as the
/// node's conflist.
fn c0_tern_ipam_masq(tag: &str) -> (Node, Value) {
    let (mut node, mut list) = c0_node(tag);
    list["plugins"][0]["ipam"]["type"] = json!("tern-ipam");
    list["plugins"][0]["ipMasq"] = json!(true);
    node.tool.write_conflist(&list).unwrap();
    (node, list)
}

/// case-27: ADD C0 (tern with tern-ipam and ipMasq, then tern-tuning), unmount the netns path (the
/// file stays, plain), then DEL the chain through libcni with that path: exit 0, nothing left (no
/// reservation, host veth or route, state, tuning backup, masquerade rule or libcni cache entry);
/// a repeated DEL exits 0 too.
#[test]
fn case_27_del_through_libcni_with_a_plain_file_netns() {
    if tern_testkit::root::skip() {
        return;
    }
    let (node, _) = c0_tern_ipam_masq("c27a");
    let pod = node.pod("c27a");
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD");
    assert_tuned(&pod);
    let addrs = result_addrs(add.json.as_ref().unwrap());
    assert_eq!(masq_rules(&node).len(), 1, "ADD made no masquerade rule");
    assert_eq!(cache_entries(&node).len(), 1, "libcni cached no result");
    unmount_netns(&pod);
    for round in ["DEL", "repeated DEL"] {
        let del = node.tool.del(pod.path()).unwrap();
        ok(&del, &format!("{round} with a plain-file CNI_NETNS"));
        assert!(del.stdout.is_empty(), "{}", del.describe());
        node.assert_nothing_left(&addrs);
        assert_eq!(
            masq_rules(&node),
            Vec::<String>::new(),
            "{round}: rules left"
        );
        assert_eq!(
            cache_entries(&node),
            Vec::<PathBuf>::new(),
            "{round}: libcni cache entry left"
        );
    }
}

/// case-27, each plugin directly: after ADD through libcni and the unmount, DEL of tern-tuning,
/// tern and tern-ipam with the plain-file `CNI_NETNS` and the ADD result as prevResult each exit 0
/// with nothing on stdout; nothing is left; repeated, the same.
#[test]
fn case_27_each_plugin_del_with_a_plain_file_netns() {
    if tern_testkit::root::skip() {
        return;
    }
    let (node, list) = c0_tern_ipam_masq("c27b");
    let pod = node.pod("c27b");
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD");
    let result = add.json.clone().unwrap();
    let addrs = result_addrs(&result);
    let cid = node.tool.get_container_id().to_owned();
    unmount_netns(&pod);
    let ns = pod.path().display().to_string();
    for _ in 0..2 {
        del_each(&node, &list, &cid, &ns, Some(&result));
        // tern-ipam as tern delegates to it: the whole tern netconf.
        let conf = Node::plugin_conf(&list, 0);
        let out = node
            .call("tern-ipam", "DEL")
            .container_id(&cid)
            .netns(&ns)
            .netconf(&conf)
            .unwrap()
            .run()
            .unwrap();
        ok(&out, "DEL tern-ipam with a plain-file CNI_NETNS");
        assert!(out.stdout.is_empty(), "{}", out.describe());
        node.assert_nothing_left(&addrs);
        assert_eq!(masq_rules(&node), Vec::<String>::new(), "rules left");
    }
}

/// case-27: ADD whose `CNI_NETNS` is a plain file (through libcni, and tern-tuning directly with a
/// prevResult naming an interface of the caller's netns) fails with an error JSON before anything
/// is made, and never configures the caller's own netns (the fake host the plugins run in).
#[test]
fn case_27_add_into_a_plain_file_netns_is_refused() {
    if tern_testkit::root::skip() {
        return;
    }
    let (node, list) = c0_tern_ipam_masq("c27c");
    let pod = node.pod("c27c");
    unmount_netns(&pod);
    node.host.add_veth("eth0", "c27-peer0");
    let links_before: Vec<Value> = node
        .links()
        .iter()
        .map(|l| json!([l["ifname"], l["ifindex"], l["mtu"], l["address"]]))
        .collect();
    let keepalive = keepalive_of(&node.host);
    assert_ne!(keepalive[0], KEEPALIVE[0].1, "C0's value must differ");
    let out = node.tool.add(pod.path()).unwrap();
    failed_with(&out, 8, "not a network namespace", "ADD into a plain file");
    let mut tconf = Node::plugin_conf(&list, 1);
    tconf["prevResult"] = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
        "ips": [{"interface": 0, "address": "10.99.0.2/32"}],
    });
    let out = node
        .call("tern-tuning", "ADD")
        .netns(pod.path())
        .netconf(&tconf)
        .unwrap()
        .run()
        .unwrap();
    failed_with(
        &out,
        8,
        "not a network namespace",
        "tern-tuning ADD into a plain file",
    );
    let links_after: Vec<Value> = node
        .links()
        .iter()
        .map(|l| json!([l["ifname"], l["ifindex"], l["mtu"], l["address"]]))
        .collect();
    assert_eq!(links_after, links_before, "the caller's links changed");
    assert_eq!(
        keepalive_of(&node.host),
        keepalive,
        "the caller's keepalive changed"
    );
    assert!(
        !node.tuning_dir().exists(),
        "tern-tuning wrote a backup for a refused ADD"
    );
    assert_eq!(masq_rules(&node), Vec::<String>::new(), "a rule was made");
    assert_eq!(
        cache_entries(&node),
        Vec::<PathBuf>::new(),
        "a result was cached"
    );
    node.assert_nothing_left(&["10.99.0.2".parse().unwrap()]);
}

/// `ping -c 1 -W 2 -M do -s <size> <to>` in `ns`: (success, output).
fn ping_df(ns: &TestNetns, to: &str, size: u32) -> (bool, String) {
    let out = ns.exec(&[
        "ping",
        "-c",
        "1",
        "-W",
        "2",
        "-M",
        "do",
        "-s",
        &size.to_string(),
        to,
    ]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The MTUs of the pod's `eth0` and of its host veth.
fn mtus(node: &Node, pod: &TestNetns) -> (u64, u64) {
    let hv = host_veth(node.tool.get_container_id(), "eth0");
    (
        link_of(pod, "eth0")["mtu"].as_u64().unwrap(),
        link_of(&node.host, &hv)["mtu"].as_u64().unwrap(),
    )
}

/// case-26 setup: chain tern (`mtu` = `tern_mtu`), then tern-tuning with `mtu` = `tuning_mtu`
/// (and C0's keepalive sysctls), ADDed through libcni into a fresh pod.
/// tern-tuning's DEL alone, as libcni runs it first in the chain's DEL (prevResult: `result`).
fn del_tuning_alone(node: &Node, list: &Value, pod: &TestNetns, result: &Value) {
    let cid = node.tool.get_container_id().to_owned();
    let mut tconf = Node::plugin_conf(list, 1);
    tconf["prevResult"] = result.clone();
    let out = node
        .call("tern-tuning", "DEL")
        .container_id(&cid)
        .netns(pod.path())
        .netconf(&tconf)
        .unwrap()
        .run()
        .unwrap();
    ok(&out, "DEL tern-tuning");
}

fn c26(tag: &str, tern_mtu: u32, tuning_mtu: u32) -> (Node, Value, TestNetns, Value) {
    let (mut node, mut list) = c0_node(tag);
    list["plugins"][0]["mtu"] = json!(tern_mtu);
    list["plugins"][1]["mtu"] = json!(tuning_mtu);
    node.tool.write_conflist(&list).unwrap();
    let pod = node.pod(tag);
    let add = node.tool.add(pod.path()).unwrap();
    ok(
        &add,
        &format!("ADD tern mtu {tern_mtu}, tern-tuning mtu {tuning_mtu}"),
    );
    (node, list, pod, add.json.unwrap())
}

/// case-26: tern (`"mtu": 1500`) then tern-tuning (`"mtu": 1400`): both ends of the veth at 1400;
/// `ping -M do -s 1372` works both ways; `-s 1400` from the host fails at the host with "message
/// too long" (no silent drop); DEL of tern-tuning restores both ends to 1500; DEL of the chain
/// leaves nothing.
#[test]
fn case_26_tuning_mtu_reaches_both_ends() {
    if tern_testkit::root::skip() {
        return;
    }
    let (node, list, pod, result) = c26("c26a", 1500, 1400);
    let pod_ip = result_addrs(&result)[0].to_string();
    // The pings first: before the fix they show the silent drop, not only the MTUs.
    let (up, text) = ping_df(&pod, tern_testkit::netns::UPLINK_V4, 1372);
    assert!(up, "pod -> host, 1372 bytes, DF:\n{text}");
    let (up, text) = ping_df(&node.host, &pod_ip, 1372);
    assert!(up, "host -> pod, 1372 bytes, DF:\n{text}");
    let (up, text) = ping_df(&node.host, &pod_ip, 1400);
    assert!(!up, "host -> pod, 1400 bytes, DF, must fail:\n{text}");
    assert!(
        text.contains("message too long"),
        "host -> pod, 1400 bytes: not refused at the host:\n{text}"
    );
    assert_eq!(mtus(&node, &pod), (1400, 1400), "pod eth0, host veth");
    // tern-tuning's DEL alone (as libcni runs it first): both ends back to tern's 1500.
    del_tuning_alone(&node, &list, &pod, &result);
    assert_eq!(mtus(&node, &pod), (1500, 1500), "DEL restored pod, host");
    ok(&node.tool.del(pod.path()).unwrap(), "DEL of the chain");
    node.assert_nothing_left(&result_addrs(&result));
}

/// case-26: tern (`"mtu": 1400`) then tern-tuning (`"mtu": 9000`): the pod never exceeds what the
/// host end carries: both ends at 9000, CHECK passes (and names the host end when it drifts), a
/// 8972-byte DF ping works both ways; DEL restores both to 1400.
#[test]
fn case_26_tuning_mtu_above_terns_sets_both_ends() {
    if tern_testkit::root::skip() {
        return;
    }
    let (node, list, pod, result) = c26("c26b", 1400, 9000);
    assert_eq!(mtus(&node, &pod), (9000, 9000), "pod eth0, host veth");
    let pod_ip = result_addrs(&result)[0].to_string();
    let (up, text) = ping_df(&pod, tern_testkit::netns::UPLINK_V4, 8972);
    assert!(up, "pod -> host, 8972 bytes, DF:\n{text}");
    let (up, text) = ping_df(&node.host, &pod_ip, 8972);
    assert!(up, "host -> pod, 8972 bytes, DF:\n{text}");
    ok(&node.tool.check(pod.path()).unwrap(), "CHECK");
    let hv = host_veth(node.tool.get_container_id(), "eth0");
    node.host.ip(&["link", "set", &hv, "mtu", "1500"]);
    let out = node.tool.check(pod.path()).unwrap();
    assert!(
        !out.success(),
        "CHECK with the host end drifted:\n{}",
        out.describe()
    );
    assert!(
        out.stdout_str().contains("mtu of the host end"),
        "CHECK does not name the host end:\n{}",
        out.describe()
    );
    node.host.ip(&["link", "set", &hv, "mtu", "9000"]);
    del_tuning_alone(&node, &list, &pod, &result);
    assert_eq!(mtus(&node, &pod), (1400, 1400), "DEL restored pod, host");
    ok(&node.tool.del(pod.path()).unwrap(), "DEL of the chain");
    node.assert_nothing_left(&result_addrs(&result));
}

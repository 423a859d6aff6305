//! case-27 (from a real bug report): a `CNI_NETNS` path that is no longer a network namespace
//! (unmounted; the file stays, plain), with chain C0 on tern-ipam and `ipMasq`: DEL through
//! libcni and of each plugin directly exits 0 and leaves nothing; ADD is refused before anything
//! is made. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::*;
use serde_json::{json, Value};
use tern_testkit::netns::TestNetns;

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

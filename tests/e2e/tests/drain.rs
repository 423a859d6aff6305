//! The uninstall that drains, with the real binaries: pods wired through libcni, then
//! `tern-agent uninstall` (in the fake host, on its conf, bin and state dirs): the conflist drains
//! (tern's STATUS answers 50, ADD through libcni is refused with code 108 and leaves nothing, DEL
//! through libcni tears each pod down), nothing is removed while an attachment is left, and the
//! DEL of the last pod (the agent is gone by then) releases the kubeconfig, the egress NAT table
//! and the node routes, keeping the conflist and plugins for the runtime's repeat DEL (which
//! succeeds); the run of uninstall after that removes the rest and the mark. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::*;
use serde_json::{json, Value};
use tern_testkit::exec::{bin_dir, ref_plugin_dir};

const PLUGINS: [&str; 3] = ["tern", "tern-tuning", "tern-ipam"];

/// `tern-agent uninstall` in the fake host on `node`'s dirs: (success, stderr).
fn uninstall(node: &Node, bin: &Path) -> (bool, String) {
    let conf = node.tool.conf_dir();
    let state = node.state_dir();
    let out = node.host.exec(&[
        bin_dir().join("tern-agent").to_str().unwrap(),
        "uninstall",
        "--cni-bin-dir",
        bin.to_str().unwrap(),
        "--cni-conf-dir",
        conf.to_str().unwrap(),
        "--conflist-name",
        "10-c0.conflist",
        "--state-dir",
        state.to_str().unwrap(),
        "--plugins",
        "tern,tern-tuning,tern-ipam",
        // the wait for a runtime's repeat DEL has its own tests (agent/tests/uninstall.rs,
        // the cluster case uninstall_no_pods)
        "--sandbox-removal-wait",
        "0s",
    ]);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn conflist(node: &Node) -> Option<Value> {
    let p = node.tool.conf_dir().join("10-c0.conflist");
    std::fs::read(p)
        .ok()
        .map(|b| serde_json::from_slice(&b).unwrap())
}

fn nat_table(node: &Node) -> bool {
    node.host
        .exec(&["nft", "list", "table", "inet", "tern_nat"])
        .status
        .success()
}

fn tern_routes(node: &Node) -> String {
    node.host.ip(&["route", "show", "proto", "116"])
}

#[test]
fn uninstall_drains_then_removes_everything_once_no_pod_is_left() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("drain");
    // The node's CNI bin dir: copies of tern's plugins (uninstall removes them from there).
    let bin = node.tool.scratch().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for p in PLUGINS {
        std::fs::copy(bin_dir().join(p), bin.join(p)).unwrap();
    }
    node.tool
        .cni_path(&format!("{}:{}", bin.display(), ref_plugin_dir().display()));
    let mut list = node.c0("1.0.0");
    list["plugins"][0]["ipam"]["type"] = json!("tern-ipam");
    // As deploy/ writes it: the kubeconfig (and so the drain mark) in the conf dir.
    let kubeconfig = node.tool.conf_dir().join("tern-kubeconfig");
    list["plugins"][0]["kubernetes"] = json!({"kubeconfig": kubeconfig});
    node.tool.write_conflist(&list).unwrap();
    std::fs::write(&kubeconfig, "{}").unwrap();
    // What the agent keeps on a node: its egress NAT table and a node route (protocol 116).
    node.host
        .exec_ok(&["nft", "add", "table", "inet", "tern_nat"]);
    node.host.ip(&[
        "route",
        "add",
        "10.98.7.0/24",
        "via",
        "192.0.2.254",
        "proto",
        "116",
    ]);
    assert!(tern_routes(&node).contains("10.98.7.0/24"));

    let pods: Vec<_> = (0..2).map(|i| node.pod(&format!("drain{i}"))).collect();
    let mut ids = Vec::new();
    let mut addrs = Vec::new();
    for (i, pod) in pods.iter().enumerate() {
        node.tool.container_id(&format!("drain-{i}"));
        let add = node.tool.add(pod.path()).unwrap();
        ok(&add, &format!("ADD pod {i}"));
        addrs.extend(result_addrs(add.json.as_ref().unwrap()));
        ids.push(format!("drain-{i}"));
    }

    // Uninstall begins: two attachments left, so the conflist drains and everything else stays.
    let (done, err) = uninstall(&node, &bin);
    assert!(done, "uninstall failed:\n{err}");
    assert!(err.contains("attachments are left"), "{err}");
    let drained = conflist(&node).expect("the conflist was removed with pods left");
    assert_eq!(drained["plugins"][0]["draining"], true, "{drained}");
    assert!(node.tool.conf_dir().join("tern-uninstalling").exists());
    assert!(node.tool.conf_dir().join("tern-kubeconfig").exists());
    for p in PLUGINS {
        assert!(bin.join(p).exists(), "{p} removed with pods left");
    }
    assert!(nat_table(&node), "the NAT table was removed with pods left");

    // STATUS (as a 1.1.0 runtime asks it) answers 50: the kubelet reports the network not ready.
    let mut status_conf = Node::plugin_conf(&drained, 0);
    status_conf["cniVersion"] = json!("1.1.0");
    let out = node
        .call(bin.join("tern").to_str().unwrap(), "STATUS")
        .path(&format!("{}:{}", bin.display(), ref_plugin_dir().display()))
        .netconf(&status_conf)
        .unwrap()
        .run()
        .unwrap();
    failed_with(&out, 50, "draining", "STATUS while draining");

    // A new pod is refused before anything is made.
    let late = node.pod("drain-late");
    node.tool.container_id("drain-late");
    let out = node.tool.add(late.path()).unwrap();
    failed_with(&out, 108, "being uninstalled", "ADD while draining");
    assert!(!late.has_link("eth0"));
    assert_eq!(node.reservations().len(), 2, "the refused ADD reserved");

    // The pods go one by one; uninstall keeps waiting for the last.
    node.tool.container_id(&ids[0]);
    ok(
        &node.tool.del(pods[0].path()).unwrap(),
        "DEL pod 0 while draining",
    );
    let (done, err) = uninstall(&node, &bin);
    assert!(done && err.contains("attachments are left"), "{err}");
    assert!(conflist(&node).is_some() && nat_table(&node));
    node.tool.container_id(&ids[1]);
    ok(
        &node.tool.del(pods[1].path()).unwrap(),
        "DEL pod 1 while draining",
    );

    // The last pod's DEL released what no DEL needs; the conflist and plugins stay for the
    // runtime's repeat DEL (containerd 2 DELs a stopped sandbox again before removing it).
    assert!(
        !node.tool.conf_dir().join("tern-kubeconfig").exists(),
        "kubeconfig left"
    );
    assert!(
        !nat_table(&node),
        "the NAT table is left after the last DEL"
    );
    assert_eq!(
        tern_routes(&node).trim(),
        "",
        "node routes left after the last DEL"
    );
    assert!(
        conflist(&node).is_some(),
        "the conflist went with the last DEL"
    );
    for p in PLUGINS {
        assert!(bin.join(p).exists(), "{p} went with the last DEL");
    }
    ok(
        &node.tool.del(pods[1].path()).unwrap(),
        "the runtime's repeat DEL of pod 1",
    );

    // uninstall once no sandbox is left: everything of tern's goes, the mark last.
    let (done, err) = uninstall(&node, &bin);
    assert!(done, "final uninstall failed:\n{err}");
    assert!(conflist(&node).is_none(), "the conflist is left");
    for f in ["tern-kubeconfig", "tern-uninstalling"] {
        assert!(!node.tool.conf_dir().join(f).exists(), "{f} left");
    }
    for p in PLUGINS {
        assert!(!bin.join(p).exists(), "{p} left");
    }
    assert!(!nat_table(&node), "the NAT table is left");
    assert_eq!(tern_routes(&node).trim(), "", "tern's node routes are left");
    node.assert_nothing_left(&addrs);
}

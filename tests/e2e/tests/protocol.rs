//! The protocol: each plugin answers VERSION with every supported version and rejects bad
//! input with the right code and message, leaving nothing behind — through the libcni driver where
//! libcni can send the input, directly (environment + stdin, as the spec describes a runtime) where
//! it cannot. Every check is a function of the plugin name: a plugin joins with one line in
//! [`PLUGINS`]. Needs root (`tern_testkit::root::skip`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};
use tern_testkit::exec::conflist;
use tern_testkit::netns::TestNetns;

/// The plugins under test.
const PLUGINS: &[&str] = &["tern", "tern-tuning"];

/// Every version the tern plugins support, as VERSION must list them.
const SUPPORTED: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// A valid plugin object for `plugin` on `node`.
fn plugin_obj(node: &Node, plugin: &str) -> Value {
    match plugin {
        "tern" => node.tern(Fam::V4.ranges()),
        "tern-tuning" => node.tuning(json!({"net.ipv4.tcp_keepalive_time": "600"})),
        other => panic!("no netconf for {other}"),
    }
}

/// A single-plugin netconf at `version` (what libcni sends to the plugin).
fn netconf(node: &Node, plugin: &str, version: &str) -> Value {
    let mut c = plugin_obj(node, plugin);
    c["cniVersion"] = json!(version);
    c["name"] = json!(C0_NAME);
    c
}

/// Nothing in the pod but `lo`, and nothing on the node.
fn assert_untouched(node: &Node, pod: &TestNetns) {
    let links: Value = serde_json::from_str(&pod.ip(&["-j", "link", "show"])).unwrap();
    let names: Vec<&str> = links
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["ifname"].as_str())
        .collect();
    assert_eq!(names, vec!["lo"], "pod netns was changed");
    node.assert_nothing_left(&[]);
}

fn version_through_libcni(plugin: &str) {
    let mut node = Node::new("ver");
    let list = conflist(C0_NAME, "1.0.0", vec![plugin_obj(&node, plugin)]);
    node.tool.write_conflist(&list).unwrap();
    let out = node.tool.version().unwrap();
    ok(&out, "cnitool version");
    assert_eq!(out.json.unwrap()[plugin], json!(SUPPORTED), "{plugin}");
}

fn version_direct(plugin: &str) {
    let node = Node::new("verd");
    for v in SUPPORTED {
        let out = node
            .call(plugin, "VERSION")
            .netconf(&json!({"cniVersion": v}))
            .unwrap()
            .run()
            .unwrap();
        ok(&out, "VERSION");
        assert_eq!(
            out.json.unwrap(),
            json!({"cniVersion": v, "supportedVersions": SUPPORTED}),
            "{plugin} VERSION with cniVersion {v}"
        );
    }
}

/// Bad input that libcni passes on: each refused with the code and message, nothing left.
fn bad_input_through_libcni(plugin: &str) {
    let tag = format!("bl{}", plugin.len());
    let mut node = Node::new(&tag);
    let pod = node.pod(&tag);
    let good = conflist(C0_NAME, "1.0.0", vec![plugin_obj(&node, plugin)]);
    node.tool.write_conflist(&good).unwrap();

    let out = node.tool.add("").unwrap();
    failed_with(&out, 4, "CNI_NETNS", "ADD with an empty CNI_NETNS");
    assert_untouched(&node, &pod);

    node.tool.container_id("a/b");
    let out = node.tool.add(pod.path()).unwrap();
    failed_with(&out, 4, "a/b", "ADD with container ID a/b");
    assert_untouched(&node, &pod);
    node.tool.container_id("bad-input-ok-id");
    for (ifname, needle) in [("sixteen-bytes-xx", "too long"), ("..", "..")] {
        node.tool.ifname(ifname);
        let out = node.tool.add(pod.path()).unwrap();
        failed_with(&out, 4, needle, &format!("ADD with ifname {ifname:?}"));
        assert_untouched(&node, &pod);
    }
    node.tool.ifname("eth0");

    let mut big = good.clone();
    big["plugins"][0]["padding"] = json!("x".repeat(2 << 20));
    node.tool.write_conflist(&big).unwrap();
    let out = node.tool.add(pod.path()).unwrap();
    failed_with(&out, 7, "larger than 1 MiB", "ADD with 2 MiB of netconf");
    assert_untouched(&node, &pod);

    let mut future = good.clone();
    future["cniVersion"] = json!("9.9.9");
    node.tool.write_conflist(&future).unwrap();
    let out = node.tool.add(pod.path()).unwrap();
    failed_with(&out, 1, "9.9.9", "ADD with cniVersion 9.9.9");
    assert_untouched(&node, &pod);

    let mut old = good.clone();
    old["cniVersion"] = json!("0.3.1");
    node.tool.write_conflist(&old).unwrap();
    let out = node.tool.check(pod.path()).unwrap();
    // libcni refuses CHECK below 0.4.0 before it runs a plugin (code 0); the direct test below
    // covers the plugin's own refusal.
    failed_with(
        &out,
        0,
        "does not support the CHECK command",
        "CHECK at 0.3.1",
    );
    assert_untouched(&node, &pod);
}

/// Bad input a runtime could send but libcni cannot: each refused, nothing left.
fn bad_input_direct(plugin: &str) {
    let tag = format!("bd{}", plugin.len());
    let node = Node::new(&tag);
    let pod = node.pod(&tag);
    let conf = netconf(&node, plugin, "1.0.0");
    let add = || {
        node.call(plugin, "ADD")
            .netns(pod.path())
            .netconf(&conf)
            .unwrap()
    };

    // Unlike the reference skel (exit 0), tern answers a missing CNI_COMMAND with code 4 and
    // prints its about text on stderr.
    let out = add().unset("CNI_COMMAND").run().unwrap();
    failed_with(&out, 4, "CNI_COMMAND", "no CNI_COMMAND");
    assert!(out.stderr.contains(plugin), "{}", out.describe());
    assert!(
        out.stderr
            .contains("CNI protocol versions supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"),
        "{}",
        out.describe()
    );
    let out = add().env("CNI_COMMAND", "BOGUS").run().unwrap();
    failed_with(&out, 4, "BOGUS", "unknown command");
    let out = add().unset("CNI_NETNS").run().unwrap();
    failed_with(&out, 4, "CNI_NETNS", "ADD without CNI_NETNS");
    let out = add().container_id("a/b").run().unwrap();
    failed_with(&out, 4, "a/b", "container ID a/b");
    let out = add().ifname("sixteen-bytes-xx").run().unwrap();
    failed_with(&out, 4, "too long", "ifname of 16 bytes");
    let out = add().ifname("..").run().unwrap();
    failed_with(&out, 4, "..", "ifname ..");
    let out = add().stdin(b"{not json".to_vec()).run().unwrap();
    failed_with(&out, 6, "error unmarshall network config", "stdin not JSON");
    let mut big = conf.clone();
    big["padding"] = json!("x".repeat(2 << 20));
    let out = add().netconf(&big).unwrap().run().unwrap();
    failed_with(&out, 7, "larger than 1 MiB", "2 MiB stdin");
    let mut future = conf.clone();
    future["cniVersion"] = json!("9.9.9");
    let out = add().netconf(&future).unwrap().run().unwrap();
    failed_with(&out, 1, "9.9.9", "cniVersion 9.9.9");
    assert_untouched(&node, &pod);

    let v = |version: &str| netconf(&node, plugin, version);
    let out = node
        .call(plugin, "CHECK")
        .netns(pod.path())
        .netconf(&v("0.3.1"))
        .unwrap()
        .run()
        .unwrap();
    failed_with(&out, 1, "CHECK", "CHECK with cniVersion 0.3.1");
    assert_eq!(
        out.json.as_ref().unwrap()["cniVersion"],
        "0.3.1",
        "{}",
        out.describe()
    );
    for verb in ["GC", "STATUS"] {
        let out = node
            .call(plugin, verb)
            .netconf(&v("1.0.0"))
            .unwrap()
            .run()
            .unwrap();
        failed_with(&out, 1, verb, &format!("{verb} with cniVersion 1.0.0"));
    }

    // prevResult of a version nobody here supports (another supported one is converted).
    let prev_020 = json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.99.0.9/32"}});
    let prev_999 = json!({"cniVersion": "9.9.9", "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
        "ips": [{"interface": 0, "address": "10.99.0.9/32"}]});
    for (version, prev, verb) in [
        ("1.0.0", &prev_020, "CHECK"),
        ("0.4.0", &prev_999, "CHECK"),
        ("1.0.0", &prev_020, "ADD"),
    ] {
        let mut c = v(version);
        c["prevResult"] = prev.clone();
        let out = node
            .call(plugin, verb)
            .netns(pod.path())
            .netconf(&c)
            .unwrap()
            .run()
            .unwrap();
        failed_with(
            &out,
            1,
            "prevResult",
            &format!("{verb} {version} with a {} prevResult", prev["cniVersion"]),
        );
    }
    assert_untouched(&node, &pod);
}

#[test]
fn version_via_libcni() {
    if tern_testkit::root::skip() {
        return;
    }
    PLUGINS.iter().for_each(|p| version_through_libcni(p));
}

#[test]
fn version_via_direct_call() {
    if tern_testkit::root::skip() {
        return;
    }
    PLUGINS.iter().for_each(|p| version_direct(p));
}

#[test]
fn bad_input_via_libcni() {
    if tern_testkit::root::skip() {
        return;
    }
    PLUGINS.iter().for_each(|p| bad_input_through_libcni(p));
}

#[test]
fn bad_input_via_direct_call() {
    if tern_testkit::root::skip() {
        return;
    }
    PLUGINS.iter().for_each(|p| bad_input_direct(p));
}

//! case-26 (from a real bug report): tern-tuning's `mtu` after tern reaches both ends of the
//! veth, so the host never forwards a frame the pod cannot take. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};
use tern_testkit::netns::TestNetns;

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

//! tern's `ipMasq` (per-attachment masquerade, for nodes without tern-agent's egress NAT): a pod
//! wired through real libcni sends to an address beyond a "router" netns, and the router sees the
//! node's address with `ipMasq`, the pod's without; DEL removes the attachment's nftables rules
//! (also with the netns gone), GC the leaked ones; a refused configuration leaves nothing; another
//! owner's table (iptables-nft's `ip nat`) is never touched. Needs root and the nft tool.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::IpAddr;

use common::*;
use serde_json::{json, Value};
use tern_testkit::exec::{conflist, Cnitool, PluginCall, RunOutput};
use tern_testkit::netns::TestNetns;

const SUBNET_V4: &str = "10.97.0.0/24";
const SUBNET_V6: &str = "fd97::/64";

/// The comments of the rules in tern's `ipMasq` chain, in the node.
fn masq_comments(edge: &Edge) -> Vec<String> {
    let out = edge
        .node
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

/// How many of tern's rules name this container.
fn rules_of(edge: &Edge, cid: &str) -> usize {
    let tag = format!("id: {cid}");
    masq_comments(edge)
        .iter()
        .filter(|c| c.ends_with(&tag))
        .count()
}

fn tern(scratch: &std::path::Path, masq: Option<bool>, ipam: &str) -> Value {
    let mut t = json!({"type": "tern", "stateDir": scratch.join("state"),
        "ipam": {"type": ipam, "dataDir": scratch.join("ipam"),
            "ranges": [[{"subnet": SUBNET_V4}], [{"subnet": SUBNET_V6}]]}});
    if let Some(m) = masq {
        t["ipMasq"] = json!(m);
    }
    t
}

fn libcni(edge: &Edge, masq: bool) -> Cnitool {
    let mut tool = Cnitool::new().unwrap();
    tool.in_netns(Some(edge.node.name()));
    let scratch = tool.scratch().to_path_buf();
    let plugin = tern(&scratch, Some(masq), "host-local");
    tool.write_conflist(&conflist("masq", "1.0.0", vec![plugin]))
        .unwrap();
    tool
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn ip_masq_shows_the_node_address_and_del_removes_the_rules() {
    if tern_testkit::root::skip() {
        return;
    }
    let edge = Edge::new("ipm", &[SUBNET_V4, SUBNET_V6], &[]);
    let foreign = edge.foreign_table();
    let tool = libcni(&edge, true);
    let pod = TestNetns::new("ipm-p");
    common::ok(&tool.add(pod.path()).unwrap(), "ADD with ipMasq");
    let cid = tool.get_container_id().to_owned();
    assert_eq!(rules_of(&edge, &cid), 2, "one rule per pod address");
    assert_eq!(edge.source_seen(&pod, FAR_V4), Some(ip(NODE_V4)));
    assert_eq!(edge.source_seen(&pod, FAR_V6), Some(ip(NODE_V6)));

    common::ok(&tool.del(pod.path()).unwrap(), "DEL");
    assert_eq!(rules_of(&edge, &cid), 0, "DEL left masquerade rules");
    common::ok(&tool.del(pod.path()).unwrap(), "second DEL");
    assert_eq!(
        edge.table("ip", "nat").as_deref(),
        Some(foreign.as_str()),
        "iptables-nft's table changed"
    );
}

#[test]
fn without_ip_masq_the_router_sees_the_pod_address() {
    if tern_testkit::root::skip() {
        return;
    }
    let edge = Edge::new("ipm0", &[SUBNET_V4, SUBNET_V6], &[]);
    let tool = libcni(&edge, false);
    let pod = TestNetns::new("ipm0-p");
    common::ok(&tool.add(pod.path()).unwrap(), "ADD without ipMasq");
    assert_eq!(edge.source_seen(&pod, FAR_V4), Some(ip("10.97.0.2")));
    assert_eq!(edge.source_seen(&pod, FAR_V6), Some(ip("fd97::2")));
    assert_eq!(
        edge.table("inet", "tern_ipmasq"),
        None,
        "no table without ipMasq"
    );
    common::ok(&tool.del(pod.path()).unwrap(), "DEL");
}

/// A direct invocation of tern at 1.1.0 (tern-ipam; libcni 1.1 cannot send GC) in the node.
fn call(edge: &Edge, verb: &str, c: &Value, cid: &str, netns: Option<&TestNetns>) -> RunOutput {
    let mut p = PluginCall::new("tern", verb)
        .in_netns(edge.node.name())
        .container_id(cid);
    if let Some(ns) = netns {
        p = p.netns(ns.path());
    }
    p.netconf(c).unwrap().run().unwrap()
}

#[test]
fn del_without_netns_and_gc_remove_exactly_their_rules() {
    if tern_testkit::root::skip() {
        return;
    }
    let edge = Edge::new("ipmgc", &[SUBNET_V4, SUBNET_V6], &[]);
    let foreign = edge.foreign_table();
    let scratch = tempfile::tempdir().unwrap();
    let mut c = tern(scratch.path(), Some(true), "tern-ipam");
    c["cniVersion"] = json!("1.1.0");
    c["name"] = json!("gcnet");
    // Another network on the same node, with its own rules that GC of gcnet must keep.
    let mut other = tern(&scratch.path().join("o"), Some(true), "tern-ipam");
    other["cniVersion"] = json!("1.1.0");
    other["name"] = json!("othernet");
    other["ipam"]["ranges"] = json!([[{"subnet": "10.97.1.0/24"}]]);

    let pods: Vec<TestNetns> = (0..3).map(|_| TestNetns::new("ipmgc-p")).collect();
    let cids = ["gc-a", "gc-b", "gc-c"];
    for (cid, pod) in cids.iter().zip(&pods) {
        common::ok(&call(&edge, "ADD", &c, cid, Some(pod)), "ADD");
        assert_eq!(rules_of(&edge, cid), 2, "{cid}");
    }
    let op = TestNetns::new("ipmgc-o");
    common::ok(
        &call(&edge, "ADD", &other, "gc-o", Some(&op)),
        "ADD othernet",
    );
    assert_eq!(edge.source_seen(&pods[1], FAR_V4), Some(ip(NODE_V4)));

    // DEL of a: its netns is gone first, and the config no longer says ipMasq (the state does).
    let gone = pods[0].path();
    drop(pods.into_iter().next());
    let mut plain = c.clone();
    plain.as_object_mut().unwrap().remove("ipMasq");
    let del = PluginCall::new("tern", "DEL")
        .in_netns(edge.node.name())
        .container_id("gc-a")
        .netns(&gone)
        .netconf(&plain)
        .unwrap()
        .run()
        .unwrap();
    common::ok(&del, "DEL with the netns gone");
    assert_eq!(rules_of(&edge, "gc-a"), 0, "DEL left a's rules");
    assert_eq!(rules_of(&edge, "gc-b"), 2, "DEL of a removed b's rules");

    // c leaks: its state is lost, its rules stay; GC with b alone valid collects them.
    for f in files_under(&scratch.path().join("state/gcnet")) {
        if f.to_string_lossy().contains("gc-c") {
            std::fs::remove_file(f).unwrap();
        }
    }
    let mut g = c.clone();
    g["cni.dev/valid-attachments"] = json!([{"containerID": "gc-b", "ifname": "eth0"}]);
    common::ok(&call(&edge, "GC", &g, "", None), "GC");
    assert_eq!(rules_of(&edge, "gc-c"), 0, "GC left the leaked rules");
    assert_eq!(
        rules_of(&edge, "gc-b"),
        2,
        "GC removed a valid attachment's rules"
    );
    assert_eq!(
        rules_of(&edge, "gc-o"),
        1,
        "GC touched another network's rules"
    );

    common::ok(&call(&edge, "DEL", &c, "gc-b", None), "DEL b");
    common::ok(&call(&edge, "DEL", &other, "gc-o", None), "DEL o");
    assert!(
        masq_comments(&edge).is_empty(),
        "{:?}",
        masq_comments(&edge)
    );
    assert_eq!(edge.table("ip", "nat").as_deref(), Some(foreign.as_str()));
}

#[test]
fn a_refused_masquerade_config_leaves_nothing() {
    if tern_testkit::root::skip() {
        return;
    }
    let edge = Edge::new("ipmbad", &[], &[]);
    let scratch = tempfile::tempdir().unwrap();
    let pod = TestNetns::new("ipmbad-p");
    let mut c = tern(scratch.path(), Some(true), "host-local");
    c["cniVersion"] = json!("1.0.0");
    c["name"] = json!("bad");
    for (key, value, code, needle) in [
        (
            "ipMasqBackend",
            json!("iptables"),
            7,
            "ipMasqBackend \"iptables\"",
        ),
        ("ipMasqBackend", json!("nft"), 7, "ipMasqBackend \"nft\""),
        ("ipMasq", json!("true"), 6, "ipMasq"),
    ] {
        let mut bad = c.clone();
        bad[key] = value;
        let out = call(&edge, "ADD", &bad, "bad-1", Some(&pod));
        failed_with(&out, code, needle, key);
    }
    assert!(
        files_under(scratch.path()).is_empty(),
        "{:?}",
        files_under(scratch.path())
    );
    assert_eq!(
        pod.ip(&["-o", "link"]).lines().count(),
        1,
        "only lo in the pod"
    );
    assert_eq!(edge.table("inet", "tern_ipmasq"), None);
}

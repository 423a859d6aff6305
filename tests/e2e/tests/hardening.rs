//! Regressions a hostile operator could trigger: a runtime sending one container ID to two
//! networks, CHECK noticing the host side broke, DEL when there is nothing it could remove, and
//! tern never delegating to itself. Needs root (`tern_testkit::root::skip`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};
use tern_testkit::exec::RunOutput;

/// tern's netconf for network `name` on `node` with an IPv4 range.
fn conf(node: &Node, name: &str, subnet: &str) -> Value {
    let mut t = node.tern(json!([[{"subnet": subnet}]]));
    t["cniVersion"] = json!("1.0.0");
    t["name"] = json!(name);
    t
}

fn tern(node: &Node, verb: &str, cid: &str, netns: &str, c: &Value) -> RunOutput {
    node.call("tern", verb)
        .container_id(cid)
        .netns(netns)
        .ifname("eth0")
        .netconf(c)
        .unwrap()
        .run()
        .unwrap()
}

#[test]
fn one_container_id_in_two_networks_never_touches_the_other_networks_veth() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("twonet");
    let (p1, p2) = (node.pod("twonet1"), node.pod("twonet2"));
    let (c1, c2) = (
        conf(&node, "neta", "10.99.10.0/24"),
        conf(&node, "netb", "10.99.11.0/24"),
    );
    let p1s = p1.path().display().to_string();
    let p2s = p2.path().display().to_string();
    let first = tern(&node, "ADD", "dup", &p1s, &c1);
    ok(&first, "ADD in neta");
    let veth = host_veth("dup", "eth0");
    let index_before = link_of(&node.host, &veth)["ifindex"].clone();

    // The same container ID and ifname in another network: refused, neta's pod keeps its veth.
    failed_with(
        &tern(&node, "ADD", "dup", &p2s, &c2),
        100,
        "neta",
        "ADD in netb",
    );
    assert!(p1.has_link("eth0"), "neta's pod lost its interface");
    assert_eq!(
        link_of(&node.host, &veth)["ifindex"],
        index_before,
        "neta's veth was replaced"
    );
    // The runtime's DEL for the failed netb ADD leaves neta's veth alone.
    ok(&tern(&node, "DEL", "dup", &p2s, &c2), "DEL in netb");
    assert!(
        p1.has_link("eth0") && node.host.has_link(&veth),
        "netb's DEL removed neta's veth"
    );
    assert!(
        !node.reservations().iter().any(|r| r.contains("10.99.11.")),
        "netb lease left"
    );

    ok(&tern(&node, "DEL", "dup", &p1s, &c1), "DEL in neta");
    assert!(!node.host.has_link(&veth));
    assert!(
        node.reservations().iter().all(|r| !r.starts_with("10.99.")),
        "{:?}",
        node.reservations()
    );
    assert!(node.state_files().is_empty(), "{:?}", node.state_files());
}

#[test]
fn check_notices_proxy_arp_and_forwarding_turned_off() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("chkhost");
    let pod = node.pod("chkhost");
    let podp = pod.path().display().to_string();
    let c = conf(&node, "chk", "10.99.12.0/24");
    let add = tern(&node, "ADD", "chk1", &podp, &c);
    ok(&add, "ADD");
    let mut chk = c.clone();
    chk["prevResult"] = add.json.clone().unwrap();
    ok(
        &tern(&node, "CHECK", "chk1", &podp, &chk),
        "CHECK right after ADD",
    );

    let veth = host_veth("chk1", "eth0");
    node.host
        .set_sysctl(&format!("net/ipv4/conf/{veth}/proxy_arp"), "0");
    failed_with(
        &tern(&node, "CHECK", "chk1", &podp, &chk),
        106,
        "proxy_arp",
        "CHECK without proxy ARP",
    );
    node.host
        .set_sysctl(&format!("net/ipv4/conf/{veth}/proxy_arp"), "1");
    node.host.set_sysctl("net/ipv4/ip_forward", "0");
    failed_with(
        &tern(&node, "CHECK", "chk1", &podp, &chk),
        106,
        "ip_forward",
        "CHECK without forwarding",
    );
    node.host.set_sysctl("net/ipv4/ip_forward", "1");
    ok(
        &tern(&node, "CHECK", "chk1", &podp, &chk),
        "CHECK once repaired",
    );
    ok(&tern(&node, "DEL", "chk1", &podp, &c), "DEL");
}

#[test]
fn del_succeeds_when_state_cannot_exist() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("delnone");
    let pod = node.pod("delnone");
    let podp = pod.path().display().to_string();
    // stateDir is a regular file: ADD refuses before IPAM (7, nothing written), DEL has nothing
    // to do.
    let file = node.tool.scratch().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let mut c = conf(&node, "delnone", "10.99.13.0/24");
    c["stateDir"] = json!(file);
    failed_with(
        &tern(&node, "ADD", "dn1", &podp, &c),
        7,
        "not a directory",
        "ADD with a file as stateDir",
    );
    assert!(
        files_under(&node.data_dir()).is_empty(),
        "IPAM ran before the state was found unstorable"
    );
    ok(
        &tern(&node, "DEL", "dn1", &podp, &c),
        "DEL with a file as stateDir",
    );
    assert!(!pod.has_link("eth0"));
    // A container ID too long to be a file name: ADD refuses before IPAM, DEL still succeeds.
    let long = "x".repeat(250);
    let c = conf(&node, "delnone", "10.99.13.0/24");
    failed_with(
        &tern(&node, "ADD", &long, &podp, &c),
        7,
        "cannot be stored",
        "ADD with a 250-byte container ID",
    );
    // (host-local's DEL above left its lock file in the data dir: leases are what count.)
    assert!(
        node.reservations().is_empty() && node.state_files().is_empty(),
        "IPAM or state written for an attachment that cannot be stored"
    );
    ok(
        &tern(&node, "DEL", &long, &podp, &c),
        "DEL with a 250-byte container ID",
    );
    assert!(
        node.reservations().iter().all(|r| !r.starts_with("10.99.")),
        "{:?}",
        node.reservations()
    );
    // CNI_ARGS host-local would refuse (999, after tern began): tern refuses first, code 4.
    let c = conf(&node, "delnone", "10.99.13.0/24");
    for args in [
        "K8S_POD_NAME=p",
        "IP=ten",
        "IgnoreUnknown=1;IP=10.99.13.5,10.99.13.6",
        "IgnoreUnknown=maybe",
        "IP=10.99.13.5;IP=10.99.13.6",
    ] {
        let out = node
            .call("tern", "ADD")
            .container_id("dn2")
            .netns(&podp)
            .ifname("eth0")
            .args(args)
            .netconf(&c)
            .unwrap()
            .run()
            .unwrap();
        failed_with(&out, 4, "ARGS", &format!("ADD with CNI_ARGS {args}"));
        assert!(
            node.reservations().is_empty() && node.state_files().is_empty(),
            "CNI_ARGS {args}: something was written"
        );
    }
}

#[test]
fn tern_never_delegates_to_itself() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("selfipam");
    let pod = node.pod("selfipam");
    let podp = pod.path().display().to_string();
    for t in ["tern", "tern-tuning"] {
        let mut c = conf(&node, "selfipam", "10.99.14.0/24");
        c["ipam"] = json!({"type": t});
        failed_with(
            &tern(&node, "ADD", "self1", &podp, &c),
            7,
            "delegate to itself",
            "ADD",
        );
        // DEL never strands a sandbox: it exits 0 without delegating, and says why.
        let del = tern(&node, "DEL", "self1", &podp, &c);
        ok(&del, "DEL");
        assert!(
            del.stderr.contains("not an IPAM plugin: no IPAM release"),
            "{}",
            del.describe()
        );
    }
    assert!(!pod.has_link("eth0"));
}

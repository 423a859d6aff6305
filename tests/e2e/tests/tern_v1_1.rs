//! Issue 3, "Done when", the part Debian's libcni (1.1.x) cannot drive: cniVersion 1.1.0 ADD,
//! CHECK and DEL, STATUS and GC, by direct invocation exactly as the spec describes a runtime
//! (environment + stdin), tern running in a fake host netns. Debian's host-local stops at 1.0.0 and
//! tern-ipam is not on this branch yet, so these use `test-script-ipam`, a test-only IPAM in shell
//! (common::write_script_ipam). Needs root: fails without it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};

/// The tern netconf at `version` with `ipam_type` from `CNI_PATH`.
fn conf(node: &Node, version: &str, ipam_type: &str) -> Value {
    json!({
        "cniVersion": version,
        "name": C0_NAME,
        "type": "tern",
        "stateDir": node.state_dir(),
        "ipam": {"type": ipam_type},
    })
}

#[test]
fn v1_1_0_add_check_status_gc_del() {
    let node = Node::new("v110");
    let ipam_dir = write_script_ipam(&node.tool.scratch().join("ipam-bin"));
    let path = cni_path_with(&ipam_dir);
    let pod = node.pod("v110");
    let cid = "v110-container";
    let hv = host_veth(cid, "eth0");
    let c = conf(&node, "1.1.0", "test-script-ipam");
    let call = |verb: &str, c: &Value| {
        node.call("tern", verb)
            .path(&path)
            .container_id(cid)
            .netns(pod.path())
            .netconf(c)
            .unwrap()
            .run()
            .unwrap()
    };

    let add = call("ADD", &c);
    ok(&add, "ADD 1.1.0");
    let result = add.json.clone().unwrap();
    assert_eq!(
        normalize(&result),
        json!({
            "cniVersion": "1.1.0",
            "interfaces": [
                {"name": hv, "mac": "<mac>", "mtu": 1500},
                {"name": "eth0", "mac": "<mac>", "mtu": 1500, "sandbox": pod.path()},
            ],
            "ips": [
                {"interface": 1, "address": "10.99.0.50/32", "gateway": "169.254.1.1"},
                {"interface": 1, "address": "fd99::50/128", "gateway": "fe80::1"},
            ],
            "routes": [
                {"dst": "0.0.0.0/0", "gw": "169.254.1.1"},
                {"dst": "::/0", "gw": "fe80::1"},
                {"dst": "10.200.0.0/16", "gw": "169.254.1.1"},
            ],
            "dns": {"nameservers": ["10.96.0.10"]},
        }),
        "1.1.0 ADD result differs from golden"
    );
    let r = routes_of(&pod, "-4");
    assert!(
        r.iter()
            .any(|r| r["dst"] == "10.200.0.0/16" && r["gateway"] == "169.254.1.1"),
        "IPAM route not installed via the gateway: {r:?}"
    );
    assert_eq!(node.state_files().len(), 1);

    let mut chk = c.clone();
    chk["prevResult"] = result.clone();
    ok(&call("CHECK", &chk), "CHECK 1.1.0");
    // CHECK notices a missing IPAM route and names it.
    pod.ip(&["route", "del", "10.200.0.0/16"]);
    failed_with(
        &call("CHECK", &chk),
        101,
        "10.200.0.0/16",
        "CHECK without the IPAM route",
    );

    // STATUS is IPAM's answer, code kept.
    let status = |c: &Value| {
        node.call("tern", "STATUS")
            .path(&path)
            .netconf(c)
            .unwrap()
            .run()
            .unwrap()
    };
    ok(&status(&c), "STATUS");
    std::fs::write(ipam_dir.join("unavailable"), b"").unwrap();
    failed_with(
        &status(&c),
        51,
        "limited connectivity",
        "STATUS while IPAM is limited",
    );
    std::fs::remove_file(ipam_dir.join("unavailable")).unwrap();
    failed_with(
        &status(&conf(&node, "1.1.0", "no-such-ipam")),
        50,
        "no-such-ipam",
        "STATUS with a missing IPAM plugin",
    );

    // GC: forwarded to IPAM with the list; keeps listed attachments, removes the others.
    let gc = |valid: Option<Value>| {
        let mut g = c.clone();
        if let Some(v) = valid {
            g["cni.dev/valid-attachments"] = v;
        }
        node.call("tern", "GC")
            .path(&path)
            .netconf(&g)
            .unwrap()
            .run()
            .unwrap()
    };
    let keep = json!([{"containerID": cid, "ifname": "eth0"}]);
    ok(&gc(Some(keep.clone())), "GC keeping the attachment");
    ok(&gc(None), "GC without a list");
    assert!(
        node.host.has_link(&hv),
        "GC removed a valid attachment's veth"
    );
    assert_eq!(
        node.state_files().len(),
        1,
        "GC removed a valid attachment's state"
    );
    let calls = script_calls(&ipam_dir);
    let gcs: Vec<&Value> = calls
        .iter()
        .filter(|(c, _)| c == "GC")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(gcs.len(), 2, "{calls:?}");
    assert_eq!(
        gcs[0]["cni.dev/valid-attachments"], keep,
        "GC list not forwarded"
    );
    for (verb, _) in &calls {
        assert!(
            ["ADD", "CHECK", "STATUS", "GC"].contains(&verb.as_str()),
            "unexpected IPAM call {verb}"
        );
    }
    ok(&gc(Some(json!([]))), "GC with nothing valid");
    assert!(!node.host.has_link(&hv), "GC left the stale veth");
    assert!(!pod.has_link("eth0"), "GC left the pod end");
    node.assert_nothing_left(&result_addrs(&result));

    // DEL after GC, twice: nothing to do, success, IPAM told.
    ok(&call("DEL", &c), "DEL after GC");
    ok(&call("DEL", &c), "DEL again");
    assert!(
        script_calls(&ipam_dir)
            .iter()
            .filter(|(c, _)| c == "DEL")
            .count()
            >= 2
    );
    node.assert_nothing_left(&result_addrs(&result));
}

/// A full 1.1.0 ADD and DEL with the test IPAM: nothing left, IPAM released.
#[test]
fn v1_1_0_add_del() {
    let node = Node::new("v110d");
    let ipam_dir = write_script_ipam(&node.tool.scratch().join("ipam-bin"));
    let path = cni_path_with(&ipam_dir);
    let pod = node.pod("v110d");
    let c = conf(&node, "1.1.0", "test-script-ipam");
    let call = |verb: &str| {
        node.call("tern", verb)
            .path(&path)
            .container_id("v110d")
            .netns(pod.path())
            .netconf(&c)
            .unwrap()
            .run()
            .unwrap()
    };
    let add = call("ADD");
    ok(&add, "ADD");
    pod.exec_ok(&["ping", "-c1", "-W2", tern_testkit::netns::UPLINK_V4]);
    ok(&call("DEL"), "DEL");
    node.assert_nothing_left(&result_addrs(add.json.as_ref().unwrap()));
    assert_eq!(
        script_calls(&ipam_dir)
            .iter()
            .map(|(c, _)| c.as_str())
            .collect::<Vec<_>>(),
        vec!["ADD", "DEL"]
    );
}

/// STATUS and GC are refused below 1.1.0 (code 1) for every older version, touching nothing.
#[test]
fn status_and_gc_need_1_1_0() {
    let node = Node::new("stgc");
    let ipam_dir = write_script_ipam(&node.tool.scratch().join("ipam-bin"));
    let path = cni_path_with(&ipam_dir);
    for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0"] {
        for verb in ["STATUS", "GC"] {
            let mut c = conf(&node, v, "test-script-ipam");
            c["cni.dev/valid-attachments"] = json!([]);
            let out = node
                .call("tern", verb)
                .path(&path)
                .netconf(&c)
                .unwrap()
                .run()
                .unwrap();
            failed_with(&out, 1, "1.1.0", &format!("{verb} at {v}"));
            assert_eq!(
                out.json.as_ref().unwrap()["cniVersion"],
                v,
                "{}",
                out.describe()
            );
        }
    }
    assert!(script_calls(&ipam_dir).is_empty(), "IPAM was called");
}

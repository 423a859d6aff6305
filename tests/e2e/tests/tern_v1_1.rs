//! The part Debian's libcni (1.1.x) cannot drive: cniVersion 1.1.0 ADD, CHECK, DEL, STATUS and GC
//! by direct invocation exactly as the spec describes a runtime (environment + stdin), tern running
//! in a fake host netns and delegating to tern-ipam (Debian's host-local stops at 1.0.0). One test
//! keeps `test-script-ipam` (common::write_script_ipam): it checks what only a call log shows — the GC list forwarded verbatim, an IPAM STATUS code other than 50
//! kept, and no IPAM call at all for a verb refused below 1.1.0. Needs root (`tern_testkit::root::skip`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};
use tern_testkit::netns::TestNetns;

/// Runs tern `verb` for attachment (`cid`, eth0) in `pod` with `c` on `node`.
fn tern(
    node: &Node,
    verb: &str,
    cid: &str,
    pod: &TestNetns,
    c: &Value,
) -> tern_testkit::exec::RunOutput {
    node.call("tern", verb)
        .container_id(cid)
        .netns(pod.path())
        .netconf(c)
        .unwrap()
        .run()
        .unwrap()
}

/// Runs tern STATUS or GC (no container, no netns) with `c`.
fn tern_global(node: &Node, verb: &str, c: &Value) -> tern_testkit::exec::RunOutput {
    node.call("tern", verb).netconf(c).unwrap().run().unwrap()
}

#[test]
fn v1_1_0_add_check_status_gc_del() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("v110");
    let pod = node.pod("v110");
    let cid = "v110-container";
    let hv = host_veth(cid, "eth0");
    let c = ipam_conf(&node, "1.1.0", Fam::Dual);

    let add = tern(&node, "ADD", cid, &pod, &c);
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
                {"interface": 1, "address": "10.99.0.2/32", "gateway": "169.254.1.1"},
                {"interface": 1, "address": "fd99::2/128", "gateway": "fe80::1"},
            ],
            "routes": [
                {"dst": "0.0.0.0/0", "gw": "169.254.1.1"},
                {"dst": "::/0", "gw": "fe80::1"},
                {"dst": "10.200.0.0/16", "gw": "169.254.1.1"},
            ],
            "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]},
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
    assert_eq!(
        leases(&node).into_iter().collect::<Vec<_>>(),
        vec![
            ("10.99.0.2".to_owned(), cid.to_owned()),
            ("fd99::2".to_owned(), cid.to_owned())
        ]
    );

    let mut chk = c.clone();
    chk["prevResult"] = result.clone();
    ok(&tern(&node, "CHECK", cid, &pod, &chk), "CHECK 1.1.0");
    // CHECK notices a missing IPAM route and names it.
    pod.ip(&["route", "del", "10.200.0.0/16"]);
    failed_with(
        &tern(&node, "CHECK", cid, &pod, &chk),
        106,
        "10.200.0.0/16",
        "CHECK without the IPAM route",
    );

    ok(&tern_global(&node, "STATUS", &c), "STATUS");
    failed_with(
        &tern_global(&node, "STATUS", &conf(&node, "1.1.0", "no-such-ipam")),
        50,
        "no-such-ipam",
        "STATUS with a missing IPAM plugin",
    );

    // GC: without a list and with the attachment listed, nothing goes.
    let gc = |valid: Option<Value>| {
        let mut g = c.clone();
        if let Some(v) = valid {
            g["cni.dev/valid-attachments"] = v;
        }
        tern_global(&node, "GC", &g)
    };
    ok(&gc(None), "GC without a list");
    ok(
        &gc(Some(json!([{"containerID": cid, "ifname": "eth0"}]))),
        "GC keeping the attachment",
    );
    assert!(
        node.host.has_link(&hv),
        "GC removed a valid attachment's veth"
    );
    assert_eq!(node.state_files().len(), 1, "GC removed valid state");
    assert_eq!(leases(&node).len(), 2, "GC released a valid lease");
    // The same container with another ifname is a different attachment.
    ok(
        &gc(Some(json!([{"containerID": cid, "ifname": "eth1"}]))),
        "GC listing only eth1",
    );
    assert!(!node.host.has_link(&hv), "GC left the stale veth");
    assert!(!pod.has_link("eth0"), "GC left the pod end");
    node.assert_nothing_left(&result_addrs(&result));

    // DEL after GC, twice: nothing to do, success.
    ok(&tern(&node, "DEL", cid, &pod, &c), "DEL after GC");
    ok(&tern(&node, "DEL", cid, &pod, &c), "DEL again");
    node.assert_nothing_left(&result_addrs(&result));
}

/// tern's GC at 1.1.0 with tern-ipam: of three attachments (two wired by tern, one lease made by
/// tern-ipam directly, as a chain whose tern state was lost would leave), only the listed one
/// keeps its lease, veth and state; the others' leases are released, veths and state removed.
/// An empty list then collects everything.
#[test]
fn v1_1_0_gc_releases_only_invalid_attachments() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("v110gc");
    let c = ipam_conf(&node, "1.1.0", Fam::Dual);
    let (pa, pb) = (node.pod("v110gca"), node.pod("v110gcb"));
    let a = tern(&node, "ADD", "gc-a", &pa, &c);
    ok(&a, "ADD a");
    let b = tern(&node, "ADD", "gc-b", &pb, &c);
    ok(&b, "ADD b");
    // An IPAM plugin gets the whole netconf, as tern passes it.
    let orphan = node
        .call("tern-ipam", "ADD")
        .container_id("gc-orphan")
        .netns(pb.path())
        .netconf(&c)
        .unwrap()
        .run()
        .unwrap();
    ok(&orphan, "tern-ipam ADD of the orphan");
    let owners = |n: &Node| {
        let mut o: Vec<String> = leases(n).into_values().collect();
        o.sort();
        o.dedup();
        o
    };
    assert_eq!(owners(&node), vec!["gc-a", "gc-b", "gc-orphan"]);
    assert_eq!(leases(&node).len(), 6);

    let mut g = c.clone();
    g["cni.dev/valid-attachments"] = json!([{"containerID": "gc-a", "ifname": "eth0"}]);
    ok(&tern_global(&node, "GC", &g), "GC keeping a");
    assert_eq!(owners(&node), vec!["gc-a"], "invalid leases kept");
    assert_eq!(leases(&node).len(), 2);
    assert!(
        node.host.has_link(&host_veth("gc-a", "eth0")),
        "a's veth removed"
    );
    assert!(pa.has_link("eth0"));
    assert!(
        !node.host.has_link(&host_veth("gc-b", "eth0")),
        "b's veth kept"
    );
    assert!(!pb.has_link("eth0"));
    let state: Vec<String> = node
        .state_files()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(state, vec!["gc-a_eth0.json"]);
    // b's host routes went with its veth.
    let routes = node.host.ip(&["route", "show"]);
    for addr in result_addrs(b.json.as_ref().unwrap()) {
        assert!(!routes.contains(&addr.to_string()), "route to {addr} left");
    }
    // a still works: CHECK passes.
    let mut chk = c.clone();
    chk["prevResult"] = a.json.clone().unwrap();
    ok(
        &tern(&node, "CHECK", "gc-a", &pa, &chk),
        "CHECK of the kept attachment",
    );

    g["cni.dev/valid-attachments"] = json!([]);
    ok(&tern_global(&node, "GC", &g), "GC with nothing valid");
    let mut all = result_addrs(a.json.as_ref().unwrap());
    all.extend(result_addrs(b.json.as_ref().unwrap()));
    node.assert_nothing_left(&all);
}

/// STATUS at 1.1.0 through tern is tern-ipam's answer: ready with a usable data dir, code 50
/// naming the directory when it is unusable (a regular file where the directory should be), and
/// ready again once it is usable.
#[test]
fn v1_1_0_status_code_50_when_ipam_data_dir_unusable() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("v110st");
    let c = ipam_conf(&node, "1.1.0", Fam::V4);
    ok(
        &tern_global(&node, "STATUS", &c),
        "STATUS with a usable data dir",
    );
    let dd = node.data_dir();
    let _ = std::fs::remove_dir_all(&dd);
    std::fs::write(&dd, b"not a directory").unwrap();
    let out = tern_global(&node, "STATUS", &c);
    failed_with(
        &out,
        50,
        &dd.display().to_string(),
        "STATUS with dataDir a file",
    );
    // ADD fails too, and leaves nothing.
    let pod = node.pod("v110st");
    let add = tern(&node, "ADD", "st-1", &pod, &c);
    assert!(
        !add.success(),
        "ADD with an unusable data dir:\n{}",
        add.describe()
    );
    assert!(!pod.has_link("eth0"));
    std::fs::remove_file(&dd).unwrap();
    ok(&tern_global(&node, "STATUS", &c), "STATUS after repair");
    node.assert_nothing_left(&[]);
}

/// A full 1.1.0 ADD and DEL with tern-ipam: the pod reaches the node, DEL releases the lease and
/// leaves nothing.
#[test]
fn v1_1_0_add_del() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("v110d");
    let pod = node.pod("v110d");
    let c = ipam_conf(&node, "1.1.0", Fam::V4);
    let add = tern(&node, "ADD", "v110d", &pod, &c);
    ok(&add, "ADD");
    assert_eq!(leases(&node).len(), 1);
    pod.exec_ok(&["ping", "-c1", "-W2", tern_testkit::netns::UPLINK_V4]);
    ok(&tern(&node, "DEL", "v110d", &pod, &c), "DEL");
    node.assert_nothing_left(&result_addrs(add.json.as_ref().unwrap()));
}

/// STATUS and GC are refused below 1.1.0 (code 1, in the request's version) for every older
/// version: a lease no attachment holds survives GC with an empty list.
#[test]
fn status_and_gc_need_1_1_0() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("stgc");
    let pod = node.pod("stgc");
    let add = tern(
        &node,
        "ADD",
        "stgc-1",
        &pod,
        &ipam_conf(&node, "1.0.0", Fam::V4),
    );
    ok(&add, "ADD at 1.0.0");
    for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0"] {
        for verb in ["STATUS", "GC"] {
            let mut c = ipam_conf(&node, v, Fam::V4);
            c["cni.dev/valid-attachments"] = json!([]);
            let out = tern_global(&node, verb, &c);
            failed_with(&out, 1, "1.1.0", &format!("{verb} at {v}"));
            assert_eq!(
                out.json.as_ref().unwrap()["cniVersion"],
                v,
                "{}",
                out.describe()
            );
        }
    }
    assert_eq!(leases(&node).len(), 1, "a refused GC released a lease");
    assert_eq!(node.state_files().len(), 1, "a refused GC removed state");
    ok(
        &tern(
            &node,
            "DEL",
            "stgc-1",
            &pod,
            &ipam_conf(&node, "1.0.0", Fam::V4),
        ),
        "DEL",
    );
    node.assert_nothing_left(&result_addrs(add.json.as_ref().unwrap()));
}

/// What only a call log shows, with `test-script-ipam`: tern forwards the GC list verbatim, keeps
/// an IPAM STATUS code other than 50 (51, which tern-ipam never sends), and calls IPAM not at all
/// for STATUS and GC refused below 1.1.0.
#[test]
fn script_ipam_sees_forwarded_gc_list_kept_status_code_no_refused_calls() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("v110s");
    let ipam_dir = write_script_ipam(&node.tool.scratch().join("ipam-bin"));
    let path = cni_path_with(&ipam_dir);
    let run = |verb: &str, c: &Value| {
        node.call("tern", verb)
            .path(&path)
            .netconf(c)
            .unwrap()
            .run()
            .unwrap()
    };
    for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0"] {
        for verb in ["STATUS", "GC"] {
            let mut c = conf(&node, v, "test-script-ipam");
            c["cni.dev/valid-attachments"] = json!([]);
            failed_with(&run(verb, &c), 1, "1.1.0", &format!("{verb} at {v}"));
        }
    }
    assert!(
        script_calls(&ipam_dir).is_empty(),
        "IPAM was called for a refused verb"
    );

    let c = conf(&node, "1.1.0", "test-script-ipam");
    ok(&run("STATUS", &c), "STATUS");
    std::fs::write(ipam_dir.join("unavailable"), b"").unwrap();
    failed_with(
        &run("STATUS", &c),
        51,
        "limited connectivity",
        "STATUS while IPAM is limited",
    );
    std::fs::remove_file(ipam_dir.join("unavailable")).unwrap();

    let keep =
        json!([{"containerID": "x", "ifname": "eth0"}, {"containerID": "y", "ifname": "net1"}]);
    let mut g = c.clone();
    g["cni.dev/valid-attachments"] = keep.clone();
    ok(&run("GC", &g), "GC");
    let calls = script_calls(&ipam_dir);
    let verbs: Vec<&str> = calls.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(verbs, vec!["STATUS", "STATUS", "GC"], "{calls:?}");
    assert_eq!(
        calls[2].1["cni.dev/valid-attachments"], keep,
        "GC list not forwarded"
    );
    assert_eq!(calls[2].1["cniVersion"], "1.1.0");
}

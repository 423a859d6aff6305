//! tern through real libcni (tests/cnitool running inside a fake host
//! netns) for every cniVersion libcni knows, IPv4, IPv6 and dual-stack host-local ranges: ADD with
//! a golden result and the kernel state it must leave in pod and host, CHECK, DEL twice, and DEL
//! after the netns is gone — each ending with nothing left. Needs root (`tern_testkit::root::skip`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};
use tern_testkit::netns::{TestNetns, UPLINK_V4, UPLINK_V6};

/// The golden ADD result for the first attachment in a fresh node, as libcni prints it: MACs are
/// `<mac>`, everything else is exact. Before 1.0.0 each IP carries its `version`.
fn golden(version: &str, fam: Fam, host_veth: &str, sandbox: &str) -> Value {
    let pre_1_0 = version.starts_with("0.");
    let ip = |v: &str, address: &str, gateway: &str| {
        let mut ip = json!({"interface": 1, "address": address, "gateway": gateway});
        if pre_1_0 {
            ip["version"] = json!(v);
        }
        ip
    };
    let (mut ips, mut routes) = (vec![], vec![]);
    if fam != Fam::V6 {
        ips.push(ip("4", "10.99.0.2/32", "169.254.1.1"));
        routes.push(json!({"dst": "0.0.0.0/0", "gw": "169.254.1.1"}));
    }
    if fam != Fam::V4 {
        ips.push(ip("6", "fd99::2/128", "fe80::1"));
        routes.push(json!({"dst": "::/0", "gw": "fe80::1"}));
    }
    json!({
        "cniVersion": version,
        "interfaces": [
            {"name": host_veth, "mac": "<mac>"},
            {"name": "eth0", "mac": "<mac>", "sandbox": sandbox},
        ],
        "ips": ips,
        "routes": routes,
        "dns": {},
    })
}

/// Asserts what ADD must leave in the kernel: pod addresses /32 and /128 on an up eth0 with MTU
/// 1500, default routes via 169.254.1.1 / fe80::1; host veth up with proxy ARP, fe80::1 for IPv6,
/// a route to each pod address through it, forwarding on; and the pod reaches the host's uplink
/// address through its gateway.
fn assert_wired(node: &Node, pod: &TestNetns, fam: Fam, host_veth: &str) {
    let want = fam.nth_addrs(0);
    let eth0 = link_of(pod, "eth0");
    assert_eq!(eth0["mtu"], 1500, "{eth0}");
    assert_eq!(eth0["linkinfo"]["info_kind"], "veth", "{eth0}");
    assert!(
        eth0["flags"].as_array().unwrap().contains(&json!("UP")),
        "{eth0}"
    );
    let have = addrs_of(pod, "eth0");
    for a in &want {
        let cidr = format!("{a}/{}", if a.is_ipv4() { 32 } else { 128 });
        assert!(have.contains(&cidr), "pod eth0 lacks {cidr}: {have:?}");
    }
    assert_eq!(
        have.iter().filter(|a| !a.starts_with("fe80:")).count(),
        want.len(),
        "pod eth0 has other addresses: {have:?}"
    );

    let hl = link_of(&node.host, host_veth);
    assert!(
        hl["flags"].as_array().unwrap().contains(&json!("UP")),
        "{hl}"
    );
    assert_eq!(hl["mtu"], 1500, "{hl}");
    for a in &want {
        let r = node.host.ip(&["route", "get", &a.to_string()]);
        assert!(
            r.contains(&format!("dev {host_veth}")),
            "host route to {a}: {r}"
        );
    }
    if fam != Fam::V6 {
        assert_eq!(
            node.host
                .sysctl(&format!("net.ipv4.conf.{host_veth}.proxy_arp")),
            "1"
        );
        assert_eq!(node.host.sysctl("net.ipv4.ip_forward"), "1");
        let r = routes_of(pod, "-4");
        assert!(
            r.iter().any(|r| r["dst"] == "default"
                && r["gateway"] == "169.254.1.1"
                && r["dev"] == "eth0"),
            "pod v4 routes: {r:?}"
        );
        pod.exec_ok(&["ping", "-c1", "-W2", UPLINK_V4]);
    }
    if fam != Fam::V4 {
        assert!(
            addrs_of(&node.host, host_veth).contains(&"fe80::1/64".to_owned()),
            "host veth lacks fe80::1/64"
        );
        assert_eq!(node.host.sysctl("net.ipv6.conf.all.forwarding"), "1");
        let r = routes_of(pod, "-6");
        assert!(
            r.iter()
                .any(|r| r["dst"] == "default" && r["gateway"] == "fe80::1" && r["dev"] == "eth0"),
            "pod v6 routes: {r:?}"
        );
        pod.exec_ok(&["ping", "-6", "-c1", "-W2", UPLINK_V6]);
    }
    assert_eq!(
        node.reservations().len(),
        want.len(),
        "{:?}",
        node.reservations()
    );
    assert_eq!(node.state_files().len(), 1, "{:?}", node.state_files());
}

fn cycle(version: &str, fam: Fam, tag: &str) {
    let mut node = Node::new(tag);
    let list = node.chain(version, fam, vec![]);
    node.tool.write_conflist(&list).unwrap();
    let pod = node.pod(tag);
    let cid = node.tool.get_container_id().to_owned();
    let hv = host_veth(&cid, "eth0");

    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD");
    let result = add.json.clone().expect("ADD result is JSON");
    assert_eq!(
        normalize(&result),
        golden(version, fam, &hv, pod.path().to_str().unwrap()),
        "ADD result differs from golden"
    );
    assert_wired(&node, &pod, fam, &hv);
    let addrs = result_addrs(&result);

    let check = node.tool.check(pod.path()).unwrap();
    if version.starts_with("0.3") {
        // libcni itself refuses CHECK below 0.4.0 (code 0: not a plugin error).
        failed_with(&check, 0, "does not support the CHECK command", "CHECK");
    } else {
        ok(&check, "CHECK");
        assert!(check.stdout.is_empty(), "{}", check.describe());
    }

    let del = node.tool.del(pod.path()).unwrap();
    ok(&del, "DEL");
    assert!(del.stdout.is_empty(), "{}", del.describe());
    assert!(!pod.has_link("eth0"), "pod eth0 left after DEL");
    node.assert_nothing_left(&addrs);
    ok(&node.tool.del(pod.path()).unwrap(), "second DEL");
    node.assert_nothing_left(&addrs);

    // ADD again, then the netns disappears before DEL (the runtime lost the sandbox).
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "second ADD");
    let addrs = result_addrs(add.json.as_ref().unwrap());
    let path = pod.path();
    drop(pod);
    assert!(!path.exists());
    let del = node.tool.del(&path).unwrap();
    ok(&del, "DEL after the netns is gone");
    assert!(del.stdout.is_empty(), "{}", del.describe());
    node.assert_nothing_left(&addrs);
    ok(
        &node.tool.del(&path).unwrap(),
        "repeated DEL after the netns is gone",
    );
}

macro_rules! matrix {
    ($($name:ident: $v:literal, $fam:expr;)*) => {$(
        #[test]
        fn $name() {
            if tern_testkit::root::skip() {
                return;
            }
            cycle($v, $fam, stringify!($name));
        }
    )*};
}

matrix! {
    v030_v4: "0.3.0", Fam::V4;
    v030_v6: "0.3.0", Fam::V6;
    v030_dual: "0.3.0", Fam::Dual;
    v031_v4: "0.3.1", Fam::V4;
    v031_v6: "0.3.1", Fam::V6;
    v031_dual: "0.3.1", Fam::Dual;
    v040_v4: "0.4.0", Fam::V4;
    v040_v6: "0.4.0", Fam::V6;
    v040_dual: "0.4.0", Fam::Dual;
    v100_v4: "1.0.0", Fam::V4;
    v100_v6: "1.0.0", Fam::V6;
    v100_dual: "1.0.0", Fam::Dual;
}

/// The residue check itself can fail: after an ADD without DEL it must report the leftovers.
#[test]
fn nothing_left_detects_residue() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("resid");
    let list = node.chain("1.0.0", Fam::Dual, vec![]);
    node.tool.write_conflist(&list).unwrap();
    let pod = node.pod("resid");
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD");
    let addrs = result_addrs(add.json.as_ref().unwrap());
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        node.assert_nothing_left(&addrs)
    }));
    assert!(
        caught.is_err(),
        "assert_nothing_left missed a live attachment"
    );
    // Remove the veth by hand: IPAM and state are still there and must be reported.
    node.host.ip(&[
        "link",
        "del",
        &host_veth(node.tool.get_container_id(), "eth0"),
    ]);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        node.assert_nothing_left(&addrs)
    }));
    assert!(
        caught.is_err(),
        "assert_nothing_left missed IPAM/state residue"
    );
    ok(&node.tool.del(pod.path()).unwrap(), "DEL");
    node.assert_nothing_left(&addrs);
}

/// Two pods on one node reach each other through the host (routed, no bridge), IPv4 and IPv6.
#[test]
fn pod_to_pod_ping() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("p2p");
    let list = node.chain("1.0.0", Fam::Dual, vec![]);
    node.tool.write_conflist(&list).unwrap();
    let (a, b) = (node.pod("p2pa"), node.pod("p2pb"));
    node.tool.container_id("p2p-a");
    let ra = node.tool.add(a.path()).unwrap();
    ok(&ra, "ADD a");
    node.tool.container_id("p2p-b");
    let rb = node.tool.add(b.path()).unwrap();
    ok(&rb, "ADD b");
    let (aa, ab) = (
        result_addrs(ra.json.as_ref().unwrap()),
        result_addrs(rb.json.as_ref().unwrap()),
    );
    assert_eq!(aa.len(), 2);
    assert!(aa.iter().all(|x| !ab.contains(x)), "{aa:?} {ab:?}");
    for (from, to) in [(&a, &ab), (&b, &aa)] {
        for addr in to.iter() {
            let fam = if addr.is_ipv4() { "-4" } else { "-6" };
            from.exec_ok(&["ping", fam, "-c1", "-W2", &addr.to_string()]);
        }
    }
    ok(&node.tool.del(b.path()).unwrap(), "DEL b");
    // b is gone: a can no longer reach it.
    let out = a.exec(&["ping", "-4", "-c1", "-W1", &ab[0].to_string()]);
    assert!(!out.status.success(), "ping to a deleted pod succeeded");
    node.tool.container_id("p2p-a");
    ok(&node.tool.del(a.path()).unwrap(), "DEL a");
    node.assert_nothing_left(&[aa, ab].concat());
}

/// The default route of one family in `pod` (`ip -j route` objects whose dst is `default`).
fn default_routes(pod: &TestNetns, fam: &str) -> Vec<Value> {
    routes_of(pod, fam)
        .into_iter()
        .filter(|r| r["dst"] == "default")
        .collect()
}

/// A pod attached to two tern networks, as Multus attaches them (one container ID, ifnames eth0
/// and eth1): the second ADD succeeds, leaves the pod's default routes with the first
/// attachment, routes its IPAM routes through eth1 and lists only those; CHECK passes for both;
/// DEL of the second leaves the first working; nothing is left at the end.
#[test]
fn a_second_tern_network_in_one_pod_keeps_the_first_default_route() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("two");
    let first =
        tern_testkit::exec::conflist("net-one", "1.0.0", vec![node.tern(Fam::Dual.ranges())]);
    let mut t2 = node.tern(json!([[{"subnet": "10.98.0.0/24"}], [{"subnet": "fd98::/64"}]]));
    t2["ipam"]["routes"] = json!([{"dst": "10.200.0.0/16"}, {"dst": "fd20::/64"}]);
    let second = tern_testkit::exec::conflist("net-two", "1.0.0", vec![t2]);
    let pod = node.pod("two");
    node.tool.container_id("two-c");

    node.tool.write_conflist(&first).unwrap();
    let r1 = node.tool.add(pod.path()).unwrap();
    ok(&r1, "ADD eth0");
    node.tool.write_conflist(&second).unwrap();
    node.tool.ifname("eth1");
    let r2 = node.tool.add(pod.path()).unwrap();
    ok(&r2, "ADD eth1 (second tern network)");

    let listed: Vec<&str> = r2.json.as_ref().unwrap()["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["dst"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["10.200.0.0/16", "fd20::/64"], "{r2:?}");
    for fam in ["-4", "-6"] {
        let defaults = default_routes(&pod, fam);
        assert_eq!(defaults.len(), 1, "{fam}: {defaults:?}");
        assert_eq!(defaults[0]["dev"], "eth0", "{fam}: {defaults:?}");
    }
    let ipam_routes: Vec<Value> = ["-4", "-6"]
        .iter()
        .flat_map(|f| routes_of(&pod, f))
        .filter(|r| r["dst"] == "10.200.0.0/16" || r["dst"] == "fd20::/64")
        .collect();
    assert_eq!(ipam_routes.len(), 2, "{ipam_routes:?}");
    assert!(
        ipam_routes.iter().all(|r| r["dev"] == "eth1"),
        "{ipam_routes:?}"
    );
    ok(&node.tool.check(pod.path()).unwrap(), "CHECK eth1");

    ok(&node.tool.del(pod.path()).unwrap(), "DEL eth1");
    assert!(pod.ip(&["link", "show"]).contains("eth0"));
    assert!(!pod.ip(&["link", "show"]).contains("eth1"));
    node.tool.write_conflist(&first).unwrap();
    node.tool.ifname("eth0");
    ok(
        &node.tool.check(pod.path()).unwrap(),
        "CHECK eth0 after DEL eth1",
    );
    ok(&node.tool.del(pod.path()).unwrap(), "DEL eth0");
    let addrs = [
        result_addrs(r1.json.as_ref().unwrap()),
        result_addrs(r2.json.as_ref().unwrap()),
    ]
    .concat();
    node.assert_nothing_left(&addrs);
}

/// A default route in the pod, at tern's metric, that is not a routed-veth one (here
/// `unreachable` for IPv4 and `blackhole` for IPv6, as a runtime or an image might leave) is never
/// taken over or silently kept — not even when a veth route via tern's gateway exists at another
/// metric: ADD fails with 101 naming it, and unwinds (no veth, no lease, no state); the pod's own
/// routes stay.
#[test]
fn a_foreign_default_route_in_the_pod_fails_add_and_leaves_nothing() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut node = Node::new("fdr");
    let list = node.chain("1.0.0", Fam::Dual, vec![]);
    node.tool.write_conflist(&list).unwrap();
    let pod = node.pod("fdr");
    node.tool.container_id("fdr-c");
    // IPv4: `unreachable default` at tern's metric, and a veth route via tern's gateway at
    // another metric that must not pass for it.
    pod.ip(&["route", "add", "unreachable", "default"]);
    pod.ip(&["link", "add", "vy", "type", "veth", "peer", "name", "vyp"]);
    pod.ip(&["link", "set", "vy", "up"]);
    pod.ip(&["link", "set", "vyp", "up"]);
    let via_veth = "default via 169.254.1.1 dev vy onlink metric 50";
    let mut args = vec!["route", "add"];
    args.extend(via_veth.split(' '));
    pod.ip(&args);
    assert!(
        pod.ip(&["route", "show"]).contains("metric 50"),
        "fixture route missing"
    );
    let out = node.tool.add(pod.path()).unwrap();
    failed_with(
        &out,
        101,
        "0.0.0.0/0",
        "ADD over an unreachable IPv4 default",
    );
    assert!(!pod.ip(&["link", "show"]).contains("eth0"), "pod veth left");
    assert!(pod.ip(&["route", "show"]).contains("unreachable default"));
    node.assert_nothing_left(&Fam::Dual.nth_addrs(0));
    // IPv6: a `blackhole default` at tern's metric.
    pod.ip(&["route", "del", "unreachable", "default"]);
    pod.ip(&["-6", "route", "add", "blackhole", "default"]);
    let out = node.tool.add(pod.path()).unwrap();
    failed_with(&out, 101, "::/0", "ADD over a blackhole IPv6 default");
    assert!(!pod.ip(&["link", "show"]).contains("eth0"), "pod veth left");
    assert!(pod
        .ip(&["-6", "route", "show"])
        .contains("blackhole default"));
    node.assert_nothing_left(&Fam::Dual.nth_addrs(1));
}

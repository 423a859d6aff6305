//! tern's verbs in-process, for every supported cniVersion: the `tern` library driven through the
//! CNI dispatcher (environment and stdin as a runtime passes them) on a thread inside a throwaway
//! host netns, against a throwaway pod netns, with tern-ipam as IPAM (run in-process, as tern
//! runs it). No built binary is needed; root is (netns, veth, sysctl): fails without it. The
//! binary's model of namespace entry: on the calling thread (`enter_on_calling_thread`, as
//! tern's `main`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;

use serde_json::{json, Value};
use tern_cni::code;
use tern_testkit::tern_host_veth;

mod common;
use common::{with_prev, Node, VERSIONS};

#[test]
fn add_check_del_for_every_version() {
    if tern_testkit::root::skip() {
        return;
    }
    tern_net::netns::enter_on_calling_thread();
    for v in VERSIONS {
        let node = Node::new("tern-inproc");
        let conf = node.conf(v);
        let veth = tern_host_veth("c1", "eth0");

        let result = node.ok("ADD", "c1", &conf);
        assert_eq!(result["cniVersion"], v);
        assert_eq!(result["interfaces"][0]["name"], veth.as_str(), "{v}");
        let mut pod_if = json!({"name": "eth0", "mac": result["interfaces"][1]["mac"],
                                "sandbox": node.hp.pod.path().display().to_string()});
        if v == "1.1.0" {
            pod_if["mtu"] = json!(1500); // the interface's mtu exists from 1.1.0 on
        }
        assert_eq!(result["interfaces"][1], pod_if, "{v}");
        let ips = result["ips"].as_array().unwrap();
        assert_eq!(ips.len(), 2, "{v}: {result}");
        assert_eq!(ips[0]["address"], "10.98.0.2/32", "{v}");
        assert_eq!(ips[0]["gateway"], "169.254.1.1", "{v}");
        assert_eq!(ips[1]["address"], "fd00:98::2/128", "{v}");
        assert_eq!(ips[1]["gateway"], "fe80::1", "{v}");
        assert_eq!(ips[0]["interface"], 1, "{v}");
        if v.starts_with("0.") {
            assert_eq!(
                (&ips[0]["version"], &ips[1]["version"]),
                (&json!("4"), &json!("6"))
            );
        } else {
            assert!(ips[0].get("version").is_none(), "{v}: no version field");
        }
        assert_eq!(
            result["routes"],
            json!([{"dst": "0.0.0.0/0", "gw": "169.254.1.1"}, {"dst": "::/0", "gw": "fe80::1"},
                   {"dst": "10.96.0.0/16", "gw": "169.254.1.1"}]),
            "{v}"
        );

        // The kernel state ADD must leave, read with iproute2 (not the code under test).
        let pod_addrs = node.hp.pod.ip(&["-o", "addr", "show", "dev", "eth0"]);
        assert!(pod_addrs.contains("inet 10.98.0.2/32"), "{v}: {pod_addrs}");
        assert!(
            pod_addrs.contains("inet6 fd00:98::2/128"),
            "{v}: {pod_addrs}"
        );
        let pod_routes = node.hp.pod.ip(&["-4", "route"]);
        assert!(
            pod_routes.contains("default via 169.254.1.1 dev eth0 onlink"),
            "{v}: {pod_routes}"
        );
        assert!(
            pod_routes.contains("10.96.0.0/16 via 169.254.1.1 dev eth0 onlink"),
            "{v}"
        );
        assert!(node
            .hp
            .pod
            .ip(&["-6", "route"])
            .contains("default via fe80::1 dev eth0"));
        assert!(node.hp.host.has_link(&veth), "{v}");
        let host_routes = node.hp.host.ip(&["-4", "route"]);
        assert!(
            host_routes.contains(&format!("10.98.0.2 dev {veth} scope link")),
            "{v}: {host_routes}"
        );
        assert_eq!(
            node.hp
                .host
                .sysctl(&format!("net.ipv4.conf.{veth}.proxy_arp")),
            "1"
        );
        assert_eq!(node.hp.host.sysctl("net.ipv4.ip_forward"), "1");
        assert_eq!(node.hp.host.sysctl("net.ipv6.conf.all.forwarding"), "1");
        assert!(node.state_file("c1").is_file(), "{v}");
        assert!(node.lease("10.98.0.2").is_file(), "{v}");

        let (status, out) = node.call(
            "CHECK",
            "c1",
            &with_prev(&conf, &result),
            &node.dir.join("bin"),
        );
        if v < "0.4.0" {
            assert_eq!(
                (status, &out["code"]),
                (1, &json!(code::INCOMPATIBLE_VERSION)),
                "{v}: {out}"
            );
        } else {
            assert_eq!((status, out), (0, Value::Null), "{v}");
        }

        for round in ["DEL", "DEL again"] {
            assert_eq!(
                node.ok("DEL", "c1", &with_prev(&conf, &result)),
                Value::Null,
                "{v} {round}"
            );
            assert!(!node.hp.host.has_link(&veth), "{v} {round}");
            assert!(!node.hp.pod.has_link("eth0"), "{v} {round}");
            assert!(
                !node.hp.host.ip(&["-4", "route"]).contains("10.98.0.2"),
                "{v} {round}"
            );
            assert!(!node.state_file("c1").exists(), "{v} {round}");
            assert!(!node.lease("10.98.0.2").exists(), "{v} {round}");
        }
    }
}

#[test]
fn status_and_gc_at_1_1_0() {
    if tern_testkit::root::skip() {
        return;
    }
    tern_net::netns::enter_on_calling_thread();
    let node = Node::new("tern-inproc-gc");
    let conf = node.conf("1.1.0");
    assert_eq!(node.ok("STATUS", "", &conf), Value::Null);
    node.ok("ADD", "c1", &conf);
    let veth = tern_host_veth("c1", "eth0");

    // c1 is valid: GC leaves it alone.
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "c1", "ifname": "eth0"}]);
    node.ok("GC", "", &gc);
    assert!(node.hp.host.has_link(&veth));
    assert!(node.state_file("c1").is_file() && node.lease("10.98.0.2").is_file());

    // Nothing is valid: its veth, state and lease go.
    gc["cni.dev/valid-attachments"] = json!([]);
    node.ok("GC", "", &gc);
    assert!(!node.hp.host.has_link(&veth));
    assert!(!node.state_file("c1").exists());
    assert!(!node.lease("10.98.0.2").exists());
}

#[test]
fn del_keeps_going_when_ipam_fails_and_reports_its_code() {
    if tern_testkit::root::skip() {
        return;
    }
    tern_net::netns::enter_on_calling_thread();
    for v in VERSIONS {
        let node = Node::new("tern-inproc-del");
        let conf = node.conf(v);
        let result = node.ok("ADD", "c1", &conf);
        let veth = tern_host_veth("c1", "eth0");

        // A CNI_PATH without tern-ipam: IPAM DEL fails, the veth and tern's state still go.
        let empty = node.dir.join("empty");
        fs::create_dir_all(&empty).unwrap();
        let (status, err) = node.call("DEL", "c1", &with_prev(&conf, &result), &empty);
        assert_eq!(status, 1, "{v}");
        assert_eq!(err["cniVersion"], v);
        assert!(
            err["msg"].as_str().unwrap().contains("tern-ipam"),
            "{v}: {err}"
        );
        assert!(!node.hp.host.has_link(&veth), "{v}");
        assert!(!node.state_file("c1").exists(), "{v}");
        assert!(node.lease("10.98.0.2").is_file(), "{v}: IPAM never ran");

        // A retry with IPAM back releases the lease.
        node.ok("DEL", "c1", &with_prev(&conf, &result));
        assert!(!node.lease("10.98.0.2").exists(), "{v}");
    }
}

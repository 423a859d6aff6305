//! Kernel tests of the netlink operations in throwaway namespaces (fake host + pod), real veth.
//! The test thread never changes namespace: handles are opened inside with `Handle::in_netns`.
//! Needs root.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use tern_net::netlink::{Family, Handle, KernelRoute, RouteScope};
use tern_net::netns::NetNs;
use tern_testkit::netns::HostAndPod;

struct Fixture {
    hp: HostAndPod,
    host: Handle,
    pod: Handle,
    pod_ns: NetNs,
}

fn fixture(prefix: &str) -> Fixture {
    let hp = HostAndPod::new(prefix);
    let host_ns = NetNs::open(hp.host.path()).unwrap();
    let pod_ns = NetNs::open(hp.pod.path()).unwrap();
    let host = Handle::in_netns(&host_ns).unwrap();
    let pod = Handle::in_netns(&pod_ns).unwrap();
    Fixture {
        hp,
        host,
        pod,
        pod_ns,
    }
}

fn net(s: &str) -> IpNetwork {
    s.parse().unwrap()
}

#[test]
fn veth_with_peer_created_directly_in_the_pod_netns() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = fixture("nl-veth");
    let mac = [0x02, 0x42, 0xac, 0x11, 0x00, 0x02];
    f.host
        .create_veth("ternh0", "eth0", &f.pod_ns, Some(1400), Some(mac))
        .unwrap();

    let host_end = f.host.link_by_name("ternh0").unwrap().expect("host end");
    assert_eq!(host_end.kind.as_deref(), Some("veth"));
    assert_eq!(host_end.mtu, 1400);
    assert!(!host_end.up);
    assert!(
        f.host.link_by_name("eth0").unwrap().is_none(),
        "peer leaked into host netns"
    );

    let pod_end = f.pod.link_by_name("eth0").unwrap().expect("pod end");
    assert_eq!(pod_end.mac, Some(mac));
    assert_eq!(pod_end.mtu, 1400);
    assert_eq!(pod_end.kind.as_deref(), Some("veth"));
    assert_eq!(
        f.pod.link_by_index(pod_end.index).unwrap().unwrap().name,
        "eth0"
    );
    assert!(f.pod.links().unwrap().iter().any(|l| l.name == "lo"));
    // Seen independently of the code under test.
    assert!(f
        .hp
        .pod
        .ip(&["link", "show", "eth0"])
        .contains("02:42:ac:11:00:02"));

    // Same names again: EEXIST, nothing new created.
    let e = f
        .host
        .create_veth("ternh0", "eth1", &f.pod_ns, None, None)
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EEXIST), "{e}");
    assert!(f.pod.link_by_name("eth1").unwrap().is_none());
    // Peer name taken in the pod netns: EEXIST too, and the host end is not left behind.
    let e = f
        .host
        .create_veth("ternh1", "eth0", &f.pod_ns, None, None)
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EEXIST), "{e}");
    assert!(f.host.link_by_name("ternh1").unwrap().is_none());

    // Deleting one end removes both.
    f.host.delete_link(host_end.index).unwrap();
    assert!(f.pod.link_by_name("eth0").unwrap().is_none());
    let e = f.host.delete_link(host_end.index).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENODEV), "{e}");
}

#[test]
fn delete_link_by_name_takes_both_ends_and_is_idempotent() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = fixture("nl-delname");
    f.host
        .create_veth("ternd0", "eth0", &f.pod_ns, None, None)
        .unwrap();
    assert!(f.host.delete_link_by_name("ternd0").unwrap());
    assert!(f.host.link_by_name("ternd0").unwrap().is_none());
    assert!(
        f.pod.link_by_name("eth0").unwrap().is_none(),
        "the pod end goes with the host end"
    );
    assert!(
        !f.host.delete_link_by_name("ternd0").unwrap(),
        "already gone"
    );
}

#[test]
fn missing_links_are_none() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = fixture("nl-miss");
    assert!(f.pod.link_by_name("nothere").unwrap().is_none());
    assert!(f.pod.link_by_index(99999).unwrap().is_none());
}

#[test]
fn link_attribute_setters() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = fixture("nl-attr");
    f.host
        .create_veth("ternh0", "eth0", &f.pod_ns, None, None)
        .unwrap();
    let idx = f.pod.link_by_name("eth0").unwrap().unwrap().index;
    let before = f.pod.link_by_index(idx).unwrap().unwrap();
    assert!(!before.promisc && !before.allmulti);

    f.pod.set_up(idx).unwrap();
    f.pod.set_mtu(idx, 1280).unwrap();
    f.pod.set_mac(idx, [0x0a, 0, 0, 0, 0, 0x01]).unwrap();
    f.pod.set_promisc(idx, true).unwrap();
    f.pod.set_allmulti(idx, true).unwrap();
    f.pod.set_txqlen(idx, 0).unwrap();
    let l = f.pod.link_by_index(idx).unwrap().unwrap();
    assert!(l.up && l.promisc && l.allmulti);
    assert_eq!(l.mtu, 1280);
    assert_eq!(l.mac, Some([0x0a, 0, 0, 0, 0, 0x01]));
    assert_eq!(l.txqlen, 0);
    let shown = f.hp.pod.ip(&["-d", "link", "show", "eth0"]);
    assert!(
        shown.contains("PROMISC") && shown.contains("ALLMULTI") && shown.contains("mtu 1280"),
        "{shown}"
    );

    f.pod.set_promisc(idx, false).unwrap();
    f.pod.set_allmulti(idx, false).unwrap();
    f.pod.set_txqlen(idx, 500).unwrap();
    let l = f.pod.link_by_index(idx).unwrap().unwrap();
    assert!(!l.promisc && !l.allmulti);
    assert_eq!(l.txqlen, 500);

    // Kernel-rejected values carry the errno.
    let e = f.pod.set_mtu(idx, 10).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EINVAL), "{e}");
    let e = f.pod.set_mac(idx, [0x01, 0, 0, 0, 0, 1]).unwrap_err(); // multicast
    assert_eq!(e.errno(), Some(libc::EADDRNOTAVAIL), "{e}");
    let e = f.pod.set_up(99999).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENODEV), "{e}");
}

#[test]
fn addresses_add_list_delete() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = fixture("nl-addr");
    f.host
        .create_veth("ternh0", "eth0", &f.pod_ns, None, None)
        .unwrap();
    let idx = f.pod.link_by_name("eth0").unwrap().unwrap().index;
    f.pod.set_up(idx).unwrap();

    f.pod.add_address(idx, net("10.22.0.5/32"), false).unwrap();
    f.pod.add_address(idx, net("fd00:22::5/128"), true).unwrap();
    let addrs = f.pod.addresses(idx).unwrap();
    let v4 = addrs
        .iter()
        .find(|a| a.addr == net("10.22.0.5/32"))
        .expect("v4");
    assert!(!v4.is_tentative());
    let v6 = addrs
        .iter()
        .find(|a| a.addr == net("fd00:22::5/128"))
        .expect("v6");
    assert!(v6.is_nodad() && !v6.is_tentative(), "flags {:#x}", v6.flags);
    assert!(f
        .hp
        .pod
        .ip(&["addr", "show", "eth0"])
        .contains("10.22.0.5/32"));

    let e = f
        .pod
        .add_address(idx, net("10.22.0.5/32"), false)
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EEXIST), "{e}");

    f.pod.del_address(idx, net("10.22.0.5/32")).unwrap();
    assert!(!f
        .pod
        .addresses(idx)
        .unwrap()
        .iter()
        .any(|a| a.addr == net("10.22.0.5/32")));
    let e = f.pod.del_address(idx, net("10.22.0.5/32")).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EADDRNOTAVAIL), "{e}");
}

#[test]
fn ipv6_disabled_gives_advice() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = fixture("nl-v6off");
    f.host
        .create_veth("ternh0", "eth0", &f.pod_ns, None, None)
        .unwrap();
    let idx = f.pod.link_by_name("eth0").unwrap().unwrap().index;
    f.hp.pod.set_sysctl("net/ipv6/conf/eth0/disable_ipv6", "1");
    let e = f
        .pod
        .add_address(idx, net("fd00:23::5/128"), true)
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EACCES), "{e}");
    assert!(e.to_string().contains("is IPv6 enabled?"), "{e}");
}

#[test]
fn routed_veth_routes_onlink_default_and_host_routes() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = fixture("nl-route");
    f.host
        .create_veth("ternh0", "eth0", &f.pod_ns, None, None)
        .unwrap();
    let pod_idx = f.pod.link_by_name("eth0").unwrap().unwrap().index;
    let host_idx = f.host.link_by_name("ternh0").unwrap().unwrap().index;
    f.pod.set_up(pod_idx).unwrap();
    f.host.set_up(host_idx).unwrap();
    f.pod
        .add_address(pod_idx, net("10.22.0.5/32"), false)
        .unwrap();

    // Pod: default via 169.254.1.1 dev eth0 onlink (no address covers the gateway).
    let gw: IpAddr = "169.254.1.1".parse().unwrap();
    let mut default = KernelRoute::new(net("0.0.0.0/0"));
    default.gateway = Some(gw);
    default.oif = Some(pod_idx);
    default.onlink = true;
    f.pod.add_route(&default).unwrap();
    // Without onlink the kernel refuses it (ENETUNREACH) and the advice says why.
    let mut not_onlink = KernelRoute::new(net("10.99.0.0/16"));
    not_onlink.gateway = Some(gw);
    not_onlink.oif = Some(pod_idx);
    let e = f.pod.add_route(&not_onlink).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENETUNREACH), "{e}");
    assert!(e.to_string().contains("onlink"), "{e}");

    // Host: /32 to the pod via the host veth, scope link, with a metric.
    let mut host_route = KernelRoute::new(net("10.22.0.5/32"));
    host_route.oif = Some(host_idx);
    host_route.scope = RouteScope::Link;
    host_route.priority = Some(100);
    f.host.add_route(&host_route).unwrap();

    let pod_routes = f.pod.routes(Family::V4).unwrap();
    let d = pod_routes
        .iter()
        .find(|r| r.dst == net("0.0.0.0/0"))
        .expect("default route");
    assert_eq!(d.gateway, Some(gw));
    assert_eq!(d.oif, Some(pod_idx));
    assert!(d.onlink);
    assert_eq!(d.table, Some(254));
    assert!(f
        .hp
        .pod
        .ip(&["route", "show"])
        .contains("default via 169.254.1.1 dev eth0 onlink"));

    let host_routes = f.host.routes(Family::V4).unwrap();
    let h = host_routes
        .iter()
        .find(|r| r.dst == net("10.22.0.5/32"))
        .expect("host route");
    assert_eq!(h.scope, RouteScope::Link);
    assert_eq!(h.priority, Some(100));
    assert_eq!(h.oif, Some(host_idx));

    // Adding it again: EEXIST, reported as such.
    let e = f.host.add_route(&host_route).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EEXIST), "{e}");

    // Delete (scope is a wildcard on delete), then ESRCH.
    let mut del = KernelRoute::new(net("10.22.0.5/32"));
    del.oif = Some(host_idx);
    f.host.del_route(&del).unwrap();
    assert!(!f
        .host
        .routes(Family::V4)
        .unwrap()
        .iter()
        .any(|r| r.dst == net("10.22.0.5/32")));
    let e = f.host.del_route(&del).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ESRCH), "{e}");

    // IPv6 /128 and an onlink default via a link-local gateway, in a non-main table.
    f.pod
        .add_address(pod_idx, net("fd00:22::5/128"), true)
        .unwrap();
    let mut v6 = KernelRoute::new(net("::/0"));
    v6.gateway = Some("fe80::1".parse().unwrap());
    v6.oif = Some(pod_idx);
    v6.table = Some(1000);
    f.pod.add_route(&v6).unwrap();
    assert!(f
        .pod
        .routes(Family::V6)
        .unwrap()
        .iter()
        .all(|r| r.dst != net("::/0")));
    let t = f.pod.routes_in_table(Family::V6, 1000).unwrap();
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t[0].gateway, v6.gateway);
    f.pod.del_route(&v6).unwrap();
    assert!(f.pod.routes_in_table(Family::V6, 1000).unwrap().is_empty());
}

#[test]
fn handle_in_netns_is_usable_from_the_calling_thread_only_for_that_netns() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = fixture("nl-where");
    // The pod handle sees only lo; the host handle does not see pod links.
    f.hp.pod.add_veth("pa", "pb");
    let names: Vec<String> = f.pod.links().unwrap().into_iter().map(|l| l.name).collect();
    assert!(
        names.contains(&"pa".to_string()) && names.contains(&"pb".to_string()),
        "{names:?}"
    );
    assert!(f.host.link_by_name("pa").unwrap().is_none());
}

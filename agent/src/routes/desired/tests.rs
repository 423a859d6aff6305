use super::*;

fn node(name: &str, cidrs: &[&str], ips: &[&str]) -> NodeEntry {
    NodeEntry {
        name: name.into(),
        pod_cidrs: cidrs.iter().map(|s| (*s).to_owned()).collect(),
        internal_ips: ips.iter().map(|s| s.parse().unwrap()).collect(),
        vtep_mac: None,
    }
}

fn vnode(name: &str, cidrs: &[&str], ips: &[&str], mac: Option<&str>) -> NodeEntry {
    let mut n = node(name, cidrs, ips);
    n.vtep_mac = mac.map(str::to_owned);
    n
}

#[test]
fn vxlan_routes_every_other_node_whatever_its_subnet() {
    let nodes = [
        vnode(
            "n1",
            &["10.244.0.0/24", "fd44::/64"],
            &["192.168.7.1", "fd07::1"],
            Some("02:00:00:00:00:01"),
        ),
        // Another subnet: host-gw would skip it, VXLAN routes it, both families.
        vnode(
            "n2",
            &["10.244.1.0/24", "fd44:0:0:1::/64"],
            &["10.9.9.2", "fd09::2"],
            Some("02:00:00:00:00:02"),
        ),
        vnode("n3", &["10.244.2.0/24"], &["10.9.9.3"], None),
        vnode(
            "n4",
            &["10.244.3.0/24"],
            &["fd09::4"],
            Some("02:00:00:00:00:04"),
        ),
        vnode(
            "n5",
            &["10.244.4.0/24"],
            &["10.9.9.5"],
            Some("02:00:00:00:00:02"),
        ),
        vnode("n6", &["10.244.5.0/24"], &["10.9.9.6"], Some("nonsense")),
        vnode(
            "n7",
            &["10.244.1.0/24", "bad"],
            &["10.9.9.7"],
            Some("02:00:00:00:00:07"),
        ),
    ];
    let v = vtep("n1", &nodes).unwrap();
    assert_eq!(v.local, "192.168.7.1".parse::<IpAddr>().unwrap());
    assert_eq!(v.pod_nets.len(), 2);
    let d = desired_vxlan("n1", &nodes, true);
    let r: Vec<String> = d
        .routes
        .routes
        .iter()
        .map(|(k, (gw, n))| format!("{k} via {gw} ({n})"))
        .collect();
    assert_eq!(
        r,
        [
            "10.244.1.0/24 via 10.244.1.0 (n2)",
            "fd44:0:0:1::/64 via fd44:0:0:1:: (n2)",
        ]
    );
    let peers: Vec<String> = d
        .peers
        .iter()
        .map(|(n, p)| format!("{n} {} {}", format_mac(&p.mac), p.underlay))
        .collect();
    assert_eq!(peers, ["n2 02:00:00:00:00:02 10.9.9.2"]);
    assert_eq!(d.neighbours.len(), 2);
    assert!(d.neighbours.values().all(|m| *m == [2, 0, 0, 0, 0, 2]));
    let reasons: Vec<(&str, &str)> = d
        .routes
        .skipped
        .iter()
        .map(|s| (s.node.as_str(), s.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            ("n3", "no_vtep"),
            ("n4", "no_internal_ip"),
            ("n5", "conflict"),
            ("n6", "no_vtep"),
            ("n7", "conflict"),
            ("n7", "bad_cidr"),
        ]
    );
    // n7 keeps no route, so it gets no FDB entry either.
    assert!(!d.peers.contains_key("n7"));
    // Over an IPv6 underlay, n4 is reachable and n2 through its IPv6 InternalIP.
    let d6 = desired_vxlan("n1", &nodes, false);
    assert_eq!(
        d6.peers["n2"].underlay,
        "fd09::2".parse::<IpAddr>().unwrap()
    );
    assert!(d6.peers.contains_key("n4"));
}

#[test]
fn one_route_per_other_node_and_family() {
    let connected: Vec<IpNetwork> = vec![
        "192.168.7.1/24".parse().unwrap(),
        "fd07::1/64".parse().unwrap(),
    ];
    let nodes = [
        node("n1", &["10.244.0.0/24"], &["192.168.7.1"]),
        node(
            "n2",
            &["10.244.1.0/24", "fd44:0:0:1::/64"],
            &["192.168.7.2", "fd07::2"],
        ),
        node("n3", &["10.244.2.7/24"], &["10.9.9.9", "192.168.7.3"]),
        node("n4", &["10.244.3.0/24"], &["10.9.9.4"]),
        node(
            "n5",
            &["10.244.4.0/24", "fd44:0:0:5::/64"],
            &["192.168.7.5"],
        ),
        node("n6", &["10.244.1.0/24"], &["192.168.7.6"]),
        node("n7", &["nonsense"], &["192.168.7.7"]),
    ];
    let d = desired("n1", &nodes, &connected);
    let r: Vec<String> = d
        .routes
        .iter()
        .map(|(k, (gw, n))| format!("{k} via {gw} ({n})"))
        .collect();
    assert_eq!(
        r,
        [
            "10.244.1.0/24 via 192.168.7.2 (n2)",
            "10.244.2.0/24 via 192.168.7.3 (n3)",
            "10.244.4.0/24 via 192.168.7.5 (n5)",
            "fd44:0:0:1::/64 via fd07::2 (n2)",
        ]
    );
    let reasons: Vec<(&str, &str)> = d
        .skipped
        .iter()
        .map(|s| (s.node.as_str(), s.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            ("n4", "not_connected"),
            ("n5", "no_internal_ip"),
            ("n6", "conflict"),
            ("n7", "bad_cidr"),
        ]
    );
    // Its own address is never a gateway.
    assert!(!on_link("192.168.7.1".parse().unwrap(), &connected));
}

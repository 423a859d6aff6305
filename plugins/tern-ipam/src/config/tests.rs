//! Unit tests of the `ipam` section: parsing, canonical ranges, overlap and request rules.

use super::*;
use serde_json::json;

fn conf(ipam: Value) -> NetConf {
    conf_with(json!({"cniVersion": "1.0.0", "name": "net1", "type": "x", "ipam": ipam}))
}

fn conf_with(mut v: Value) -> NetConf {
    if v.get("type").is_none() {
        v["type"] = json!("tern-ipam"); // a netconf names its plugin
    }
    NetConf::parse(serde_json::to_vec(&v).unwrap()).unwrap()
}

fn load(ipam: Value) -> Result<IpamConfig, String> {
    IpamConfig::load(&conf(ipam), &CniArgs::default()).map_err(|e| e.to_string())
}

fn range(subnet: &str) -> RawRange {
    RawRange {
        subnet: Some(subnet.into()),
        ..RawRange::default()
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn defaults_of_a_v4_and_a_v6_range() {
    let r = Range::canonicalize(&range("10.1.2.0/24")).unwrap();
    assert_eq!(
        (r.range_start, r.range_end, r.gateway),
        (ip("10.1.2.1"), ip("10.1.2.254"), ip("10.1.2.1"))
    );
    assert_eq!(r.to_string(), "10.1.2.1-10.1.2.254");
    assert_eq!(r.capacity(), 253);
    let r = Range::canonicalize(&range("2001:db8:1::/64")).unwrap();
    assert_eq!(
        (r.range_start, r.range_end, r.gateway),
        (
            ip("2001:db8:1::1"),
            ip("2001:db8:1::ffff:ffff:ffff:ffff"),
            ip("2001:db8:1::1")
        )
    );
    let r = Range::canonicalize(&range("10.0.0.0/30")).unwrap();
    assert_eq!(
        (r.range_start, r.range_end),
        (ip("10.0.0.1"), ip("10.0.0.2"))
    );
}

#[test]
fn range_validation_messages_are_host_locals() {
    let cases: Vec<(RawRange, &str)> = vec![
        (range("10.0.0.0/31"), "Network 10.0.0.0/31 too small to allocate from"),
        (range("10.0.0.1/32"), "Network 10.0.0.1/32 too small to allocate from"),
        (range("2001:db8::/127"), "Network 2001:db8::/127 too small to allocate from"),
        (
            range("10.1.2.3/24"),
            "Network has host bits set. For a subnet mask of length 24 the network address is 10.1.2.0",
        ),
        (range("10.1.2.0"), "invalid CIDR address: 10.1.2.0"),
        (range("nonsense/8"), "invalid CIDR address: nonsense/8"),
        (RawRange::default(), "IP <nil> not v4 nor v6"),
        (
            RawRange {
                range_start: Some("10.1.3.5".into()),
                ..range("10.1.2.0/24")
            },
            "RangeStart 10.1.3.5 not in network 10.1.2.0/24",
        ),
        (
            RawRange {
                range_end: Some("10.1.3.5".into()),
                ..range("10.1.2.0/24")
            },
            "RangeEnd 10.1.3.5 not in network 10.1.2.0/24",
        ),
        (
            RawRange {
                range_start: Some("10.1.2.50".into()),
                range_end: Some("10.1.2.40".into()),
                ..range("10.1.2.0/24")
            },
            "RangeStart 10.1.2.50 not in network 10.1.2.0/24",
        ),
        (
            RawRange {
                gateway: Some("bogus".into()),
                ..range("10.1.2.0/24")
            },
            "invalid IP address: bogus",
        ),
    ];
    for (raw, want) in cases {
        assert_eq!(Range::canonicalize(&raw).unwrap_err(), want, "{raw:?}");
    }
}

/// case-28: what host-local accepts and then walks out of the range with is refused, naming the
/// field.
#[test]
fn network_broadcast_and_start_past_end_are_refused() {
    let r = |subnet: &str, start: Option<&str>, end: Option<&str>| RawRange {
        range_start: start.map(str::to_owned),
        range_end: end.map(str::to_owned),
        ..range(subnet)
    };
    let top6 = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffc";
    let cases: Vec<(RawRange, String)> = vec![
        (
            r("10.97.8.0/30", Some("10.97.8.3"), None),
            "RangeStart 10.97.8.3 is the broadcast address of 10.97.8.0/30, which is never handed out".into(),
        ),
        (
            r("10.97.8.0/30", None, Some("10.97.8.0")),
            "RangeEnd 10.97.8.0 is the network address of 10.97.8.0/30, which is never handed out".into(),
        ),
        (
            r("255.255.255.252/30", Some("255.255.255.255"), None),
            "RangeStart 255.255.255.255 is the broadcast address of 255.255.255.252/30, which is never handed out".into(),
        ),
        (
            r("10.97.8.0/24", Some("10.97.8.0"), None),
            "RangeStart 10.97.8.0 is the network address of 10.97.8.0/24, which is never handed out".into(),
        ),
        (
            r("10.97.8.0/24", None, Some("10.97.8.255")),
            "RangeEnd 10.97.8.255 is the broadcast address of 10.97.8.0/24, which is never handed out".into(),
        ),
        (
            r(&format!("{top6}/126"), None, Some(top6)),
            format!("RangeEnd {top6} is the network address of {top6}/126, which is never handed out"),
        ),
        (
            r(&format!("{top6}/126"), Some(top6), None),
            format!("RangeStart {top6} is the network address of {top6}/126, which is never handed out"),
        ),
    ];
    for (raw, want) in cases {
        assert_eq!(Range::canonicalize(&raw).unwrap_err(), want, "{raw:?}");
    }
    // IPv6 has no broadcast address: its last address is handed out, as host-local's default
    // rangeEnd has it.
    let last = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let ok = Range::canonicalize(&r(&format!("{top6}/126"), Some(last), None)).unwrap();
    assert_eq!((ok.range_start, ok.range_end), (ip(last), ip(last)));
}

#[test]
fn explicit_start_end_gateway_are_kept() {
    let r = Range::canonicalize(&RawRange {
        range_start: Some("10.1.2.9".into()),
        range_end: Some("10.1.2.20".into()),
        gateway: Some("10.1.2.254".into()),
        ..range("10.1.2.0/24")
    })
    .unwrap();
    assert_eq!(r.to_string(), "10.1.2.9-10.1.2.20");
    assert_eq!(r.gateway, ip("10.1.2.254"));
    assert!(r.contains(ip("10.1.2.9")) && r.contains(ip("10.1.2.20")));
    assert!(!r.contains(ip("10.1.2.8")) && !r.contains(ip("10.1.2.21")));
    assert!(!r.contains(ip("2001:db8::1")));
    assert_eq!(r.capacity(), 12, "the gateway is outside start..end");
    // Empty strings count as absent, as Go decodes them.
    let r = Range::canonicalize(&RawRange {
        range_start: Some(String::new()),
        ..range("10.1.2.0/24")
    })
    .unwrap();
    assert_eq!(r.range_start, ip("10.1.2.1"));
}

#[test]
fn range_set_rules() {
    assert_eq!(RangeSet::canonicalize(&[]).unwrap_err(), "empty range set");
    assert_eq!(
        RangeSet::canonicalize(&[range("10.0.0.0/24"), range("2001:db8::/64")]).unwrap_err(),
        "mixed address families"
    );
    assert_eq!(
        RangeSet::canonicalize(&[range("10.0.0.0/24"), range("10.0.0.0/16")]).unwrap_err(),
        "subnets 10.0.0.1-10.0.0.254 and 10.0.0.1-10.0.255.254 overlap"
    );
    let s = RangeSet::canonicalize(&[range("10.0.0.0/24"), range("10.0.1.0/24")]).unwrap();
    assert_eq!(s.to_string(), "10.0.0.1-10.0.0.254,10.0.1.1-10.0.1.254");
    assert_eq!(
        s.range_for(ip("10.0.1.7")).unwrap().subnet.to_string(),
        "10.0.1.0/24"
    );
    assert_eq!(
        s.range_for(ip("10.0.2.7")).unwrap_err(),
        "10.0.2.7 not in range set 10.0.0.1-10.0.0.254,10.0.1.1-10.0.1.254"
    );
    assert!(
        s.contains(ip("::ffff:10.0.0.9")),
        "IPv4-mapped counts as IPv4"
    );
}

#[test]
fn config_errors_are_host_locals() {
    let cases = [
        (json!({"type": "tern-ipam"}), "no IP ranges specified"),
        (
            json!({"type": "tern-ipam", "ranges": [[]]}),
            "invalid range set 0: empty range set",
        ),
        (
            json!({"subnet": "10.0.0.0/24", "ranges": [[{"subnet": "10.0.0.0/25"}]]}),
            "range set 0 overlaps with 1",
        ),
        (
            json!({"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.1.0.0/33"}]]}),
            "invalid CIDR address: 10.1.0.0/33",
        ),
    ];
    for (ipam, want) in cases {
        assert_eq!(load(ipam.clone()).unwrap_err(), want, "{ipam}");
    }
    let missing = conf_with(json!({"cniVersion": "1.0.0", "name": "n"}));
    let e = IpamConfig::load(&missing, &CniArgs::default()).unwrap_err();
    assert_eq!(e.to_string(), "IPAM config missing 'ipam' key");
    assert_eq!(e.to_cni().code, 7);
    let e = load(json!({"subnet": 5})).unwrap_err();
    assert!(e.starts_with("failed to load netconf: ipam:"), "{e}");
}

#[test]
fn range_order_is_runtime_then_legacy_then_ranges() {
    let c = conf_with(json!({
        "cniVersion": "1.0.0", "name": "n",
        "RuntimeConfig": {"ipRanges": [[{"Subnet": "10.9.0.0/24"}]]},
        "ipam": {
            "type": "tern-ipam",
            "subnet": "10.1.0.0/24",
            "ranges": [[{"subnet": "10.2.0.0/24"}, {"subnet": "10.3.0.0/24"}], [{"subnet": "2001:db8::/64"}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.1.0.254"}],
            "DataDir": "/tmp/x",
            "resolvConf": "/etc/resolv.conf"
        }
    }));
    let c = IpamConfig::load(&c, &CniArgs::default()).unwrap();
    let sets: Vec<String> = c.ranges.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        sets,
        [
            "10.9.0.1-10.9.0.254",
            "10.1.0.1-10.1.0.254",
            "10.2.0.1-10.2.0.254,10.3.0.1-10.3.0.254",
            "2001:db8::1-2001:db8::ffff:ffff:ffff:ffff"
        ]
    );
    assert_eq!(c.routes.len(), 2);
    assert_eq!(c.routes[1].gw, Some(ip("10.1.0.254")));
    assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
    assert_eq!(c.resolv_conf, Some(PathBuf::from("/etc/resolv.conf")));
    let d = load(json!({"subnet": "10.1.0.0/24", "dataDir": ""})).unwrap();
    assert_eq!(d.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
    assert_eq!(d.location().name, "net1");
}

#[test]
fn requested_addresses_from_every_source_in_order() {
    let c = conf_with(json!({
        "cniVersion": "1.0.0", "name": "n",
        "args": {"cni": {"ips": ["10.1.0.7/24", "10.1.0.5"]}},
        "runtimeConfig": {"ips": ["2001:db8::9/64", "10.1.0.5"]},
        "ipam": {"type": "tern-ipam", "subnet": "10.1.0.0/24"}
    }));
    let args = CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.1.0.3, 10.1.0.4/24").unwrap();
    let c = IpamConfig::load(&c, &args).unwrap();
    let want: Vec<IpAddr> = [
        "10.1.0.3",
        "10.1.0.4",
        "10.1.0.7",
        "10.1.0.5",
        "2001:db8::9",
    ]
    .iter()
    .map(|s| ip(s))
    .collect();
    assert_eq!(c.requested, want);
}

#[test]
fn bad_requested_addresses() {
    let c = conf(json!({"subnet": "10.1.0.0/24"}));
    let e = IpamConfig::load(&c, &CniArgs::parse("IP=10.1.0.300").unwrap()).unwrap_err();
    assert_eq!(
        (e.to_string().as_str(), e.to_cni().code),
        ("invalid IP address 10.1.0.300", 4)
    );
    let e =
        IpamConfig::load(&c, &CniArgs::parse("K8S_POD_NAME=x;IP=10.1.0.3").unwrap()).unwrap_err();
    assert!(e.to_string().contains("unknown args"), "{e}");
    let c = conf_with(json!({
        "cniVersion": "1.0.0", "name": "n",
        "runtimeConfig": {"ips": ["nope"]},
        "ipam": {"subnet": "10.1.0.0/24"}
    }));
    let e = IpamConfig::load(&c, &CniArgs::default()).unwrap_err();
    assert!(e.to_string().contains("invalid IP address nope"), "{e}");
}

#[test]
fn use_pod_cidr_expands_in_place() {
    let c = conf(json!({"subnet": "usePodCidr", "ranges": [[{"subnet": "10.50.0.0/24"}]]}));
    let mut calls = 0;
    let cfg = IpamConfig::load_with(&c, &CniArgs::default(), &mut || {
        calls += 1;
        Ok(vec!["10.244.1.0/24".into(), "fd00:244:1::/64".into()])
    })
    .unwrap();
    assert_eq!(calls, 1);
    let sets: Vec<String> = cfg.ranges.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        sets,
        [
            "10.244.1.1-10.244.1.254",
            "fd00:244:1::1-fd00:244:1:0:ffff:ffff:ffff:ffff",
            "10.50.0.1-10.50.0.254"
        ]
    );
    let c = conf(json!({"ranges": [[{"subnet": "usePodCidr"}, {"subnet": "10.50.0.0/24"}]]}));
    let e = IpamConfig::load_with(&c, &CniArgs::default(), &mut || Ok(vec![])).unwrap_err();
    assert!(e.to_string().contains("must be alone"), "{e}");
    let c = conf(json!({"subnet": "usePodCidr"}));
    let e = IpamConfig::load(&c, &CniArgs::default()).unwrap_err();
    assert_eq!(e.to_cni().code, 11);
    let plain = conf(json!({"subnet": "10.50.0.0/24"}));
    IpamConfig::load_with(&plain, &CniArgs::default(), &mut || panic!("not needed")).unwrap();
}

#[test]
fn store_location_ignores_ranges() {
    let c = conf(json!({"subnet": "garbage", "dataDir": "/srv/leases"}));
    assert_eq!(
        StoreLocation::load(&c).unwrap(),
        StoreLocation {
            name: "net1".into(),
            data_dir: "/srv/leases".into()
        }
    );
}

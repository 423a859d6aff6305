//! Results: golden JSON for every version, conversion between every pair, tolerance and refusals.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use serde_json::{json, Value};
use tern_cni::version::Family;
use tern_cni::{CniResult, Dns, Interface, IpConfig, Route, Version};

fn sample() -> CniResult {
    CniResult {
        interfaces: vec![
            Interface {
                name: "tern0123456789a".into(),
                mac: Some("ee:ee:ee:ee:ee:ee".into()),
                mtu: Some(1500),
                ..Default::default()
            },
            Interface {
                name: "eth0".into(),
                mac: Some("0a:58:0a:63:00:02".into()),
                mtu: Some(1500),
                sandbox: Some("/run/netns/pod".into()),
                ..Default::default()
            },
        ],
        ips: vec![
            IpConfig {
                interface: Some(1),
                address: "10.99.0.2/24".parse().unwrap(),
                gateway: Some("10.99.0.1".parse().unwrap()),
            },
            IpConfig {
                interface: Some(1),
                address: "fd00::2/64".parse().unwrap(),
                gateway: None,
            },
        ],
        routes: vec![Route {
            priority: Some(100),
            ..Route::new(
                "0.0.0.0/0".parse().unwrap(),
                Some("169.254.1.1".parse().unwrap()),
            )
        }],
        dns: Dns::default(),
    }
}

fn golden(v: Version) -> Value {
    let v0 = v.family() == Family::V0;
    let v11 = v == Version::V1_1_0;
    let mut host = json!({"name": "tern0123456789a", "mac": "ee:ee:ee:ee:ee:ee"});
    let mut pod = json!({"name": "eth0", "mac": "0a:58:0a:63:00:02"});
    if v11 {
        host["mtu"] = json!(1500);
        pod["mtu"] = json!(1500);
    }
    pod["sandbox"] = json!("/run/netns/pod");
    let mut ip4 = json!({});
    let mut ip6 = json!({});
    if v0 {
        ip4["version"] = json!("4");
        ip6["version"] = json!("6");
    }
    ip4["interface"] = json!(1);
    ip4["address"] = json!("10.99.0.2/24");
    ip4["gateway"] = json!("10.99.0.1");
    ip6["interface"] = json!(1);
    ip6["address"] = json!("fd00::2/64");
    let mut route = json!({"dst": "0.0.0.0/0", "gw": "169.254.1.1"});
    if v11 {
        route["priority"] = json!(100);
    }
    let mut out = json!({
        "cniVersion": v.as_str(),
        "interfaces": [host, pod],
        "ips": [ip4, ip6],
        "routes": [route],
    });
    if v0 {
        out["dns"] = json!({});
    }
    out
}

#[test]
fn prints_golden_json_for_every_version() {
    for v in Version::ALL {
        let printed = sample().to_json(v);
        assert_eq!(printed, golden(v), "version {v}");
        // Key order is the reference library's.
        assert_eq!(
            serde_json::to_string(&printed).unwrap(),
            serde_json::to_string(&golden(v)).unwrap(),
            "version {v}"
        );
    }
}

/// An IPAM result with every field set, 1.1.0 route extras and DNS included.
fn ipam_sample() -> CniResult {
    CniResult {
        interfaces: Vec::new(),
        ips: vec![IpConfig {
            interface: None,
            address: "10.99.0.2/24".parse().unwrap(),
            gateway: Some("10.99.0.1".parse().unwrap()),
        }],
        routes: vec![Route {
            mtu: Some(1400),
            adv_mss: Some(1360),
            table: Some(7),
            scope: Some(0),
            ..Route::new("10.0.0.0/8".parse().unwrap(), None)
        }],
        dns: Dns {
            nameservers: vec!["10.96.0.10".into()],
            domain: Some(String::new()),
            search: vec!["svc.cluster.local".into()],
            options: Vec::new(),
        },
    }
}

#[test]
fn printed_in_is_what_parsing_the_printed_result_gives() {
    for r in [sample(), ipam_sample(), CniResult::default()] {
        assert!(r.interfaces_indexed());
        for v in Version::ALL {
            let (read_back, _) = CniResult::from_json(&r.to_json(v)).unwrap();
            assert_eq!(r.clone().printed_in(v), read_back, "version {v}");
        }
    }
    let mut dangling = ipam_sample();
    dangling.ips[0].interface = Some(0);
    assert!(!dangling.interfaces_indexed());
    assert!(CniResult::from_json(&dangling.to_json(Version::LATEST)).is_err());
}

/// DNS that counts as empty (an empty `domain` and nothing else) is not printed in 1.x, so it
/// reads back as no DNS at all: `printed_in` must give that too, not keep `domain: ""`.
#[test]
fn printed_in_drops_dns_that_1x_does_not_print() {
    let mut r = ipam_sample();
    r.dns = Dns {
        domain: Some(String::new()),
        ..Dns::default()
    };
    assert!(r.dns.is_empty());
    for v in Version::ALL {
        let (read_back, _) = CniResult::from_json(&r.to_json(v)).unwrap();
        assert_eq!(r.clone().printed_in(v), read_back, "version {v}");
    }
}

#[test]
fn converts_between_every_pair_of_versions() {
    for from in Version::ALL {
        for to in Version::ALL {
            let (parsed, ver) = CniResult::from_json(&golden(from)).unwrap();
            assert_eq!(ver, Some(from));
            let mut expected = golden(to);
            // What `from` could not carry is gone for good.
            if from < Version::V1_1_0 && to == Version::V1_1_0 {
                for i in expected["interfaces"].as_array_mut().unwrap() {
                    i.as_object_mut().unwrap().remove("mtu");
                }
                expected["routes"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("priority");
            }
            assert_eq!(parsed.to_json(to), expected, "{from} -> {to}");
        }
    }
}

#[test]
fn tolerates_stray_version_in_1x_and_nulls() {
    let v = json!({
        "cniVersion": "1.0.0",
        "interfaces": null,
        "ips": [{"version": "4", "address": "10.1.0.5/24"}],
        "routes": null,
        "dns": {"nameservers": null},
        "extra": true
    });
    let (r, _) = CniResult::from_json(&v).unwrap();
    assert_eq!(r.ips[0].address.to_string(), "10.1.0.5/24");
    assert!(r.interfaces.is_empty() && r.routes.is_empty() && r.dns.is_empty());
}

#[test]
fn rejects_bad_results() {
    let cases = [
        json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.2/24"}}),
        json!({"ips": [{"address": "not-an-ip"}]}),
        json!({"ips": [{"version": "6", "address": "10.0.0.2/24"}]}),
        json!({"ips": [{"interface": 3, "address": "10.0.0.2/24"}]}),
        json!({"routes": [{"gw": "10.0.0.1"}]}),
    ];
    for c in cases {
        assert!(CniResult::from_json(&c).is_err(), "{c}");
    }
}

#[test]
fn prev_result_of_any_supported_version_is_converted_to_the_configs() {
    for prev_v in Version::ALL {
        for config in Version::ALL {
            let r = CniResult::from_prev_result(&golden(prev_v), config)
                .unwrap_or_else(|e| panic!("{prev_v} in a {config} config: {e}"));
            let (direct, _) = CniResult::from_json(&golden(prev_v)).unwrap();
            assert_eq!(r, direct, "{prev_v} in {config}");
            // Printed in the config's version, it is that version's golden result less what the
            // older of the two could not carry.
            let out = r.to_json(config);
            assert_eq!(out["cniVersion"], config.as_str());
            let has_version = out["ips"][0].get("version").is_some();
            assert_eq!(
                has_version,
                config.family() == Family::V0,
                "{prev_v} -> {config}"
            );
        }
    }
    for absent in [json!(null), json!("")] {
        let mut no_version = golden(Version::V1_0_0);
        no_version["cniVersion"] = absent.clone();
        for config in Version::ALL {
            let r = CniResult::from_prev_result(&no_version, config).unwrap();
            assert_eq!(r.ips.len(), 2, "cniVersion {absent} in {config}");
        }
    }
    let mut removed = golden(Version::V0_4_0);
    removed.as_object_mut().unwrap().remove("cniVersion");
    assert!(CniResult::from_prev_result(&removed, Version::V1_1_0).is_ok());
}

#[test]
fn prev_result_of_an_unsupported_version_or_shape_is_refused() {
    for v in ["0.1.0", "0.2.0", "9.9.9", "1.0", "v1.0.0"] {
        let mut prev = golden(Version::V1_0_0);
        prev["cniVersion"] = json!(v);
        let e = CniResult::from_prev_result(&prev, Version::V1_0_0).unwrap_err();
        assert_eq!(e.code, 1, "{v}: {e}");
    }
    for bad in [
        json!([]),
        json!("x"),
        json!(1),
        json!(true),
        json!([{"ips": []}]),
    ] {
        let e = CniResult::from_prev_result(&bad, Version::V1_0_0).unwrap_err();
        assert_eq!(e.code, 6, "{bad}: {e}");
    }
    let mut prev = golden(Version::V1_0_0);
    prev["cniVersion"] = json!(1);
    assert_eq!(
        CniResult::from_prev_result(&prev, Version::V1_0_0)
            .unwrap_err()
            .code,
        6
    );
}

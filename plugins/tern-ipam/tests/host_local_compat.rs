//! tern-ipam side by side with Debian's host-local (1.1.1, so cniVersion ≤ 1.0.0) on the same
//! kind of config: the same sequence of operations gives the same addresses, the same errors and
//! the same files, whether run by host-local alone, tern-ipam alone, or the two alternating on one
//! data dir. Leases written by one are seen and released by the other.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{add, add_ok, addresses, del, outcome, Call, Ipam, Net};
use serde_json::{json, Value};

/// One step of a scenario: `A id` ADD, `D id` DEL, `R id args` ADD with `CNI_ARGS`.
fn run_step(ipam: Ipam, step: &str, conf: &Value) -> Value {
    let parts: Vec<&str> = step.splitn(3, ' ').collect();
    let o = match parts.as_slice() {
        ["A", id] => add(ipam, id, conf),
        ["D", id] => del(ipam, id, conf),
        ["R", id, args] => Call::new(ipam, "ADD", id).args(args).run(conf),
        _ => panic!("bad step {step}"),
    };
    outcome(&o)
}

/// Runs `steps` with host-local alone, tern-ipam alone, and alternating, each on its own data
/// dir, and asserts identical outcomes and identical files.
fn same_as_host_local(what: &str, ipam: Value, steps: &[&str]) {
    let nets = [Net::new(), Net::new(), Net::new()];
    let confs: Vec<Value> = nets.iter().map(|n| n.conf("1.0.0", ipam.clone())).collect();
    for (i, step) in steps.iter().enumerate() {
        let alternate = if i % 2 == 0 {
            Ipam::HostLocal
        } else {
            Ipam::Tern
        };
        let reference = run_step(Ipam::HostLocal, step, &confs[0]);
        let ours = run_step(Ipam::Tern, step, &confs[1]);
        let mixed = run_step(alternate, step, &confs[2]);
        assert_eq!(
            ours, reference,
            "{what}: step {i} `{step}`: tern-ipam vs host-local"
        );
        assert_eq!(
            mixed, reference,
            "{what}: step {i} `{step}` by {alternate:?} on a shared dir vs host-local alone"
        );
    }
    let files = |n: &Net| {
        let mut v = n.leases();
        for f in n.files() {
            if f.starts_with("last_reserved_ip.") {
                v.push((
                    f.clone(),
                    std::fs::read_to_string(n.dir().join(&f)).unwrap(),
                ));
            }
        }
        v
    };
    assert_eq!(
        files(&nets[1]),
        files(&nets[0]),
        "{what}: files, tern-ipam vs host-local"
    );
    assert_eq!(
        files(&nets[2]),
        files(&nets[0]),
        "{what}: files, alternating vs host-local"
    );
}

const ORDER_STEPS: &[&str] = &[
    "A c0", "A c1", "A c2", "A c3", "A c4", "A c5", "A c6", "A c7", "D c2", "D c4", "D c4", "A c8",
    "A c8", "A c9", "A c10", "D c0", "D c8", "A c11", "A c12",
];

#[test]
fn allocation_order_exhaustion_and_reuse_match_host_local() {
    if tern_testkit::root::skip() {
        return;
    }
    let resolv = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        resolv.path(),
        "# test\nnameserver 10.0.0.53\nnameserver fd00::53\ndomain example.test\n\
         search a.example b.example\noptions ndots:2 rotate\n",
    )
    .unwrap();
    let configs = [
        (
            "one /29 with routes and resolvConf",
            json!({"subnet": "10.5.0.0/29", "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.5.0.6"}],
                   "resolvConf": resolv.path()}),
        ),
        (
            "rangeStart/rangeEnd with the gateway inside",
            json!({"subnet": "10.6.0.0/24", "rangeStart": "10.6.0.10", "rangeEnd": "10.6.0.15", "gateway": "10.6.0.12"}),
        ),
        (
            "two ranges in a set, then an IPv6 set",
            json!({"ranges": [
                [{"subnet": "10.7.0.0/30"}, {"subnet": "10.7.1.0/29", "rangeStart": "10.7.1.4"}],
                [{"subnet": "fd07::/125"}]
            ]}),
        ),
        (
            "IPv6 only",
            json!({"ranges": [[{"subnet": "fd08::/124", "rangeEnd": "fd08::6"}]]}),
        ),
    ];
    for (what, ipam) in configs {
        same_as_host_local(what, ipam, ORDER_STEPS);
    }
}

#[test]
fn requested_addresses_match_host_local() {
    if tern_testkit::root::skip() {
        return;
    }
    let ipam = json!({"ranges": [[{"subnet": "10.9.0.0/28"}], [{"subnet": "fd09::/120"}]]});
    same_as_host_local(
        "CNI_ARGS IP=",
        ipam.clone(),
        &[
            "R c0 IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.9.0.7",
            "R c1 IP=10.9.0.7",
            "R c2 IP=10.9.0.1",
            "R c3 IP=10.99.0.1",
            "A c5",
            "R c7 K8S_POD_NAME=p",
            "D c0",
            "R c9 IP=10.9.0.7",
        ],
    );
    // Upstream host-local (after Debian's 1.1.1) takes a comma-separated list and `ip/prefix` in
    // `IP=`; tern-ipam follows upstream.
    let n = Net::new();
    let c = n.conf("1.0.0", ipam.clone());
    let o = Call::new(Ipam::Tern, "ADD", "c1")
        .args("IP=10.9.0.9/28, fd09::99")
        .run(&c);
    assert_eq!(
        addresses(&o),
        ["10.9.0.9/28", "fd09::99/120"],
        "{}",
        o.describe()
    );
    let o = Call::new(Ipam::Tern, "ADD", "c2")
        .args("IP=10.9.0.300")
        .run(&c);
    assert_eq!(
        (o.error_code(), o.error_msg()),
        (Some(4), Some("invalid IP address 10.9.0.300"))
    );
    let o = Call::new(Ipam::Tern, "ADD", "c3")
        .args("IP=10.9.0.10,10.9.0.11")
        .run(&c);
    assert_eq!(
        o.error_msg(),
        Some("failed to allocate all requested IPs: 10.9.0.11"),
        "two requested in one set: the first is taken, the rest reported"
    );
    assert_eq!(
        n.leases().len(),
        2,
        "the failed ADD released what it reserved"
    );
    // args.cni.ips and runtimeConfig.ips go through the config, not CNI_ARGS.
    for key in ["args", "runtimeConfig"] {
        let n_ref = Net::new();
        let n_ours = Net::new();
        let mut c_ref = n_ref.conf("1.0.0", ipam.clone());
        let mut c_ours = n_ours.conf("1.0.0", ipam.clone());
        let ips = json!(["10.9.0.5/28", "fd09::5"]);
        let value = if key == "args" {
            json!({"cni": {"ips": ips}})
        } else {
            json!({"ips": ips})
        };
        c_ref[key] = value.clone();
        c_ours[key] = value;
        let r = add(Ipam::HostLocal, "c1", &c_ref);
        let o = add(Ipam::Tern, "c1", &c_ours);
        assert_eq!(outcome(&o), outcome(&r), "{key}");
        assert_eq!(addresses(&o), ["10.9.0.5/28", "fd09::5/120"], "{key}");
        let r = add(Ipam::HostLocal, "c2", &c_ref);
        let o = add(Ipam::Tern, "c2", &c_ours);
        assert_eq!(outcome(&o), outcome(&r), "{key}: taken");
    }
}

#[test]
fn ip_ranges_capability_matches_host_local() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = [Net::new(), Net::new()];
    let mut c: Vec<Value> = n
        .iter()
        .map(|n| n.conf("1.0.0", json!({"subnet": "10.10.0.0/24"})))
        .collect();
    for c in &mut c {
        c["capabilities"] = json!({"ipRanges": true});
        c["runtimeConfig"] =
            json!({"ipRanges": [[{"subnet": "10.11.0.0/24", "rangeStart": "10.11.0.100"}]]});
    }
    let r = add(Ipam::HostLocal, "c1", &c[0]);
    let o = add(Ipam::Tern, "c1", &c[1]);
    assert_eq!(outcome(&o), outcome(&r));
    assert_eq!(addresses(&o), ["10.11.0.100/24", "10.10.0.2/24"]);
    assert!(n[1].dir().join("last_reserved_ip.1").is_file());
}

#[test]
fn validation_messages_match_host_local() {
    if tern_testkit::root::skip() {
        return;
    }
    let bad = [
        json!({}),
        json!({"ranges": [[]]}),
        json!({"ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "fd00::/64"}]]}),
        json!({"ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "10.1.0.0/25"}]]}),
        json!({"subnet": "10.1.0.0/24", "ranges": [[{"subnet": "10.1.0.128/25"}]]}),
        json!({"subnet": "10.1.0.0/31"}),
        json!({"subnet": "fd00::/127"}),
        json!({"subnet": "10.1.0.3/24"}),
        json!({"subnet": "10.1.0.0/24", "rangeStart": "10.1.1.1"}),
        json!({"subnet": "10.1.0.0/24", "rangeEnd": "10.2.0.1"}),
        json!({"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.50", "rangeEnd": "10.1.0.40"}),
        json!({"subnet": "10.1.0.0/33"}),
        json!({"ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.1.0.0/16"}]]}),
    ];
    for ipam in bad {
        let n = Net::new();
        let c = n.conf("1.0.0", ipam.clone());
        let r = add(Ipam::HostLocal, "c1", &c);
        let o = add(Ipam::Tern, "c1", &c);
        assert!(!r.success() && !o.success(), "{ipam}");
        assert_eq!(o.error_msg(), r.error_msg(), "{ipam}");
        assert_eq!(o.error_code(), Some(7), "{ipam}: invalid config is code 7");
        assert!(n.leases().is_empty());
    }
    let no_ipam = json!({"cniVersion": "1.0.0", "name": "n", "type": "ptp"});
    let r = add(Ipam::HostLocal, "c1", &no_ipam);
    let o = add(Ipam::Tern, "c1", &no_ipam);
    assert_eq!(o.error_msg(), r.error_msg());
    assert_eq!(o.error_msg(), Some("IPAM config missing 'ipam' key"));
}

#[test]
fn results_are_identical_in_every_version_host_local_speaks() {
    if tern_testkit::root::skip() {
        return;
    }
    let resolv = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(resolv.path(), "nameserver 10.0.0.53\nsearch x.test\n").unwrap();
    for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0"] {
        for with_dns in [false, true] {
            let mut ipam = json!({"ranges": [[{"subnet": "10.12.0.0/24"}], [{"subnet": "fd12::/64"}]],
                                  "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd12::1"}]});
            if with_dns {
                ipam["resolvConf"] = json!(resolv.path());
            }
            let n = [Net::new(), Net::new()];
            let r = add(Ipam::HostLocal, "c1", &n[0].conf(v, ipam.clone()));
            let o = add(Ipam::Tern, "c1", &n[1].conf(v, ipam));
            assert!(r.success(), "{}", r.describe());
            // Debian's library prints `"dns": {}` in 1.0.0 results too; upstream omits it, as
            // tern does. Otherwise the JSON is identical, `ips[].version` and all.
            assert_eq!(outcome(&o), outcome(&r), "cniVersion {v}, dns {with_dns}");
            assert_eq!(o.json.as_ref().unwrap()["cniVersion"], v);
            assert_eq!(n[1].leases(), n[0].leases());
        }
    }
}

#[test]
fn lease_of_host_local_is_seen_and_released_by_tern_ipam() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = Net::new();
    let c = n.conf("1.0.0", json!({"subnet": "10.13.0.0/24"}));
    assert_eq!(add_ok(Ipam::HostLocal, "hl", &c), ["10.13.0.2/24"]);
    let dup = add(Ipam::Tern, "hl", &c);
    assert_eq!(dup.error_code(), Some(102), "{}", dup.describe());
    assert_eq!(
        dup.error_msg(),
        Some("failed to allocate for range 0: 10.13.0.2 has been allocated to hl, duplicate allocation is not allowed")
    );
    assert_eq!(
        add_ok(Ipam::Tern, "t1", &c),
        ["10.13.0.3/24"],
        "the next address, after host-local's"
    );
    let check = Call::new(Ipam::Tern, "CHECK", "hl").run(&c);
    assert!(check.success(), "{}", check.describe());
    let other_if = Call::new(Ipam::Tern, "ADD", "hl").ifname("net1").run(&c);
    assert_eq!(
        addresses(&other_if),
        ["10.13.0.4/24"],
        "another ifname of the same container"
    );
    let d = del(Ipam::Tern, "hl", &c);
    assert!(d.success() && d.stdout.is_empty(), "{}", d.describe());
    assert_eq!(
        n.leases(),
        [
            ("10.13.0.3".to_owned(), "t1\r\neth0".to_owned()),
            ("10.13.0.4".to_owned(), "hl\r\nnet1".to_owned())
        ],
        "only hl/eth0 released"
    );
    let check = Call::new(Ipam::Tern, "CHECK", "hl").run(&c);
    assert_eq!(
        check.error_msg(),
        Some("tern-ipam: Failed to find address added by container hl")
    );
    // A legacy lease (container ID only), as host-local before 0.8 wrote them.
    std::fs::write(n.dir().join("10.13.0.9"), "legacy-id").unwrap();
    let dup = add(Ipam::Tern, "legacy-id", &c);
    assert!(dup
        .error_msg()
        .unwrap_or_default()
        .contains("10.13.0.9 has been allocated to legacy-id"));
    assert!(del(Ipam::Tern, "legacy-id", &c).success());
    assert!(!n.dir().join("10.13.0.9").exists(), "legacy lease released");
}

#[test]
fn lease_of_tern_ipam_is_seen_and_released_by_host_local() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = Net::new();
    let c = n.conf("1.0.0", json!({"subnet": "10.14.0.0/24"}));
    assert_eq!(add_ok(Ipam::Tern, "t", &c), ["10.14.0.2/24"]);
    let dup = add(Ipam::HostLocal, "t", &c);
    assert!(
        dup.error_msg()
            .unwrap_or_default()
            .contains("10.14.0.2 has been allocated to t, duplicate allocation is not allowed"),
        "{}",
        dup.describe()
    );
    assert_eq!(add_ok(Ipam::HostLocal, "h", &c), ["10.14.0.3/24"]);
    let check = Call::new(Ipam::HostLocal, "CHECK", "t").run(&c);
    assert!(check.success(), "{}", check.describe());
    let r = add(Ipam::HostLocal, "x", &{
        let mut c = c.clone();
        c["args"] = json!({"cni": {"ips": ["10.14.0.2"]}});
        c
    });
    assert!(r
        .error_msg()
        .unwrap_or_default()
        .contains("requested IP address 10.14.0.2 is not available"));
    assert!(del(Ipam::HostLocal, "t", &c).success());
    assert_eq!(
        n.leases(),
        [("10.14.0.3".to_owned(), "h\r\neth0".to_owned())]
    );
    // CHECK by the other plugin agrees the lease is gone.
    let check = Call::new(Ipam::Tern, "CHECK", "t").run(&c);
    assert!(!check.success());
    let check = Call::new(Ipam::HostLocal, "CHECK", "t").run(&c);
    assert!(!check.success());
}

#[test]
fn parallel_adds_of_both_plugins_on_one_dir_get_distinct_addresses() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = Net::new();
    let c = n.conf("1.0.0", json!({"subnet": "10.15.0.0/24"}));
    let handles: Vec<_> = (0..32)
        .map(|i| {
            let ipam = if i % 2 == 0 {
                Ipam::Tern
            } else {
                Ipam::HostLocal
            };
            let id = format!("p{i}");
            let call = Call::new(ipam, "ADD", &id).plugin_call(&c);
            std::thread::spawn(move || (id, call.run().expect("run")))
        })
        .collect();
    let mut got = std::collections::BTreeSet::new();
    for h in handles {
        let (id, o) = h.join().unwrap();
        assert!(o.success(), "{id}: {}", o.describe());
        for a in addresses(&o) {
            assert!(got.insert(a.clone()), "{a} handed out twice");
        }
    }
    assert_eq!(got.len(), 32);
    assert_eq!(n.leases().len(), 32);
}

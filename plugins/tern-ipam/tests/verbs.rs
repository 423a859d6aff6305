//! tern-ipam alone, run as a runtime runs it: every cniVersion from 0.3.0 to 1.1.0, STATUS and GC
//! (1.1.0), DEL idempotence, CHECK. Parallel ADDs and crash safety: `concurrency.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;

use common::{add, add_ok, del, Call, Ipam, Net};
use serde_json::{json, Value};

const VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

fn run(cmd: &str, id: &str, conf: &Value) -> tern_testkit::exec::RunOutput {
    Call::new(Ipam::Tern, cmd, id).run(conf)
}

#[test]
fn every_version_add_check_del() {
    if tern_testkit::root::skip() {
        return;
    }
    for v in VERSIONS {
        let n = Net::new();
        let c = n.conf(
            v,
            json!({"subnet": "10.20.0.0/24", "routes": [{"dst": "0.0.0.0/0"}]}),
        );
        let o = add(Ipam::Tern, "c1", &c);
        assert!(o.success(), "{v}: {}", o.describe());
        let j = o.json.clone().unwrap();
        assert_eq!(j["cniVersion"], v);
        assert_eq!(j["ips"][0]["address"], "10.20.0.2/24");
        assert_eq!(j["ips"][0]["gateway"], "10.20.0.1");
        assert_eq!(
            j["ips"][0].get("version").is_some(),
            v.starts_with("0."),
            "{v}"
        );
        assert_eq!(j["routes"], json!([{"dst": "0.0.0.0/0"}]));
        let check = run("CHECK", "c1", &c);
        if v < "0.4.0" {
            assert_eq!(check.error_code(), Some(1), "{v}: CHECK needs 0.4.0");
        } else {
            assert!(
                check.success() && check.stdout.is_empty(),
                "{v}: {}",
                check.describe()
            );
            let missing = run("CHECK", "c2", &c);
            assert_eq!(missing.error_code(), Some(102));
            assert_eq!(
                missing.error_msg(),
                Some("tern-ipam: Failed to find address added by container c2")
            );
        }
        let d = del(Ipam::Tern, "c1", &c);
        assert!(d.success() && d.stdout.is_empty(), "{v}: {}", d.describe());
        assert!(n.leases().is_empty());
        assert!(del(Ipam::Tern, "c1", &c).success(), "{v}: repeated DEL");
    }
}

#[test]
fn check_compares_prev_result_with_the_leases() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = Net::new();
    let mut c = n.conf("1.1.0", json!({"subnet": "10.21.0.0/24"}));
    assert_eq!(add_ok(Ipam::Tern, "c1", &c), ["10.21.0.2/24"]);
    c["prevResult"] = json!({"cniVersion": "1.1.0", "ips": [{"address": "10.21.0.2/24"}, {"address": "192.168.1.5/24"}]});
    let o = run("CHECK", "c1", &c);
    assert!(
        o.success(),
        "an address outside our ranges is not ours to check: {}",
        o.describe()
    );
    c["prevResult"] = json!({"cniVersion": "1.1.0", "ips": [{"address": "10.21.0.7/24"}]});
    let o = run("CHECK", "c1", &c);
    assert_eq!(
        o.error_msg(),
        Some(
            "tern-ipam: address 10.21.0.7 of prevResult is not leased to container c1 ifname eth0"
        )
    );
}

#[test]
fn del_is_idempotent_and_needs_no_netns_nor_valid_ranges() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = Net::new();
    let c = n.conf("1.0.0", json!({"subnet": "10.22.0.0/24"}));
    let d = del(Ipam::Tern, "never-added", &c);
    assert!(d.success(), "{}", d.describe());
    assert!(
        !n.dir().exists(),
        "DEL does not create the network directory"
    );
    add_ok(Ipam::Tern, "c1", &c);
    let mut broken = c.clone();
    broken["ipam"]["subnet"] = json!("not a subnet");
    let d = Call::new(Ipam::Tern, "DEL", "c1")
        .plugin_call(&broken)
        .unset("CNI_NETNS")
        .run()
        .unwrap();
    assert!(d.success(), "{}", d.describe());
    assert!(n.leases().is_empty());
    assert!(
        n.dir().join("last_reserved_ip.0").is_file(),
        "DEL keeps the cursor"
    );
    assert!(n.dir().join("lock").is_file());
}

#[test]
fn status_at_1_1_0() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = Net::new();
    let c = n.conf("1.1.0", json!({"subnet": "10.23.0.0/30"}));
    let o = run("STATUS", "x", &c);
    assert!(o.success() && o.stdout.is_empty(), "{}", o.describe());
    assert!(
        n.dir().join("lock").is_file(),
        "STATUS prepared the directory"
    );
    assert_eq!(n.files(), ["lock"], "the write probe is removed");
    // A /30 has one address besides the gateway.
    add_ok(Ipam::Tern, "c1", &c);
    let o = run("STATUS", "x", &c);
    assert_eq!(o.error_code(), Some(50), "{}", o.describe());
    assert_eq!(
        o.error_msg(),
        Some("no IP addresses available in range set: 10.23.0.1-10.23.0.2")
    );
    assert!(del(Ipam::Tern, "c1", &c).success());
    assert!(run("STATUS", "x", &c).success());

    // dataDir below a regular file: cannot be created.
    let file = n.data_dir().join("a-file");
    fs::write(&file, "").unwrap();
    let mut bad = c.clone();
    bad["ipam"]["dataDir"] = json!(file.join("leases"));
    let o = run("STATUS", "x", &bad);
    assert_eq!(o.error_code(), Some(50), "{}", o.describe());
    assert!(
        o.error_msg()
            .unwrap()
            .starts_with("data directory unusable: create directory"),
        "{}",
        o.describe()
    );
    let o = add(Ipam::Tern, "c1", &bad);
    assert_eq!(
        o.error_code(),
        Some(104),
        "ADD fails the same way: {}",
        o.describe()
    );

    let o = run("STATUS", "x", &n.conf("1.1.0", json!({})));
    assert_eq!(
        (o.error_code(), o.error_msg()),
        (Some(7), Some("no IP ranges specified"))
    );
    let o = run(
        "STATUS",
        "x",
        &n.conf("1.0.0", json!({"subnet": "10.23.0.0/30"})),
    );
    assert_eq!(o.error_code(), Some(1), "STATUS needs 1.1.0");
}

/// Writes leases as host-local and old host-local would, and one of tern-ipam.
fn seed(n: &Net) -> Value {
    let c = n.conf("1.1.0", json!({"subnet": "10.24.0.0/24"}));
    for (id, ifname) in [("c1", "eth0"), ("c1", "eth1"), ("c2", "eth0")] {
        assert!(Call::new(Ipam::Tern, "ADD", id)
            .ifname(ifname)
            .run(&c)
            .success());
    }
    fs::write(n.dir().join("10.24.0.50"), "old1").unwrap();
    fs::write(n.dir().join("10.24.0.51"), "old2\n").unwrap();
    fs::write(n.dir().join("fd24::5"), "c3\r\neth0").unwrap();
    fs::write(n.dir().join("notes.txt"), "c9\r\neth0").unwrap();
    c
}

fn gc(c: &Value, valid: Option<Value>) -> tern_testkit::exec::RunOutput {
    let mut c = c.clone();
    if let Some(v) = valid {
        c["cni.dev/valid-attachments"] = v;
    }
    tern_testkit::exec::PluginCall::new(Ipam::Tern.path().to_str().unwrap(), "GC")
        .path("/nonexistent")
        .netconf(&c)
        .unwrap()
        .run()
        .unwrap()
}

#[test]
fn gc_at_1_1_0() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = Net::new();
    let c = seed(&n);
    let before = n.files();

    let o = gc(&c, None);
    assert!(o.success() && o.stdout.is_empty(), "{}", o.describe());
    assert_eq!(n.files(), before, "no list: nothing removed");

    let o = gc(
        &c,
        Some(
            json!([{"containerID": "c1", "ifname": "eth0"}, {"containerID": "old1", "ifname": "eth0"}, {"containerID": "c3", "ifname": "eth0"}]),
        ),
    );
    assert!(o.success() && o.stdout.is_empty(), "{}", o.describe());
    assert_eq!(
        n.leases(),
        [
            ("10.24.0.2".to_owned(), "c1\r\neth0".to_owned()),
            ("10.24.0.50".to_owned(), "old1".to_owned()),
            ("fd24::5".to_owned(), "c3\r\neth0".to_owned()),
            ("notes.txt".to_owned(), "c9\r\neth0".to_owned()),
        ],
        "c1/eth1, c2/eth0 and legacy old2 released; legacy old1 kept for a valid c1… of its ID"
    );
    let o = gc(&c, Some(json!([])));
    assert!(o.success(), "{}", o.describe());
    assert_eq!(
        n.files(),
        ["last_reserved_ip.0", "lock", "notes.txt"],
        "empty list: every lease released; lock, cursor and non-lease files kept"
    );
    let o = gc(
        &n.conf("1.0.0", json!({"subnet": "10.24.0.0/24"})),
        Some(json!([])),
    );
    assert_eq!(o.error_code(), Some(1), "GC needs 1.1.0");
    let fresh = Net::new();
    let o = gc(
        &fresh.conf("1.1.0", json!({"subnet": "10.24.0.0/24"})),
        Some(json!([])),
    );
    assert!(o.success(), "{}", o.describe());
    assert!(!fresh.dir().exists(), "GC does not create the directory");
}

#[test]
fn gc_releases_host_local_leases_too() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = Net::new();
    let c10 = n.conf("1.0.0", json!({"subnet": "10.25.0.0/24"}));
    add_ok(Ipam::HostLocal, "h1", &c10);
    add_ok(Ipam::HostLocal, "h2", &c10);
    let c = n.conf("1.1.0", json!({"subnet": "10.25.0.0/24"}));
    let o = gc(&c, Some(json!([{"containerID": "h2", "ifname": "eth0"}])));
    assert!(o.success(), "{}", o.describe());
    assert_eq!(
        n.leases(),
        [("10.25.0.3".to_owned(), "h2\r\neth0".to_owned())]
    );
    assert_eq!(
        add_ok(Ipam::HostLocal, "h3", &c10),
        ["10.25.0.4/24"],
        "host-local goes on after GC"
    );
}

/// A FIFO or a file of bytes that are not UTF-8 where a lease should be: ADD and DEL go on
/// without waiting for the FIFO's writer (they hung in open(2) for good, holding the lock), and
/// GC releases both, as it does an empty lease (the non-UTF-8 one was kept for good).
#[test]
fn fifo_and_non_utf8_leases_neither_hang_nor_stay() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = Net::new();
    let c = n.conf("1.1.0", json!({"subnet": "10.26.0.0/24"}));
    fs::create_dir_all(n.dir()).unwrap();
    nix::unistd::mkfifo(&n.dir().join("10.26.0.2"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    fs::write(n.dir().join("10.26.0.3"), b"c\xff3\r\neth0").unwrap();
    assert_eq!(add_ok(Ipam::Tern, "c1", &c), ["10.26.0.4/24"]);
    let o = del(Ipam::Tern, "c9", &c);
    assert!(o.success(), "{}", o.describe());
    let o = gc(&c, Some(json!([{"containerID": "c1", "ifname": "eth0"}])));
    assert!(o.success(), "{}", o.describe());
    assert_eq!(n.files(), ["10.26.0.4", "last_reserved_ip.0", "lock"]);
}

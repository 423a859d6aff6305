//! Proves the end-to-end harness itself: the reference `ptp` + `host-local` plugins driven through
//! our libcni driver (tests/cnitool) into a real network namespace, for each cniVersion libcni 1.1
//! knows. If these fail, no tern end-to-end result can be trusted. Needs root (`tern_testkit::root::skip`).
//!
//! Each test uses its own netns name, container ID, host-local dataDir and /24, so tests run in
//! parallel.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use tern_testkit::exec::{conflist, ref_plugin_dir, Cnitool, PluginCall};

/// A named netns made with `ip netns add`, deleted on drop.
// TODO: replace with tern_testkit::netns's pod fixture once it lands on main.
struct TestNetns {
    name: String,
}

impl TestNetns {
    fn new(tag: &str) -> Self {
        let name = format!("tern-e2e-{tag}-{}", std::process::id());
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        let st = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .expect("run ip");
        assert!(st.success(), "ip netns add {name} failed (are we root?)");
        Self { name }
    }

    fn path(&self) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.name)
    }

    /// `ip -j addr show` inside the netns, as JSON.
    fn addrs(&self) -> Value {
        let out = Command::new("ip")
            .args(["-n", &self.name, "-j", "addr", "show"])
            .output()
            .expect("run ip");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("ip -j output")
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn host_link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// A ptp + host-local conflist on `10.98.<octet>.0/24` with host-local state under `data_dir`.
fn ptp_conf(version: &str, octet: u8, data_dir: &Path) -> Value {
    conflist(
        &format!("harness{octet}"),
        version,
        vec![json!({
            "type": "ptp",
            "ipMasq": false,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": format!("10.98.{octet}.0/24")}]],
                "dataDir": data_dir,
            },
        })],
    )
}

/// The full cycle ADD, CHECK (when the version has it), DEL, DEL again, asserting the kernel and
/// host-local state after each step.
fn add_check_del(version: &str, octet: u8) {
    let ns = TestNetns::new(&format!("ptp{octet}"));
    let mut tool = Cnitool::new().unwrap();
    let data_dir = tool.scratch().join("ipam");
    tool.write_conflist(&ptp_conf(version, octet, &data_dir))
        .unwrap();
    let net_name = format!("harness{octet}");

    let add = tool.add(ns.path()).unwrap();
    assert!(add.success(), "ADD failed:\n{}", add.describe());
    let result = add.json.clone().expect("ADD result is JSON");
    assert_eq!(result["cniVersion"], version, "{result}");

    // The result, whatever its version, names the pod address; the kernel must agree.
    let cidr = result["ips"][0]["address"]
        .as_str()
        .expect("ips[0].address")
        .to_owned();
    let (ip, _) = cidr.split_once('/').expect("cidr");
    assert!(ip.starts_with(&format!("10.98.{octet}.")), "{cidr}");
    let addrs = ns.addrs();
    let eth0 = addrs
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["ifname"] == "eth0")
        .unwrap_or_else(|| panic!("no eth0 in netns: {addrs}"));
    assert!(
        eth0["addr_info"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["local"] == ip),
        "eth0 lacks {ip}: {eth0}"
    );
    let host_veth = result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i.get("sandbox").is_none())
        .and_then(|i| i["name"].as_str())
        .expect("host interface in result")
        .to_owned();
    assert!(
        host_link_exists(&host_veth),
        "host veth {host_veth} missing"
    );
    let reservation = data_dir.join(&net_name).join(ip);
    assert!(
        reservation.exists(),
        "no host-local reservation {}",
        reservation.display()
    );
    assert!(
        tool.cache_dir().join("results").read_dir().unwrap().count() == 1,
        "libcni cached the result in our cache dir"
    );

    let check = tool.check(ns.path()).unwrap();
    if version == "0.3.1" {
        // libcni refuses CHECK below 0.4.0 itself (code 0: not a plugin error).
        assert!(
            !check.success(),
            "CHECK at 0.3.1 must fail:\n{}",
            check.describe()
        );
        assert_eq!(check.error_code(), Some(0), "{}", check.describe());
        assert!(
            check.error_msg().unwrap().contains("CHECK"),
            "{}",
            check.describe()
        );
    } else {
        assert!(check.success(), "CHECK failed:\n{}", check.describe());
        assert!(check.stdout.is_empty(), "{}", check.describe());
    }

    let del = tool.del(ns.path()).unwrap();
    assert!(del.success(), "DEL failed:\n{}", del.describe());
    assert!(del.stdout.is_empty(), "{}", del.describe());
    assert!(!reservation.exists(), "reservation left after DEL");
    assert!(
        !host_link_exists(&host_veth),
        "host veth {host_veth} left after DEL"
    );
    let addrs = ns.addrs();
    assert!(
        !addrs
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["ifname"] == "eth0"),
        "eth0 left in netns: {addrs}"
    );

    let again = tool.del(ns.path()).unwrap();
    assert!(again.success(), "second DEL failed:\n{}", again.describe());
}

#[test]
fn ptp_host_local_v0_3_1() {
    if tern_testkit::root::skip() {
        return;
    }
    add_check_del("0.3.1", 1);
}

#[test]
fn ptp_host_local_v0_4_0() {
    if tern_testkit::root::skip() {
        return;
    }
    add_check_del("0.4.0", 2);
}

#[test]
fn ptp_host_local_v1_0_0() {
    if tern_testkit::root::skip() {
        return;
    }
    add_check_del("1.0.0", 3);
}

/// A plugin's own error code and message survive libcni and reach the test as JSON.
#[test]
fn plugin_error_code_survives_libcni() {
    if tern_testkit::root::skip() {
        return;
    }
    let ns = TestNetns::new("err");
    let mut tool = Cnitool::new().unwrap();
    let data_dir = tool.scratch().join("ipam");
    tool.write_conflist(&ptp_conf("1.0.0", 4, &data_dir))
        .unwrap();
    tool.ifname("sixteen-bytes-xx");
    let add = tool.add(ns.path()).unwrap();
    assert!(!add.success(), "{}", add.describe());
    // ptp validates the ifname with the reference rules: code 4 (invalid environment).
    assert_eq!(add.error_code(), Some(4), "{}", add.describe());
    assert!(
        add.error_msg().unwrap().contains("too long"),
        "{}",
        add.describe()
    );
    // Nothing reserved.
    let reserved = std::fs::read_dir(data_dir.join("harness4"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("10."))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(reserved, 0);
}

/// libcni's own failures (no such network) are reported with code 0.
#[test]
fn unknown_network_is_code_0() {
    if tern_testkit::root::skip() {
        return;
    }
    let tool = Cnitool::new().unwrap();
    let out = tool.add("/var/run/netns/does-not-matter").unwrap();
    assert!(!out.success());
    assert_eq!(out.error_code(), Some(0), "{}", out.describe());
    assert!(
        out.error_msg().unwrap().contains("no net configuration"),
        "{}",
        out.describe()
    );
}

/// `cnitool version` asks each plugin in the list through libcni's GetVersionInfo.
#[test]
fn version_through_libcni() {
    if tern_testkit::root::skip() {
        return;
    }
    let tool = Cnitool::with_conflist(&ptp_conf("1.0.0", 5, Path::new("/nonexistent"))).unwrap();
    let out = tool.version().unwrap();
    assert!(out.success(), "{}", out.describe());
    let versions = out.json.expect("version JSON");
    let ptp: Vec<&str> = versions["ptp"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for v in ["0.3.1", "0.4.0", "1.0.0"] {
        assert!(ptp.contains(&v), "ptp lacks {v}: {versions}");
    }
}

/// Direct invocation, as the spec describes a runtime doing it: host-local VERSION.
#[test]
fn direct_version_call() {
    if tern_testkit::root::skip() {
        return;
    }
    let out = PluginCall::new(
        ref_plugin_dir().join("host-local").to_str().unwrap(),
        "VERSION",
    )
    .netconf(&json!({"cniVersion": "1.0.0"}))
    .unwrap()
    .run()
    .unwrap();
    assert!(out.success(), "{}", out.describe());
    let json = out.json.expect("VERSION JSON");
    assert_eq!(json["cniVersion"], "1.0.0", "{json}");
    assert!(
        json["supportedVersions"].as_array().unwrap().len() >= 4,
        "{json}"
    );
}

/// Direct invocation without CNI_COMMAND: the reference skel prints its "about" text on stderr,
/// nothing on stdout, and exits 0 (a peer behaviour the tern plugins are compared against).
#[test]
fn direct_call_missing_command() {
    if tern_testkit::root::skip() {
        return;
    }
    let out = PluginCall::new("host-local", "ADD")
        .unset("CNI_COMMAND")
        .netconf(&json!({"cniVersion": "1.0.0", "name": "x", "type": "host-local"}))
        .unwrap()
        .run()
        .unwrap();
    assert!(out.success(), "{}", out.describe());
    assert!(out.stdout.is_empty(), "{}", out.describe());
    assert!(
        out.stderr.contains("CNI protocol versions supported"),
        "{}",
        out.describe()
    );
}

/// Direct invocation with an unknown CNI_COMMAND: code 4 (invalid environment variables).
#[test]
fn direct_call_unknown_command() {
    if tern_testkit::root::skip() {
        return;
    }
    let out = PluginCall::new("host-local", "BOGUS")
        .netconf(&json!({"cniVersion": "1.0.0", "name": "x", "type": "host-local"}))
        .unwrap()
        .run()
        .unwrap();
    assert!(!out.success(), "{}", out.describe());
    assert_eq!(out.error_code(), Some(4), "{}", out.describe());
    assert!(
        out.error_msg().unwrap().contains("BOGUS"),
        "{}",
        out.describe()
    );
}

/// ADDs `conf` through `tool` into a fresh netns, returns the pod address, then DELs.
fn add_address_then_del(tool: &Cnitool, tag: &str) -> String {
    let ns = TestNetns::new(tag);
    let add = tool.add(ns.path()).unwrap();
    assert!(add.success(), "ADD failed:\n{}", add.describe());
    let addr = add.json.as_ref().unwrap()["ips"][0]["address"]
        .as_str()
        .unwrap()
        .to_owned();
    let del = tool.del(ns.path()).unwrap();
    assert!(del.success(), "DEL failed:\n{}", del.describe());
    addr
}

/// CNI_ARGS travels through cnitool and libcni: host-local honours `IP=`.
#[test]
fn cni_args_reach_the_plugin() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut tool = Cnitool::new().unwrap();
    let data_dir = tool.scratch().join("ipam");
    tool.write_conflist(&ptp_conf("1.0.0", 6, &data_dir))
        .unwrap();
    tool.cni_args(Some("IgnoreUnknown=1;IP=10.98.6.77"));
    assert_eq!(add_address_then_del(&tool, "args"), "10.98.6.77/24");
}

/// CAP_ARGS travels through cnitool and libcni as runtimeConfig, for a plugin declaring the
/// capability: host-local honours `ips`.
#[test]
fn cap_args_reach_the_plugin() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut tool = Cnitool::new().unwrap();
    let data_dir = tool.scratch().join("ipam");
    let mut conf = ptp_conf("1.0.0", 7, &data_dir);
    conf["plugins"][0]["capabilities"] = json!({"ips": true});
    tool.write_conflist(&conf).unwrap();
    tool.cap_args(Some(json!({"ips": ["10.98.7.99/24"]})));
    assert_eq!(add_address_then_del(&tool, "cap"), "10.98.7.99/24");
}

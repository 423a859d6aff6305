//! The example conflists in `cni-conf-examples/` that use tern-tuning: each validates offline, and
//! the ptp and IFNAME examples are run for real (reference ptp + host-local under a fake host
//! netns, then the tern-tuning binary), as a runtime would chain them. Needs root.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use tern_net::sysctl::Allowlist;
use tern_testkit::exec::workspace_root;
use tern_testkit::netns::{HostAndPod, TestNetns};

fn examples() -> PathBuf {
    workspace_root().join("cni-conf-examples")
}

fn load(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(examples().join(name)).unwrap()).unwrap()
}

#[test]
fn every_tuning_example_validates() {
    if tern_testkit::root::skip() {
        return;
    }
    let with_file = Allowlist::load(&examples().join("tern-tuning-allowlist.conf")).unwrap();
    let mut n = 0;
    for entry in std::fs::read_dir(examples()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("conflist") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        if !String::from_utf8_lossy(&bytes).contains("tern-tuning") {
            continue;
        }
        n += 1;
        assert_eq!(
            tern_tuning::validate::validate(&bytes, &with_file),
            Vec::<String>::new(),
            "{}",
            path.display()
        );
        let uses_ifname = String::from_utf8_lossy(&bytes).contains("IFNAME");
        let builtin = tern_tuning::validate::validate(&bytes, &Allowlist::builtin());
        // IFNAME keys are not in the built-in list: that example needs the allowlist file.
        assert_eq!(
            builtin.is_empty(),
            !uses_ifname,
            "{}: {builtin:?}",
            path.display()
        );
    }
    assert!(n >= 3, "expected the three tuning examples, found {n}");
}

/// Runs one plugin binary as a runtime does, from inside `host` (`ip netns exec`).
fn exec_plugin(
    host: &TestNetns,
    bin: &Path,
    env: &[(&str, String)],
    conf: &Value,
) -> (bool, Value) {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", host.name()])
        .arg(bin)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(conf).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert!(
        out.status.success() || !json.is_null(),
        "{}: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), json)
}

/// The plugin's config as libcni derives it from a conflist entry (section 3 of the spec).
fn derive(list: &Value, idx: usize, prev: Option<&Value>) -> Value {
    let mut c = list["plugins"][idx].clone();
    c["cniVersion"] = list["cniVersion"].clone();
    c["name"] = list["name"].clone();
    if let Some(p) = prev {
        c["prevResult"] = p.clone();
    }
    c
}

#[test]
fn keepalive_after_reference_ptp() {
    if tern_testkit::root::skip() {
        return;
    }
    let ptp = Path::new("/usr/lib/cni/ptp");
    assert!(
        ptp.exists(),
        "reference plugins missing (apt-get install containernetworking-plugins)"
    );
    let tuning = Path::new(env!("CARGO_BIN_EXE_tern-tuning"));
    let hp = HostAndPod::new("ex-ptp");
    let data = tempfile::tempdir().unwrap();
    let mut list = load("20-ptp-tern-tuning.conflist");
    list["plugins"][0]["ipam"]["dataDir"] = json!(data.path().join("ipam"));
    list["plugins"][1]["dataDir"] = json!(data.path().join("tuning"));
    let env = |cmd: &str| {
        vec![
            ("CNI_COMMAND", cmd.to_string()),
            ("CNI_CONTAINERID", "ex-ptp-ctr".to_string()),
            ("CNI_NETNS", hp.pod.path().display().to_string()),
            ("CNI_IFNAME", "eth0".to_string()),
            (
                "CNI_PATH",
                format!("/usr/lib/cni:{}", tuning.parent().unwrap().display()),
            ),
        ]
    };
    let host_before = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_keepalive_time").unwrap();

    let (ok, ptp_result) = exec_plugin(&hp.host, ptp, &env("ADD"), &derive(&list, 0, None));
    assert!(ok, "ptp ADD: {ptp_result}");
    let (ok, result) = exec_plugin(
        &hp.host,
        tuning,
        &env("ADD"),
        &derive(&list, 1, Some(&ptp_result)),
    );
    assert!(ok, "tern-tuning ADD: {result}");
    assert_eq!(
        result["ips"], ptp_result["ips"],
        "prevResult not passed through"
    );
    assert_eq!(hp.pod.sysctl("net.ipv4.tcp_keepalive_time"), "600");
    assert_eq!(hp.pod.sysctl("net.ipv4.tcp_keepalive_intvl"), "60");
    assert_eq!(hp.pod.sysctl("net.ipv4.tcp_keepalive_probes"), "5");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_keepalive_time").unwrap(),
        host_before
    );

    let (ok, out) = exec_plugin(
        &hp.host,
        tuning,
        &env("CHECK"),
        &derive(&list, 1, Some(&result)),
    );
    assert!(ok, "tern-tuning CHECK: {out}");
    // DEL in reverse order, each with the final result.
    let (ok, out) = exec_plugin(
        &hp.host,
        tuning,
        &env("DEL"),
        &derive(&list, 1, Some(&result)),
    );
    assert!(ok, "tern-tuning DEL: {out}");
    assert_eq!(hp.pod.sysctl("net.ipv4.tcp_keepalive_time"), "7200");
    let (ok, out) = exec_plugin(&hp.host, ptp, &env("DEL"), &derive(&list, 0, Some(&result)));
    assert!(ok, "ptp DEL: {out}");
    assert!(!hp.pod.has_link("eth0"));
}

#[test]
fn ifname_example_on_a_dotted_interface() {
    if tern_testkit::root::skip() {
        return;
    }
    let hp = HostAndPod::with_pod_link("ex-if", "eth0.100", "vexif0");
    let data = tempfile::tempdir().unwrap();
    let list = load("30-tern-tuning-ifname.conflist");
    let mut conf = derive(
        &list,
        1,
        Some(
            &json!({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0.100", "sandbox": hp.pod.path()}], "ips": [{"address": "10.97.0.2/24", "interface": 0}]}),
        ),
    );
    conf["dataDir"] = json!(data.path());
    let plugin = tern_tuning::TuningPlugin {
        allowlist_path: examples().join("tern-tuning-allowlist.conf"),
    };
    let env: std::collections::HashMap<String, String> = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "ex-if-ctr"),
        ("CNI_IFNAME", "eth0.100"),
        ("CNI_PATH", "/nonexistent"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .chain([("CNI_NETNS".to_string(), hp.pod.path().display().to_string())])
    .collect();
    let stdin = serde_json::to_vec(&conf).unwrap();
    let mut stdout = Vec::new();
    let status = tern_cni::dispatch(
        &plugin,
        &env,
        &mut stdin.as_slice(),
        &mut stdout,
        &mut Vec::new(),
    );
    assert_eq!(status, 0, "{}", String::from_utf8_lossy(&stdout));
    assert_eq!(
        hp.pod
            .exec_ok(&["cat", "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"])
            .trim(),
        "2"
    );
    assert_eq!(
        hp.pod
            .exec_ok(&["cat", "/proc/sys/net/ipv6/conf/eth0.100/accept_ra"])
            .trim(),
        "0"
    );
}

//! The dispatcher, in-process.
//!
//! The dispatcher end to end in-process: an environment and stdin in, exactly one JSON document
//! (or nothing) out, and which handler ran.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use serde_json::{json, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use tern_cni::{
    dispatch, AddInput, CheckInput, CniResult, DelInput, Error, GcInput, Plugin, Version,
};

/// Records what reached the handlers; ADD returns a fixed result.
#[derive(Default)]
struct Recorder {
    calls: RefCell<Vec<String>>,
}

impl Plugin for Recorder {
    fn about(&self) -> String {
        "recorder: a test plugin".into()
    }
    fn add(&self, input: &AddInput) -> Result<CniResult, Error> {
        self.calls
            .borrow_mut()
            .push(format!("ADD {}", input.netns.display()));
        let v = json!({"ips": [{"address": "10.0.0.2/24"}]});
        Ok(CniResult::from_json(&v)?.0)
    }
    fn del(&self, input: &DelInput) -> Result<(), Error> {
        self.calls
            .borrow_mut()
            .push(format!("DEL {:?}", input.netns));
        Ok(())
    }
    fn check(&self, _input: &CheckInput) -> Result<(), Error> {
        self.calls.borrow_mut().push("CHECK".into());
        Ok(())
    }
    fn gc(&self, input: &GcInput) -> Result<(), Error> {
        self.calls
            .borrow_mut()
            .push(format!("GC {:?}", input.valid_attachments));
        Ok(())
    }
}

struct Outcome {
    status: i32,
    stdout: String,
    stderr: String,
    calls: Vec<String>,
}

impl Outcome {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or(Value::Null)
    }
    fn code(&self) -> u64 {
        self.json()["code"].as_u64().unwrap_or(0)
    }
}

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    let mut m: HashMap<String, String> = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", "/run/netns/does-not-matter"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/opt/cni/bin"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in pairs {
        if v.is_empty() && k.starts_with('-') {
            m.remove(&k[1..]);
        } else {
            m.insert(k.to_string(), v.to_string());
        }
    }
    m
}

fn conf(version: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"cniVersion": version, "name": "n", "type": "recorder"})).unwrap()
}

fn run_with(env: HashMap<String, String>, stdin: &[u8]) -> Outcome {
    let plugin = Recorder::default();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = dispatch(&plugin, &env, &mut &stdin[..], &mut out, &mut err);
    Outcome {
        status,
        stdout: String::from_utf8(out).unwrap(),
        stderr: String::from_utf8(err).unwrap(),
        calls: plugin.calls.take(),
    }
}

#[test]
fn bad_input_gets_the_right_code_and_reaches_no_handler() {
    let two_mib = vec![b' '; 2 << 20];
    let prev_unsupported = serde_json::to_vec(&json!({
        "cniVersion": "1.0.0", "name": "n", "type": "recorder",
        "prevResult": {"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.2/24"}}
    }))
    .unwrap();
    type Case = (
        &'static str,
        HashMap<String, String>,
        Vec<u8>,
        u64,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "missing CNI_COMMAND",
            env(&[("-CNI_COMMAND", "")]),
            conf("1.0.0"),
            4,
            "required env variables [CNI_COMMAND] missing",
        ),
        (
            "unknown command",
            env(&[("CNI_COMMAND", "FROB")]),
            conf("1.0.0"),
            4,
            "unknown CNI_COMMAND: FROB",
        ),
        (
            "missing netns on ADD",
            env(&[("-CNI_NETNS", "")]),
            conf("1.0.0"),
            4,
            "required env variables [CNI_NETNS] missing",
        ),
        (
            "empty netns on CHECK",
            env(&[("CNI_COMMAND", "CHECK"), ("CNI_NETNS", "")]),
            conf("1.0.0"),
            4,
            "required env variables [CNI_NETNS] missing",
        ),
        (
            "container id a/b",
            env(&[("CNI_CONTAINERID", "a/b")]),
            conf("1.0.0"),
            4,
            "invalid characters in containerID",
        ),
        (
            "ifname 16 bytes",
            env(&[("CNI_IFNAME", "sixteen-bytes-xx")]),
            conf("1.0.0"),
            4,
            "interface name is too long",
        ),
        (
            "ifname ..",
            env(&[("CNI_IFNAME", "..")]),
            conf("1.0.0"),
            4,
            "interface name is . or ..",
        ),
        (
            "stdin not json",
            env(&[]),
            b"{not json".to_vec(),
            6,
            "error unmarshall network config",
        ),
        (
            "stdin 2 MiB",
            env(&[]),
            two_mib,
            7,
            "network configuration is larger than 1 MiB",
        ),
        (
            "version 9.9.9",
            env(&[]),
            conf("9.9.9"),
            1,
            "incompatible CNI versions",
        ),
        (
            "CHECK at 0.3.1",
            env(&[("CNI_COMMAND", "CHECK")]),
            conf("0.3.1"),
            1,
            "config version does not allow CHECK",
        ),
        (
            "GC at 1.0.0",
            env(&[("CNI_COMMAND", "GC")]),
            conf("1.0.0"),
            1,
            "config version does not allow GC",
        ),
        (
            "STATUS at 0.4.0",
            env(&[("CNI_COMMAND", "STATUS")]),
            conf("0.4.0"),
            1,
            "config version does not allow STATUS",
        ),
        (
            "prevResult of an unsupported version",
            env(&[]),
            prev_unsupported,
            1,
            "could not parse prevResult",
        ),
        (
            "own netns",
            env(&[("CNI_NETNS", "/proc/self/ns/net")]),
            conf("1.0.0"),
            8,
            "plugin's netns and netns from CNI_NETNS should not be the same",
        ),
        (
            "own netns on DEL",
            env(&[
                ("CNI_COMMAND", "DEL"),
                ("CNI_NETNS", "/proc/thread-self/ns/net"),
            ]),
            conf("1.0.0"),
            8,
            "should not be the same",
        ),
        (
            "bad CNI_ARGS",
            env(&[("CNI_ARGS", "novalue")]),
            conf("1.0.0"),
            4,
            "ARGS: invalid pair",
        ),
    ];
    for (what, env, stdin, code, msg) in cases {
        let o = run_with(env, &stdin);
        assert_eq!(o.status, 1, "{what}");
        assert_eq!(o.code(), code, "{what}: {}", o.stdout);
        let got = o.json()["msg"].as_str().unwrap_or_default().to_owned();
        assert!(got.contains(msg), "{what}: {got:?} lacks {msg:?}");
        assert!(o.calls.is_empty(), "{what}: a handler ran: {:?}", o.calls);
        assert_eq!(o.stdout.lines().count(), 1, "{what}: one JSON document");
    }
}

#[test]
fn missing_command_prints_about_on_stderr() {
    let o = run_with(env(&[("-CNI_COMMAND", "")]), b"");
    assert!(o.stderr.contains("recorder: a test plugin"));
    assert!(o
        .stderr
        .contains("CNI protocol versions supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"));
}

#[test]
fn error_json_carries_the_config_version() {
    let o = run_with(env(&[("CNI_COMMAND", "CHECK")]), &conf("0.3.1"));
    assert_eq!(o.json()["cniVersion"], "0.3.1");
    let o = run_with(env(&[("CNI_CONTAINERID", "a/b")]), &conf("0.3.1"));
    assert_eq!(
        o.json()["cniVersion"],
        "1.1.0",
        "before stdin is read, the newest"
    );
}

#[test]
fn add_prints_the_result_in_the_config_version() {
    for v in Version::ALL {
        let o = run_with(env(&[]), &conf(v.as_str()));
        assert_eq!(o.status, 0, "{}", o.stdout);
        let out = o.json();
        assert_eq!(out["cniVersion"], v.as_str());
        let has_version = out["ips"][0].get("version").is_some();
        assert_eq!(has_version, v < Version::V1_0_0, "{v}");
        assert_eq!(o.calls, vec!["ADD /run/netns/does-not-matter".to_string()]);
    }
}

#[test]
fn del_accepts_an_empty_netns_and_prints_nothing() {
    let o = run_with(
        env(&[("CNI_COMMAND", "DEL"), ("CNI_NETNS", "")]),
        &conf("1.0.0"),
    );
    assert_eq!((o.status, o.stdout.as_str()), (0, ""));
    assert_eq!(o.calls, vec!["DEL None".to_string()]);
}

#[test]
fn version_answers_every_supported_version() {
    let o = run_with(env(&[("CNI_COMMAND", "VERSION")]), &conf("0.4.0"));
    assert_eq!(
        o.json(),
        json!({"cniVersion": "0.4.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]})
    );
    let o = run_with(env(&[("CNI_COMMAND", "VERSION")]), b"");
    assert_eq!(o.json()["cniVersion"], "1.1.0");
}

#[test]
fn gc_distinguishes_no_list_from_an_empty_list() {
    let mut c = json!({"cniVersion": "1.1.0", "name": "n", "type": "recorder"});
    let o = run_with(
        env(&[("CNI_COMMAND", "GC")]),
        &serde_json::to_vec(&c).unwrap(),
    );
    assert_eq!(o.calls, vec!["GC None".to_string()]);
    c["cni.dev/valid-attachments"] = json!([]);
    let o = run_with(
        env(&[("CNI_COMMAND", "GC")]),
        &serde_json::to_vec(&c).unwrap(),
    );
    assert_eq!(o.calls, vec!["GC Some([])".to_string()]);
    // libcni's encoding of "no sandbox left" (a nil slice), in both keys it sends.
    c["cni.dev/valid-attachments"] = Value::Null;
    c["cni.dev/attachments"] = Value::Null;
    let o = run_with(
        env(&[("CNI_COMMAND", "GC")]),
        &serde_json::to_vec(&c).unwrap(),
    );
    assert_eq!(o.calls, vec!["GC Some([])".to_string()]);
    c["cni.dev/valid-attachments"] = json!([{"containerID": "c1", "ifname": "eth0"}]);
    let o = run_with(
        env(&[("CNI_COMMAND", "GC")]),
        &serde_json::to_vec(&c).unwrap(),
    );
    assert!(o.calls[0].contains("c1"), "{:?}", o.calls);
}

#[test]
fn a_prev_result_of_another_supported_version_reaches_the_handler() {
    for (config, prev) in [("1.0.0", "0.4.0"), ("0.4.0", "1.1.0"), ("1.1.0", "0.3.0")] {
        let stdin = serde_json::to_vec(&json!({
            "cniVersion": config, "name": "n", "type": "recorder",
            "prevResult": {"cniVersion": prev, "ips": [{"address": "10.0.0.2/24"}]}
        }))
        .unwrap();
        let o = run_with(env(&[]), &stdin);
        assert_eq!(o.status, 0, "{prev} in {config}: {}", o.stdout);
        assert_eq!(o.json()["cniVersion"], config);
        assert_eq!(o.calls.len(), 1);
    }
}

#[test]
fn hostile_netconfs_reach_no_handler_on_any_verb_but_del() {
    let base = json!({"cniVersion": "1.1.0", "name": "n", "type": "recorder",
                      "ipam": {"type": "host-local"}});
    let cases = tern_testkit::hostile::netconfs(&base);
    for verb in ["ADD", "CHECK", "GC", "STATUS"] {
        for (what, bytes, code) in &cases {
            let o = run_with(env(&[("CNI_COMMAND", verb)]), bytes);
            assert_eq!(o.status, 1, "{verb} {what}");
            assert_eq!(o.code(), u64::from(*code), "{verb} {what}: {}", o.stdout);
            assert!(
                o.calls.is_empty(),
                "{verb} {what}: a handler ran: {:?}",
                o.calls
            );
        }
    }
}

//! Netconf parsing: tolerance and refusals.
//!
//! The netconf: what runtimes send is tolerated, what the spec or common sense rejects is refused
//! with its code before any plugin reads it, and DEL's tolerance.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use serde_json::{json, Value};
use tern_cni::error::Error;
use tern_cni::netconf::{normalize_keys, read_bounded, MAX_NETCONF_BYTES, STANDARD_KEYS};
use tern_cni::NetConf;
use tern_testkit::hostile;

fn parse(v: Value) -> Result<NetConf, Error> {
    NetConf::parse(serde_json::to_vec(&v).unwrap())
}

#[test]
fn tolerant_of_what_runtimes_send() {
    let c = parse(json!({
        "cniVersion": "1.0.0",
        "name": "net1",
        "type": "tern",
        "RuntimeConfig": {"mac": "00:11:22:33:44:55"},
        "args": null,
        "capabilities": {"mac": true},
        "ipam": {"type": "host-local"},
        "somethingNew": [1, 2],
        "prevResult": {"cniVersion": "1.0.0", "ips": [{"version": "4", "address": "10.0.0.2/24"}]}
    }))
    .unwrap();
    assert_eq!(c.runtime_config["mac"], "00:11:22:33:44:55");
    assert!(c.args_cni.is_empty());
    assert_eq!(c.raw["somethingNew"], json!([1, 2]));
    assert_eq!(c.ipam_type().unwrap(), "host-local");
    assert_eq!(c.prev_result.unwrap().ips.len(), 1);
}

#[test]
fn validation_errors_have_spec_codes() {
    let cases = [
        (json!({"cniVersion": "9.9.9", "name": "n"}), 1),
        (json!({"name": "n"}), 1),
        (json!({"cniVersion": "1.0.0"}), 7),
        (json!({"cniVersion": "1.0.0", "name": "bad name"}), 7),
        (json!({"cniVersion": 1, "name": "n", "type": "t"}), 6),
        (
            json!({"cniVersion": "1.0.0", "name": "n", "type": "t", "runtimeConfig": []}),
            6,
        ),
        (
            json!({"cniVersion": "1.0.0", "name": "n", "type": "t", "prevResult": {"cniVersion": "0.2.0"}}),
            1,
        ),
    ];
    for (v, code) in cases {
        assert_eq!(parse(v.clone()).unwrap_err().code, code, "{v}");
    }
    assert_eq!(NetConf::parse(b"not json".to_vec()).unwrap_err().code, 6);
    assert_eq!(NetConf::parse(b"[1]".to_vec()).unwrap_err().code, 6);
}

#[test]
fn bounded_read() {
    let big = vec![b' '; MAX_NETCONF_BYTES + 1];
    let e = read_bounded(&mut &big[..]).unwrap_err();
    assert_eq!(e.code, 7);
    let ok = vec![b' '; MAX_NETCONF_BYTES];
    assert_eq!(read_bounded(&mut &ok[..]).unwrap().len(), MAX_NETCONF_BYTES);
}

#[test]
fn exact_spelling_wins_over_case_variant() {
    let mut m = json!({"runtimeConfig": {"a": 1}, "RUNTIMECONFIG": {"a": 2}})
        .as_object()
        .unwrap()
        .clone();
    normalize_keys(&mut m, STANDARD_KEYS);
    assert_eq!(m.len(), 1);
    assert_eq!(m["runtimeConfig"]["a"], 1);
}

#[test]
fn runtime_config_injection_keeps_other_keys() {
    let c =
        parse(json!({"cniVersion": "1.0.0", "name": "n", "type": "t", "runtimeConfig": {"x": 1}}))
            .unwrap();
    let b = c
        .bytes_with_runtime_config("ips", json!(["10.0.0.9"]))
        .unwrap();
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(v["runtimeConfig"], json!({"x": 1, "ips": ["10.0.0.9"]}));
}

fn base() -> Value {
    json!({"cniVersion": "1.0.0", "name": "n", "type": "tern", "ipam": {"type": "host-local"}})
}

fn with(pointer: &str, value: Value) -> Vec<u8> {
    hostile::with(&base(), pointer, value)
}

#[test]
fn hostile_netconfs_are_refused_with_their_code() {
    let cases = hostile::netconfs(&base());
    for (what, bytes, code) in &cases {
        let e = NetConf::parse(bytes.clone()).unwrap_err();
        assert_eq!(e.code, *code, "{what}: {e}");
    }
    // The base config itself is fine: each case differs by one thing.
    NetConf::parse(with("/name", json!("n"))).unwrap();
    eprintln!("hostile netconfs refused: {}", cases.len());
}

#[test]
fn del_tolerates_every_hostile_netconf_and_lists_what_it_ignored() {
    let dup = br#"{"cniVersion":"1.0.0","name":"n","type":"tern","name":"m","x":{"a":1,"a":2}}"#;
    let c = NetConf::parse_for_del(dup.to_vec()).unwrap();
    assert_eq!(c.name, "m", "the last one wins, as in Go");
    assert!(c.tolerant);
    assert!(c.ignored.is_empty(), "{:?}", c.ignored);
    let variants = br#"{"cniVersion":"1.0.0","name":"n","type":"tern","Name":"m"}"#;
    assert!(NetConf::parse_for_del(variants.to_vec()).is_ok());
    let ns = with("/dns", json!({"nameservers": ["kube-dns"]}));
    assert!(NetConf::parse_for_del(ns).is_ok());
    // DEL never strands a sandbox: every hostile netconf parses; what ADD refuses and DEL does
    // not need is dropped and listed, and the bytes a delegate gets no longer hold it.
    let cases = hostile::netconfs(&base());
    for (what, bytes, _) in &cases {
        let c = NetConf::parse_for_del(bytes.clone())
            .unwrap_or_else(|e| panic!("{what}: DEL refused: {e}"));
        assert_eq!(c.name.trim_end_matches('x'), "n", "{what}");
        for field in &c.ignored {
            let key = field.split(':').next().unwrap();
            let reparsed: Value = serde_json::from_slice(&c.bytes).unwrap();
            let gone = match key.split_once('.') {
                Some((outer, inner)) => reparsed[outer].get(inner).is_none(),
                None => reparsed.get(key).is_none(),
            };
            assert!(gone, "{what}: {key} ignored but still sent on");
        }
        // What ADD refuses with is either ignored, or tolerated as Go would read it.
        let tolerated_as_go = what.starts_with("duplicate")
            || what.starts_with("case variants")
            || what.contains("nameserver")
            || what == "type missing"
            || what == "type null";
        assert!(
            tolerated_as_go || !c.ignored.is_empty(),
            "{what}: nothing listed as ignored"
        );
    }
    // The names a DEL needs are still checked: an invalid network name or version is refused.
    assert_eq!(
        NetConf::parse_for_del(with("/name", json!("a/b")))
            .unwrap_err()
            .code,
        7
    );
    assert_eq!(
        NetConf::parse_for_del(with("/cniVersion", json!("9.9.9")))
            .unwrap_err()
            .code,
        1
    );
    let c = NetConf::parse_for_del(with("/prevResult", json!(1))).unwrap();
    assert!(c.prev_result.is_none());
    assert!(c.ignored[0].starts_with("prevResult: "), "{:?}", c.ignored);
    eprintln!("hostile netconfs DEL tolerates: {}", cases.len());
}

#[test]
fn decode_refuses_case_variants_and_lists_for_objects() {
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)] // read by serde only
    struct Mine {
        #[serde(default)]
        mtu: Option<u32>,
        #[serde(default)]
        kubernetes: Option<Kube>,
    }
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)] // read by serde only
    struct Kube {
        #[serde(default)]
        kubeconfig: Option<String>,
    }
    let c = NetConf::parse(with("/MTU", json!(9000))).unwrap();
    assert_eq!(c.decode::<Mine>(&["mtu"]).unwrap().mtu, Some(9000));
    let both = br#"{"cniVersion":"1.0.0","name":"n","type":"tern","mtu":1400,"MTU":9000}"#;
    let c = NetConf::parse(both.to_vec()).unwrap();
    let e: Error = c.decode::<Mine>(&["mtu"]).unwrap_err();
    assert_eq!(e.code, 7, "{e}");
    let c = NetConf::parse(with("/kubernetes", json!(["/k"]))).unwrap();
    assert_eq!(c.decode::<Mine>(&["kubernetes"]).unwrap_err().code, 6);
}

//! Environment + netconf parsing and validation, as a plugin receives them: the input is
//! `KEY=VALUE` lines (the `CNI_*` variables) up to a line `--`, then stdin. It goes through the
//! real dispatcher (`tern_cni::dispatch`: env, netconf, version, prevResult, `CNI_ARGS`,
//! valid-attachments) into a plugin that runs the configuration and validation of tern (for
//! `"type": "tern"`) or tern-tuning (any other type) and touches nothing. Every run must end in exit 0 or 1; stdout holds at most one JSON document,
//! an error with a code on 1; a plan that validated names only files under `/proc/sys/net/`.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tern_cni::{AddInput, CheckInput, CniResult, DelInput, Error, GcInput, Plugin, StatusInput};
use tern_net::sysctl::Allowlist;
use tern_tuning::config::{data_dir_for_del, TuningConf};

/// Validates like tern-tuning, changes nothing.
struct Validator;

fn plan(conf: &tern_cni::NetConf, args: &tern_cni::CniArgs, ifname: &str) -> Result<(), Error> {
    if conf.plugin_type == "tern" {
        let t = tern::config::TernConf::from_netconf(conf)?;
        assert!((68..=65535).contains(&t.mtu), "mtu {}", t.mtu);
        assert!(t.state_dir.is_absolute(), "{:?}", t.state_dir);
        return Ok(());
    }
    let t = TuningConf::from_netconf(conf, args)?;
    let _ = t.link_problems();
    let p = t.plan(ifname, Some(&Allowlist::builtin()))?;
    for (k, _) in &p.sysctls {
        assert!(k.path().starts_with("/proc/sys/net/"), "{:?}", k.path());
    }
    Ok(())
}

impl Plugin for Validator {
    fn about(&self) -> String {
        "tern fuzz validator".into()
    }
    fn add(&self, input: &AddInput) -> Result<CniResult, Error> {
        plan(&input.config, &input.args, input.ifname.as_str())?;
        Ok(input.config.prev_result.clone().unwrap_or_default())
    }
    fn del(&self, input: &DelInput) -> Result<(), Error> {
        let _ = data_dir_for_del(&input.config);
        Ok(())
    }
    fn check(&self, input: &CheckInput) -> Result<(), Error> {
        plan(&input.config, &input.args, input.ifname.as_str())
    }
    fn status(&self, input: &StatusInput) -> Result<(), Error> {
        plan(&input.config, &tern_cni::CniArgs::default(), "eth0")
    }
    fn gc(&self, input: &GcInput) -> Result<(), Error> {
        let _ = data_dir_for_del(&input.config);
        Ok(())
    }
}

const VARS: [&str; 6] = [
    "CNI_COMMAND",
    "CNI_CONTAINERID",
    "CNI_NETNS",
    "CNI_IFNAME",
    "CNI_ARGS",
    "CNI_PATH",
];

fuzz_target!(|data: &[u8]| {
    let (head, stdin) = match data.windows(4).position(|w| w == b"\n--\n") {
        Some(i) => (&data[..i], &data[i + 4..]),
        None => (data, &b""[..]),
    };
    // The dispatcher opens `logFile` for appending: never let a fuzz input name a file.
    if let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(stdin) {
        if m.keys()
            .any(|k| k.eq_ignore_ascii_case("logFile") || k.eq_ignore_ascii_case("logLevel"))
        {
            return;
        }
    }
    let mut env: HashMap<String, String> = HashMap::new();
    for line in String::from_utf8_lossy(head).lines() {
        if let Some((k, v)) = line.split_once('=') {
            if VARS.contains(&k) {
                env.insert(k.to_owned(), v.to_owned());
            }
        }
    }
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = tern_cni::dispatch(&Validator, &env, &mut &stdin[..], &mut out, &mut err);
    assert!(status == 0 || status == 1, "exit status {status}");
    let text = String::from_utf8(out).expect("stdout is UTF-8");
    let docs: Vec<Value> = serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("stdout is not JSON: {e}: {text:?}"));
    assert!(docs.len() <= 1, "more than one JSON document: {text:?}");
    if status == 1 {
        let code = docs.first().and_then(|d| d["code"].as_u64());
        assert!(
            code.is_some_and(|c| c > 0),
            "an error without a code: {text:?}"
        );
    }
});

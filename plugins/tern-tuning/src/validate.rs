//! `tern-tuning validate [--allowlist PATH] FILE`: checks the tuning entries of a conflist (or a
//! single plugin config) offline, before installing it, and prints each problem.
//!
//! Entries of type `tern-tuning` and `tuning` are checked (the latter so a switch can be
//! validated before changing `type`). `IFNAME` keys are checked with the interface names `eth0`
//! and `eth0.100`. Exit status: 0 valid, 1 problems found, 2 usage or unreadable file.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use tern_cni::{CniArgs, NetConf};
use tern_net::sysctl::{Allowlist, DEFAULT_ALLOWLIST_PATH};

use crate::config::{parse_mac, reject_duplicate_sysctl_keys, TuningConf};

/// Plugin types this validator checks.
pub const TUNING_TYPES: &[&str] = &["tern-tuning", "tuning"];

/// Interface names `IFNAME` is checked with.
const SAMPLE_IFNAMES: &[&str] = &["eth0", "eth0.100"];

/// Validates the configuration in `bytes` against `allowlist`; returns every problem, each
/// prefixed with where it is (`plugins[1] (tern-tuning): …`). Empty means valid.
pub fn validate(bytes: &[u8], allowlist: &Allowlist) -> Vec<String> {
    if let Err(e) = reject_duplicate_sysctl_keys(bytes) {
        return vec![e.to_string()];
    }
    let top: Map<String, Value> = match serde_json::from_slice(bytes) {
        Ok(Value::Object(m)) => m,
        Ok(_) => return vec!["the configuration must be a JSON object".into()],
        Err(e) => return vec![format!("not valid JSON: {e}")],
    };
    let entries: Vec<(String, Map<String, Value>)> = match top.get("plugins") {
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                p.as_object()
                    .map(|o| (format!("plugins[{i}]"), inherit(&top, o)))
            })
            .collect(),
        Some(_) => return vec!["plugins must be a list".into()],
        None => vec![("config".into(), top.clone())],
    };
    let mut problems = Vec::new();
    let mut seen = 0;
    for (at, entry) in entries {
        let ty = entry
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !TUNING_TYPES.contains(&ty.as_str()) {
            continue;
        }
        seen += 1;
        let at = format!("{at} ({ty})");
        let conf = match serde_json::to_vec(&Value::Object(entry))
            .map_err(|e| e.to_string())
            .and_then(|b| NetConf::parse(b).map_err(|e| e.to_string()))
        {
            Ok(c) => c,
            Err(e) => {
                problems.push(format!("{at}: {e}"));
                continue;
            }
        };
        let tuning = match TuningConf::from_netconf(&conf, &CniArgs::default()) {
            Ok(t) => t,
            Err(e) => {
                problems.push(format!("{at}: {e}"));
                continue;
            }
        };
        let mut msgs: Vec<String> = Vec::new();
        for ifname in SAMPLE_IFNAMES {
            for p in tuning.problems(ifname, Some(allowlist)) {
                let m = p.to_string();
                if !msgs.contains(&m) {
                    msgs.push(m);
                }
            }
        }
        if let Some(Err(e)) = tuning.mac.as_deref().map(parse_mac) {
            msgs.push(e.to_string());
        }
        problems.extend(msgs.into_iter().map(|m| format!("{at}: {m}")));
    }
    if seen == 0 {
        problems.push(format!(
            "no plugin of type {} found",
            TUNING_TYPES.join(" or ")
        ));
    }
    problems
}

/// A conflist entry as a runtime would pass it: the entry plus the list's `cniVersion` and
/// `name` (tuning entries in a conflist carry neither).
fn inherit(top: &Map<String, Value>, entry: &Map<String, Value>) -> Map<String, Value> {
    let mut m = entry.clone();
    for key in ["cniVersion", "name"] {
        if let Some(v) = top.get(key) {
            m.entry(key.to_string()).or_insert_with(|| v.clone());
        }
    }
    m
}

/// The `validate` subcommand; `args` are the words after `validate`. Returns the exit status.
pub fn main(args: &[String]) -> i32 {
    let usage = "usage: tern-tuning validate [--allowlist PATH] FILE";
    let (allowlist_path, file) = match args {
        [flag, path, file] if flag == "--allowlist" => (PathBuf::from(path), file),
        [file] if !file.starts_with('-') => (PathBuf::from(DEFAULT_ALLOWLIST_PATH), file),
        _ => {
            eprintln!("{usage}");
            return 2;
        }
    };
    let allowlist = match Allowlist::load(&allowlist_path) {
        Ok(a) => a,
        Err(e) => {
            println!("{e}");
            return 1;
        }
    };
    let bytes = match std::fs::read(Path::new(file)) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("read {file}: {e}");
            return 2;
        }
    };
    let problems = validate(&bytes, &allowlist);
    if problems.is_empty() {
        println!("{file}: valid (allowlist: {})", allowlist.source());
        0
    } else {
        for p in &problems {
            println!("{file}: {p}");
        }
        1
    }
}

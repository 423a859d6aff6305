//! `tern-tuning validate [--allowlist PATH] FILE`: checks the tuning entries of a conflist (or a
//! single plugin config) offline, before installing it, and prints each problem.
//!
//! Entries of type `tern-tuning` and `tuning` are checked (the latter so a switch can be
//! validated before changing `type`). `IFNAME` keys are checked with the interface names `eth0`
//! and `eth0.100`. Every problem of every entry is reported, field by field (a bad `mtu` does
//! not hide bad sysctls). Exit status: 0 valid, 1 problems found (an invalid allowlist file
//! included: ADD would refuse everything), 2 usage, unreadable FILE, or an explicit
//! `--allowlist PATH` that does not exist (only the default path falls back to the built-in list).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use tern_cni::{CniArgs, NetConf};
use tern_net::sysctl::{Allowlist, DEFAULT_ALLOWLIST_PATH};

use crate::config::{reject_duplicate_keys, TuningConf};

/// Plugin types this validator checks.
pub const TUNING_TYPES: &[&str] = &["tern-tuning", "tuning"];

/// Interface names `IFNAME` is checked with.
const SAMPLE_IFNAMES: &[&str] = &["eth0", "eth0.100"];

/// Validates the configuration in `bytes` against `allowlist`; returns every problem of every
/// tuning entry, field by field, each prefixed with where it is (`plugins[1] (tern-tuning): …`).
/// Empty means valid. The value checks are ADD's (sysctl keys, values and allowlist; MAC), plus
/// the offline MTU bound of [`TuningConf::link_problems`] (the exact range is the link's).
pub fn validate(bytes: &[u8], allowlist: &Allowlist) -> Vec<String> {
    let mut problems = Vec::new();
    if let Err(e) = reject_duplicate_keys(bytes) {
        if e.code != tern_cni::code::INVALID_NETWORK_CONFIG {
            return vec![e.to_string()]; // not JSON: nothing more to say
        }
        // A duplicated key: serde keeps the last, so the other fields can still be checked.
        problems.push(e.to_string());
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
        let (tuning, mut msgs) = TuningConf::from_netconf_lenient(&conf, &CniArgs::default());
        for ifname in SAMPLE_IFNAMES {
            for p in tuning.problems(ifname, Some(allowlist)) {
                let m = p.to_string();
                if !msgs.contains(&m) {
                    msgs.push(m);
                }
            }
        }
        msgs.extend(tuning.link_problems());
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
        [flag, path, file] if flag == "--allowlist" => {
            // Only the default path falls back to the built-in list when absent: a path given
            // on purpose that does not exist is a mistake, not a request for the default.
            let path = PathBuf::from(path);
            match path.try_exists() {
                Ok(true) => {}
                Ok(false) => {
                    eprintln!(
                        "allowlist {}: no such file (omit --allowlist to use {DEFAULT_ALLOWLIST_PATH}, or the built-in default when that is absent)",
                        path.display()
                    );
                    return 2;
                }
                Err(e) => {
                    eprintln!("allowlist {}: {e}", path.display());
                    return 2;
                }
            }
            (path, file)
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(entry: Value) -> Vec<String> {
        let list = json!({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "ptp"}, entry]});
        validate(&serde_json::to_vec(&list).unwrap(), &Allowlist::builtin())
    }

    fn has(problems: &[String], needle: &str) -> bool {
        problems.iter().any(|p| p.contains(needle))
    }

    /// Every problem of an entry, field by field: a bad `mtu` does not hide bad sysctls.
    #[test]
    fn reports_every_problem_of_an_entry() {
        let p = problems(json!({"type": "tern-tuning", "mtu": -5,
            "sysctl": {"net.ipv4.ip_forward": "1", "net.ipv4.tcp_syncookies": 1}}));
        assert!(has(&p, "mtu"), "{p:?}");
        assert!(has(&p, "net.ipv4.ip_forward"), "{p:?}");
        assert!(has(&p, "net.ipv4.tcp_syncookies"), "{p:?}");
        assert!(
            p.iter()
                .all(|m| m.starts_with("plugins[1] (tern-tuning): ")),
            "{p:?}"
        );

        let p = problems(
            json!({"type": "tuning", "mtu": 70000, "mac": "zz:00:00:00:00:01",
            "promisc": "yes", "txQLen": -1}),
        );
        assert!(has(&p, "70000"), "{p:?}");
        assert!(has(&p, "zz:00:00:00:00:01"), "{p:?}");
        assert!(has(&p, "promisc"), "{p:?}");
        assert!(has(&p, "txQLen"), "{p:?}");
        assert_eq!(p.len(), 4, "{p:?}");
    }

    /// The value checks ADD makes: MTU within what any link accepts, a usable unicast MAC.
    #[test]
    fn applies_the_value_checks_of_add() {
        for mtu in [1, 67, 65536] {
            let p = problems(json!({"type": "tern-tuning", "mtu": mtu}));
            assert!(has(&p, &format!("mtu {mtu}")), "{mtu}: {p:?}");
        }
        for mtu in [68, 1500, 65535] {
            assert_eq!(
                problems(json!({"type": "tern-tuning", "mtu": mtu})),
                Vec::<String>::new()
            );
        }
        for mac in [
            "00:00:00:00:00:00",
            "ff:ff:ff:ff:ff:ff",
            "01:00:5e:00:00:01",
        ] {
            let p = problems(json!({"type": "tern-tuning", "mac": mac}));
            assert!(has(&p, mac), "{mac}: {p:?}");
        }
        // runtimeConfig and args.cni values are checked too.
        let p = problems(
            json!({"type": "tern-tuning", "runtimeConfig": {"mac": "00-00-00-00-00-00"},
            "args": {"cni": {"mtu": 2}}}),
        );
        assert!(has(&p, "00-00-00-00-00-00") && has(&p, "mtu 2"), "{p:?}");
    }

    /// Duplicated keys are reported with the other problems of the file.
    #[test]
    fn duplicate_keys_do_not_hide_other_problems() {
        let raw = br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"tern-tuning","mtu":1,
            "sysctl":{"net.ipv4.tcp_syncookies":"1","net.ipv4.tcp_syncookies":"0"}}]}"#;
        let p = validate(raw, &Allowlist::builtin());
        assert!(has(&p, "duplicated") && has(&p, "mtu 1"), "{p:?}");
    }
}

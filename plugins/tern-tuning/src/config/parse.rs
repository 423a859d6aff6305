//! Parsing the tuning netconf into a `TuningConf`.
//!
//! Parsing the tuning netconf: the reference fields, their JSON types and precedence, into a
//! [`TuningConf`]; the backup directory DEL needs; and the duplicate-key scan of whole files.

use std::fmt;
use std::path::PathBuf;

use serde_json::{Map, Value};
use tern_cni::{code, CniArgs, Error, NetConf};

use super::defaults::DEFAULT_DATA_DIR;
use super::{TuningConf, CNI_ARGS_KEYS, TUNING_KEYS};

fn decode_err(msg: impl fmt::Display) -> Error {
    Error::decode(format!("failed to load netconf: {msg}"))
}

fn get_bool(map: &Map<String, Value>, key: &str, at: &str) -> Result<Option<bool>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(format!("{at}{key} must be a boolean, got {other}")),
    }
}

fn get_u32(map: &Map<String, Value>, key: &str, at: &str) -> Result<Option<u32>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .map(Some)
            .ok_or_else(|| format!("{at}{key} must be an integer from 0 to 4294967295, got {n}")),
        Some(other) => Err(format!("{at}{key} must be a number, got {other}")),
    }
}

fn get_string(map: &Map<String, Value>, key: &str, at: &str) -> Result<Option<String>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{at}{key} must be a string, got {other}")),
    }
}

/// The sysctls with string values; every other entry is a problem pushed onto `problems`.
fn get_sysctl(
    map: &Map<String, Value>,
    at: &str,
    problems: &mut Vec<String>,
) -> Vec<(String, String)> {
    match map.get("sysctl") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(m)) => m
            .iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) => Some((k.clone(), s.clone())),
                other => {
                    problems.push(format!(
                        "{at}sysctl {k:?} must have a string value, got {other}"
                    ));
                    None
                }
            })
            .collect(),
        Some(other) => {
            problems.push(format!("{at}sysctl must be an object, got {other}"));
            Vec::new()
        }
    }
}

/// `r`'s value, or `None` with its message pushed onto `problems`.
fn keep<T>(r: Result<Option<T>, String>, problems: &mut Vec<String>) -> Option<T> {
    r.unwrap_or_else(|m| {
        problems.push(m);
        None
    })
}

fn normalized(map: &Map<String, Value>) -> Map<String, Value> {
    let mut m = map.clone();
    tern_cni::netconf::normalize_keys(&mut m, TUNING_KEYS);
    m
}

/// `dataDir` of the netconf: `Ok(None)` when absent, `null` or empty (the default applies).
fn data_dir_of(conf: &NetConf) -> Result<Option<PathBuf>, String> {
    let top = normalized(&conf.raw);
    Ok(get_string(&top, "dataDir", "")?
        .filter(|d| !d.is_empty())
        .map(PathBuf::from))
}

/// The backup directory for DEL, which needs nothing else from the netconf: `dataDir`, or
/// [`DEFAULT_DATA_DIR`] when absent, `null` or empty. Every other field is ignored, however
/// malformed (CNI spec "DEL": complete without error even if resources are missing).
///
/// # Errors
/// The message for a `dataDir` that is not a string; an ADD with such a netconf failed before it
/// wrote anything, so DEL has nothing to restore.
pub fn data_dir_for_del(conf: &NetConf) -> Result<PathBuf, String> {
    Ok(data_dir_of(conf)?.unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR)))
}

impl TuningConf {
    /// Builds the configuration from the netconf and `CNI_ARGS` (the dispatcher has refused
    /// duplicate keys already).
    ///
    /// # Errors
    /// Code 6 `failed to load netconf: …`
    /// naming every field of the wrong type (see [`TuningConf::from_netconf_lenient`]); code 4
    /// for unknown `CNI_ARGS` keys without `IgnoreUnknown`.
    pub fn from_netconf(conf: &NetConf, args: &CniArgs) -> Result<TuningConf, Error> {
        args.check_known(CNI_ARGS_KEYS)?;
        let (out, problems) = TuningConf::from_netconf_lenient(conf, args);
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(decode_err(problems.join("; ")))
        }
    }

    /// Builds the configuration field by field, never stopping: a field of the wrong type is
    /// left out (`None`, or the sysctl entry dropped) and described in the returned list, e.g.
    /// `mtu must be an integer from 0 to 4294967295, got -5` or `args.cni.sysctl "k" must have a
    /// string value, got 1`. Neither duplicated keys nor `CNI_ARGS` keys are checked here.
    /// `validate` reports the whole list; [`TuningConf::from_netconf`] refuses a non-empty one.
    pub fn from_netconf_lenient(conf: &NetConf, args: &CniArgs) -> (TuningConf, Vec<String>) {
        let mut p = Vec::new();
        let top = normalized(&conf.raw);
        let mut out = TuningConf {
            sysctl: get_sysctl(&top, "", &mut p),
            mac: keep(get_string(&top, "mac", ""), &mut p),
            mtu: keep(get_u32(&top, "mtu", ""), &mut p).filter(|m| *m != 0),
            promisc: keep(get_bool(&top, "promisc", ""), &mut p),
            allmulti: keep(get_bool(&top, "allmulti", ""), &mut p),
            txqlen: keep(get_u32(&top, "txQLen", ""), &mut p),
            data_dir: keep(data_dir_of(conf), &mut p)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR)),
        };
        if let Some(mac) = args.get("MAC") {
            out.mac = Some(mac.to_string());
        }
        let rc = normalized(&conf.runtime_config);
        if let Some(mac) = keep(get_string(&rc, "mac", "runtimeConfig."), &mut p) {
            out.mac = Some(mac);
        }
        let ac = normalized(&conf.args_cni);
        for (k, v) in get_sysctl(&ac, "args.cni.", &mut p) {
            match out.sysctl.iter_mut().find(|(key, _)| *key == k) {
                Some(slot) => slot.1 = v,
                None => out.sysctl.push((k, v)),
            }
        }
        if let Some(mac) = keep(get_string(&ac, "mac", "args.cni."), &mut p) {
            out.mac = Some(mac);
        }
        if let Some(b) = keep(get_bool(&ac, "promisc", "args.cni."), &mut p) {
            out.promisc = Some(b);
        }
        if let Some(m) = keep(get_u32(&ac, "mtu", "args.cni."), &mut p) {
            out.mtu = Some(m).filter(|m| *m != 0);
        }
        if let Some(b) = keep(get_bool(&ac, "allmulti", "args.cni."), &mut p) {
            out.allmulti = Some(b);
        }
        if let Some(q) = keep(get_u32(&ac, "txQLen", "args.cni."), &mut p) {
            out.txqlen = Some(q);
        }
        (out, p)
    }
}

/// Refuses a JSON document (a conflist or one plugin's config) that has the same key twice in
/// any object: serde_json would silently keep the last, so the allowlist and the user could
/// disagree about what is applied (containernetworking/plugins#730). The dispatcher refuses such
/// a netconf before ADD runs; `tern-tuning validate` checks whole files with this.
///
/// # Errors
/// Code 7 `duplicated keys are not allowed: duplicate key "<key>" in <where>`; code 6 for
/// malformed JSON.
pub fn reject_duplicate_keys(bytes: &[u8]) -> Result<(), Error> {
    match tern_cni::json::from_slice_unique_keys(bytes) {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().starts_with(tern_cni::json::DUPLICATE_KEY) => Err(Error::new(
            code::INVALID_NETWORK_CONFIG,
            format!("duplicated keys are not allowed: {e}"),
        )),
        Err(e) => Err(Error::decode(format!(
            "error unmarshall network config: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(v: Value) -> NetConf {
        NetConf::parse(serde_json::to_vec(&v).unwrap()).unwrap()
    }

    #[test]
    fn reference_fields_and_precedence() {
        let c = conf(json!({
            "cniVersion": "1.0.0", "name": "n", "type": "tern-tuning",
            "sysctl": {"net.ipv4.tcp_keepalive_time": "300", "net.ipv4.tcp_fin_timeout": "30"},
            "mac": "0a:00:00:00:00:01", "mtu": 1400, "promisc": true, "txQLen": 0,
            "RuntimeConfig": {"mac": "0a:00:00:00:00:03"},
            "args": {"cni": {"sysctl": {"net.ipv4.tcp_fin_timeout": "20", "net.ipv4.tcp_keepalive_probes": "3"},
                              "allmulti": false}}
        }));
        let args = CniArgs::parse("IgnoreUnknown=1;MAC=0a:00:00:00:00:02;K8S_POD_NAME=x").unwrap();
        let t = TuningConf::from_netconf(&c, &args).unwrap();
        assert_eq!(
            t.sysctl,
            vec![
                ("net.ipv4.tcp_keepalive_time".to_string(), "300".to_string()),
                ("net.ipv4.tcp_fin_timeout".to_string(), "20".to_string()),
                ("net.ipv4.tcp_keepalive_probes".to_string(), "3".to_string()),
            ]
        );
        assert_eq!(t.mac.as_deref(), Some("0a:00:00:00:00:03"));
        assert_eq!(
            (t.mtu, t.promisc, t.allmulti, t.txqlen),
            (Some(1400), Some(true), Some(false), Some(0))
        );
        assert_eq!(t.data_dir, PathBuf::from(DEFAULT_DATA_DIR));

        let c = conf(
            json!({"cniVersion": "1.0.0", "name": "n", "type": "t", "mac": "0a:00:00:00:00:01",
                            "args": {"cni": {"mac": "0a:00:00:00:00:04"}}, "runtimeConfig": {"mac": "0a:00:00:00:00:03"}}),
        );
        assert_eq!(
            TuningConf::from_netconf(&c, &CniArgs::default())
                .unwrap()
                .mac
                .as_deref(),
            Some("0a:00:00:00:00:04")
        );
        // mtu 0 means untouched; sysctl null means none.
        let c = conf(
            json!({"cniVersion": "1.0.0", "name": "n", "type": "t", "mtu": 0, "sysctl": null}),
        );
        let t = TuningConf::from_netconf(&c, &CniArgs::default()).unwrap();
        assert_eq!((t.mtu, t.sysctl.len()), (None, 0));
        assert!(!t.has_link_attributes());
    }

    #[test]
    fn wrong_types_and_unknown_args() {
        let c = conf(
            json!({"cniVersion": "1.0.0", "name": "n", "type": "t", "sysctl": {"net.ipv4.tcp_syncookies": 1}}),
        );
        let e = TuningConf::from_netconf(&c, &CniArgs::default()).unwrap_err();
        assert_eq!(e.code, code::DECODE_FAILURE, "{e}");
        let c = conf(json!({"cniVersion": "1.0.0", "name": "n", "type": "t", "mtu": -1}));
        assert_eq!(
            TuningConf::from_netconf(&c, &CniArgs::default())
                .unwrap_err()
                .code,
            code::DECODE_FAILURE
        );
        let c = conf(json!({"cniVersion": "1.0.0", "name": "n", "type": "t"}));
        let e = TuningConf::from_netconf(&c, &CniArgs::parse("FOO=1").unwrap()).unwrap_err();
        assert_eq!(e.code, code::INVALID_ENVIRONMENT, "{e}");
    }

    #[test]
    fn duplicate_keys_rejected_anywhere() {
        let raw = br#"{"cniVersion":"1.0.0","name":"n","type":"t","sysctl":{"net.ipv4.tcp_syncookies":"1","net.ipv4.tcp_syncookies":"0"}}"#;
        let e = reject_duplicate_keys(raw).unwrap_err();
        assert_eq!(e.code, 7);
        assert!(
            e.msg.contains("duplicated") && e.msg.contains("net.ipv4.tcp_syncookies"),
            "{e}"
        );
        let raw = br#"{"plugins":[{"args":{"cni":{"Sysctl":{"a":"1","a":"2"}}}}]}"#;
        assert!(reject_duplicate_keys(raw).is_err());
        assert!(reject_duplicate_keys(br#"{"x":{"a":1,"a":2}}"#).is_err());
        assert_eq!(reject_duplicate_keys(b"{").unwrap_err().code, 6);
    }
}

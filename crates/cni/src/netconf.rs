//! The network configuration a plugin reads on stdin (CNI spec section 3, "Deriving request
//! configuration"): bounded in size, tolerant the way runtimes need it, validated before use.
//!
//! Known keys are matched case-insensitively and renamed to their spec spelling (Go's decoder does
//! this, and runtimes and tests send `RuntimeConfig`); unknown keys are kept untouched in
//! [`NetConf::raw`] so a plugin can forward the whole config to a delegate.

use std::io::Read;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::env::validate_network_name;
use crate::error::{code, Error};
use crate::result::{CniResult, Dns};
use crate::version::Version;

/// Largest netconf accepted on stdin, in bytes (1 MiB).
pub const MAX_NETCONF_BYTES: usize = 1 << 20;

/// Top-level keys every plugin config may carry, in their spec spelling.
pub const STANDARD_KEYS: &[&str] = &[
    "cniVersion",
    "cniVersions",
    "name",
    "type",
    "capabilities",
    "runtimeConfig",
    "args",
    "ipMasq",
    "ipam",
    "dns",
    "prevResult",
    "disableCheck",
    "disableGC",
    "logLevel",
    "logFile",
];

/// Reads stdin up to [`MAX_NETCONF_BYTES`].
///
/// # Errors
/// Code 5 when reading fails; code 7 `network configuration is larger than 1 MiB` past the bound.
pub fn read_bounded(r: &mut dyn Read) -> Result<Vec<u8>, Error> {
    let mut buf = Vec::new();
    r.take(MAX_NETCONF_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io(format!("read network configuration from stdin: {e}")))?;
    if buf.len() > MAX_NETCONF_BYTES {
        return Err(
            Error::invalid_config("network configuration is larger than 1 MiB")
                .with_details("a CNI netconf on stdin is limited to 1048576 bytes"),
        );
    }
    Ok(buf)
}

/// Renames keys of `map` that match one of `known` case-insensitively to the known spelling.
/// An exact spelling wins over a case variant when both are present.
pub fn normalize_keys(map: &mut Map<String, Value>, known: &[&str]) {
    let renames: Vec<(String, &str)> = map
        .keys()
        .filter_map(|k| {
            known
                .iter()
                .find(|want| k != *want && k.eq_ignore_ascii_case(want))
                .map(|want| (k.clone(), *want))
        })
        .collect();
    for (from, to) in renames {
        if let Some(v) = map.remove(&from) {
            map.entry(to.to_owned()).or_insert(v);
        }
    }
}

fn object_or_empty(v: Option<&Value>, key: &str) -> Result<Map<String, Value>, Error> {
    match v {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(other) => Err(Error::decode(format!(
            "error unmarshall network config: {key} must be an object, got {other}"
        ))),
    }
}

/// A parsed network configuration for one plugin invocation.
#[derive(Clone, Debug)]
pub struct NetConf {
    /// `cniVersion`, validated against the supported versions.
    pub cni_version: Version,
    /// `name`, the network name, validated.
    pub name: String,
    /// `type`, the plugin's binary name.
    pub plugin_type: String,
    /// The whole config object with standard keys normalised and unknown keys kept.
    pub raw: Map<String, Value>,
    /// `runtimeConfig` (empty when absent or `null`).
    pub runtime_config: Map<String, Value>,
    /// `args.cni` (CONVENTIONS.md "args in network config"; empty when absent).
    pub args_cni: Map<String, Value>,
    /// `ipam` (empty when absent).
    pub ipam: Map<String, Value>,
    /// `dns` when present; `Some` even if every field is empty lists (ptp treats that as "set").
    pub dns: Option<Dns>,
    /// `prevResult` converted to the internal shape, when present.
    pub prev_result: Option<CniResult>,
    /// `logLevel` (`error`, `warn`, `info`, `debug`, `trace`).
    pub log_level: Option<String>,
    /// `logFile`: a path; absent means stderr.
    pub log_file: Option<String>,
    /// The bytes exactly as received, for delegation (CNI spec section 4 wants the full config).
    pub bytes: Vec<u8>,
}

impl NetConf {
    /// Parses and validates a netconf.
    ///
    /// # Errors
    /// Code 6 `error unmarshall network config: …` for bad JSON or wrong types; code 7 for a missing
    /// or invalid network name; code 1 for an unsupported `cniVersion` (absent counts as 0.1.0, as
    /// the reference library reads it) or a `prevResult` of an unsupported version (one of another supported version is
    /// converted, see [`CniResult::from_prev_result`]).
    pub fn parse(bytes: Vec<u8>) -> Result<NetConf, Error> {
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| Error::decode(format!("error unmarshall network config: {e}")))?;
        let Value::Object(mut raw) = value else {
            return Err(Error::decode(
                "error unmarshall network config: the network configuration must be a JSON object",
            ));
        };
        normalize_keys(&mut raw, STANDARD_KEYS);
        let string_field = |key: &str| -> Result<Option<String>, Error> {
            match raw.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(Error::decode(format!(
                    "error unmarshall network config: {key} must be a string, got {other}"
                ))),
            }
        };
        let name = string_field("name")?.unwrap_or_default();
        validate_network_name(&name)?;
        let version = string_field("cniVersion")?.unwrap_or_else(|| "0.1.0".into());
        let cni_version = Version::parse_config(&version)?;
        let plugin_type = string_field("type")?.unwrap_or_default();
        let log_level = string_field("logLevel")?;
        let log_file = string_field("logFile")?;
        if let Some(f) = log_file.as_deref().filter(|f| !f.is_empty()) {
            if !f.starts_with('/') {
                return Err(Error::invalid_config(format!(
                    "logFile {f:?} is not an absolute path: a plugin's working directory is the runtime's"
                )));
            }
        }
        if let Some(l) = log_level.as_deref() {
            if !["error", "warn", "info", "debug", "trace", ""]
                .contains(&l.to_ascii_lowercase().as_str())
            {
                return Err(Error::invalid_config(format!(
                    "logLevel {l:?} is not one of error, warn, info, debug, trace"
                )));
            }
        }
        let runtime_config = object_or_empty(raw.get("runtimeConfig"), "runtimeConfig")?;
        let mut args = object_or_empty(raw.get("args"), "args")?;
        normalize_keys(&mut args, &["cni"]);
        let args_cni = object_or_empty(args.get("cni"), "args.cni")?;
        let ipam = object_or_empty(raw.get("ipam"), "ipam")?;
        let dns = match raw.get("dns") {
            None | Some(Value::Null) => None,
            Some(v) => Some(serde_json::from_value(v.clone()).map_err(|e| {
                Error::decode(format!("error unmarshall network config: dns: {e}"))
            })?),
        };
        let prev_result = match raw.get("prevResult") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                CniResult::from_prev_result(v, cni_version)
                    .map_err(|e| e.context("could not parse prevResult"))?,
            ),
        };
        Ok(NetConf {
            cni_version,
            name,
            plugin_type,
            raw,
            runtime_config,
            args_cni,
            ipam,
            dns,
            prev_result,
            log_level,
            log_file,
            bytes,
        })
    }

    /// Decodes the plugin's own view of the config into `T`, matching `known` keys
    /// case-insensitively first.
    ///
    /// # Errors
    /// Code 6 `failed to load netconf: …` naming the serde error (field and expected type).
    pub fn decode<T: DeserializeOwned>(&self, known: &[&str]) -> Result<T, Error> {
        let mut map = self.raw.clone();
        normalize_keys(&mut map, known);
        serde_json::from_value(Value::Object(map))
            .map_err(|e| Error::decode(format!("failed to load netconf: {e}")))
    }

    /// The `ipam.type`, i.e. the delegate to run.
    ///
    /// # Errors
    /// Code 7 `no IPAM plugin named: ipam.type is missing` when absent or empty.
    pub fn ipam_type(&self) -> Result<&str, Error> {
        match self.ipam.get("type").and_then(Value::as_str) {
            Some(t) if !t.is_empty() => Ok(t),
            _ => Err(Error::new(
                code::INVALID_NETWORK_CONFIG,
                "no IPAM plugin named: ipam.type is missing",
            )),
        }
    }

    /// The config bytes with `runtimeConfig.<key>` set to `value`, for passing per-invocation data
    /// (e.g. the `ips` capability) to a delegate.
    ///
    /// # Errors
    /// Code 6 if the config can no longer be serialised (not expected).
    pub fn bytes_with_runtime_config(&self, key: &str, value: Value) -> Result<Vec<u8>, Error> {
        let mut raw = self.raw.clone();
        let mut rc = self.runtime_config.clone();
        rc.insert(key.to_owned(), value);
        raw.insert("runtimeConfig".into(), Value::Object(rc));
        serde_json::to_vec(&Value::Object(raw)).map_err(|e| Error::decode(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
            (json!({"cniVersion": 1, "name": "n"}), 6),
            (
                json!({"cniVersion": "1.0.0", "name": "n", "runtimeConfig": []}),
                6,
            ),
            (
                json!({"cniVersion": "1.0.0", "name": "n", "prevResult": {"cniVersion": "0.2.0"}}),
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
            parse(json!({"cniVersion": "1.0.0", "name": "n", "runtimeConfig": {"x": 1}})).unwrap();
        let b = c
            .bytes_with_runtime_config("ips", json!(["10.0.0.9"]))
            .unwrap();
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["runtimeConfig"], json!({"x": 1, "ips": ["10.0.0.9"]}));
    }
}

//! The network configuration a plugin reads on stdin (CNI spec section 3, "Deriving request
//! configuration"): bounded in size, tolerant the way runtimes need it, validated before use.
//!
//! Known keys are matched case-insensitively and renamed to their spec spelling (Go's decoder does
//! this, and runtimes and tests send `RuntimeConfig`); unknown keys are kept untouched in
//! [`NetConf::raw`] so a plugin can forward the whole config to a delegate.
//!
//! Strict where Go's decoder is silent ([`check`]): the same key twice at any depth, or two case
//! variants of one known key, `type` missing or not a plugin name, standard fields of the wrong
//! JSON type, `dns` nameservers that are not addresses. DEL alone is tolerant of duplicates and
//! nameservers ([`NetConf::parse_for_del`]): a config an older plugin accepted at ADD must still
//! be deletable.

pub mod check;
mod del;

use std::io::Read;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::env::validate_network_name;
use crate::error::{code, Error};
use crate::json::{self, DUPLICATE_KEY};
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
    "logFileMaxBytes",
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
    /// `logFileMaxBytes`: the size (bytes, at least 1) past which `logFile` is rotated to
    /// `<logFile>.1` at the next invocation; absent means [`tern_node::logging::DEFAULT_LOG_FILE_MAX_BYTES`].
    pub log_file_max_bytes: Option<u64>,
    /// The bytes exactly as received, for delegation (CNI spec section 4 wants the full config).
    pub bytes: Vec<u8>,
    /// Parsed for DEL ([`NetConf::parse_for_del`]): duplicate keys and case variants resolved as
    /// Go does (the last wins) instead of refused, nameservers not checked.
    pub tolerant: bool,
    /// DEL only: the fields ADD would refuse that [`NetConf::parse_for_del`] dropped (`"<field>:
    /// <why>"`), to be logged once the log is set up. Empty for other verbs.
    pub ignored: Vec<String>,
}

impl NetConf {
    /// Parses and validates a netconf.
    ///
    /// # Errors
    /// Code 6 `error unmarshall network config: …` for bad JSON or a standard field of the wrong
    /// JSON type (see [`check::standard_types`], [`check::dns`]; `prevResult` not an object or an
    /// address in it without a prefix length); code 7 for a key given twice (at any depth, or as
    /// case variants of a standard key), a missing or invalid network name or `type`, a `dns`
    /// nameserver that is not an IP address; code 1 for an unsupported `cniVersion` (absent counts
    /// as 0.1.0, as the reference library reads it) or a `prevResult` of an unsupported version
    /// (one of another supported version is converted, see [`CniResult::from_prev_result`]).
    pub fn parse(bytes: Vec<u8>) -> Result<NetConf, Error> {
        NetConf::parse_with(bytes, false)
    }

    /// Parses a netconf for DEL: as [`NetConf::parse`], except that a key given twice (at any
    /// depth, or as two case variants of a known key) is resolved as the reference does (the
    /// last wins) and `dns` nameservers are not checked, so that a config an older plugin accepted
    /// at ADD can still be deleted. And DEL never strands a sandbox (a runtime retries a failed
    /// DEL forever and keeps the sandbox and its IP meanwhile): every field DEL does not need to
    /// find what ADD made (`type`, `capabilities`, `ipMasq`, `disableCheck`, `disableGC`,
    /// `cniVersions`, `runtimeConfig`, `args`, `dns`, `prevResult`, the log settings, an invalid
    /// `ipam.type` or a non-object `ipam`) is dropped when ADD would refuse its value, listed in
    /// [`NetConf::ignored`]; [`NetConf::bytes`] then holds the config without them, so a delegate
    /// (IPAM) can read it and release too.
    ///
    /// # Errors
    /// Bad JSON or not an object (code 6), a missing or invalid `name` (7) or an unsupported
    /// `cniVersion` (1): what names the network and the version of the answer.
    pub fn parse_for_del(bytes: Vec<u8>) -> Result<NetConf, Error> {
        NetConf::parse_with(bytes, true)
    }

    fn parse_with(bytes: Vec<u8>, tolerant: bool) -> Result<NetConf, Error> {
        let value = match json::from_slice_unique_keys(&bytes) {
            Ok(v) => v,
            Err(e) if e.to_string().starts_with(DUPLICATE_KEY) => {
                if !tolerant {
                    return Err(Error::invalid_config(format!(
                        "error unmarshall network config: {e}"
                    ))
                    .with_details("each key may appear once in an object"));
                }
                tracing::warn!("netconf has a duplicate key, the last one wins: {e}");
                serde_json::from_slice(&bytes)
                    .map_err(|e| Error::decode(format!("error unmarshall network config: {e}")))?
            }
            Err(e) => {
                return Err(Error::decode(format!(
                    "error unmarshall network config: {e}"
                )))
            }
        };
        let Value::Object(mut raw) = value else {
            return Err(Error::decode(
                "error unmarshall network config: the network configuration must be a JSON object",
            ));
        };
        if !tolerant {
            check::case_variants(&raw, STANDARD_KEYS, "")?;
        }
        normalize_keys(&mut raw, STANDARD_KEYS);
        let name = string_field(&raw, "name")?.unwrap_or_default();
        validate_network_name(&name)?;
        let version = string_field(&raw, "cniVersion")?.unwrap_or_else(|| "0.1.0".into());
        let cni_version = Version::parse_config(&version)?;
        let mut bytes = bytes;
        let ignored = if tolerant {
            let ignored = del::drop_invalid_for_del(&mut raw, cni_version);
            if !ignored.is_empty() {
                bytes = serde_json::to_vec(&Value::Object(raw.clone()))
                    .map_err(|e| Error::decode(format!("error unmarshall network config: {e}")))?;
            }
            ignored
        } else {
            Vec::new()
        };
        let plugin_type = match raw.get("type") {
            None if tolerant => String::new(),
            _ => check::top_type(&raw)?,
        };
        let (log_level, log_file, log_file_max_bytes) = log_settings(&raw)?;
        let runtime_config = object_or_empty(raw.get("runtimeConfig"), "runtimeConfig")?;
        let mut args = object_or_empty(raw.get("args"), "args")?;
        if !tolerant {
            check::case_variants(&args, &["cni"], "args.")?;
        }
        normalize_keys(&mut args, &["cni"]);
        let args_cni = object_or_empty(args.get("cni"), "args.cni")?;
        let ipam = object_or_empty(raw.get("ipam"), "ipam")?;
        check::standard_types(&raw, &ipam)?;
        let dns = match raw.get("dns") {
            None | Some(Value::Null) => None,
            Some(v) => Some(check::dns("dns", v, !tolerant)?),
        };
        let prev_result = match raw.get("prevResult") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                CniResult::from_prev_result(v, cni_version)
                    .map_err(|e| e.context("could not parse prevResult"))?,
            ),
        };
        if let (Some(prev), false) = (&prev_result, tolerant) {
            let dns = serde_json::to_value(&prev.dns).unwrap_or_default();
            check::dns("prevResult.dns", &dns, true)?;
        }
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
            log_file_max_bytes,
            bytes,
            tolerant,
            ignored,
        })
    }

    /// Decodes the plugin's own view of the config into `T`, matching `known` keys
    /// case-insensitively first. A struct is never read from a JSON array ([`json::from_value`]).
    ///
    /// # Errors
    /// Code 6 `failed to load netconf: …` naming the serde error (field and expected type); code
    /// 7 when two case variants of one `known` key are given (unless [`NetConf::tolerant`]).
    pub fn decode<T: DeserializeOwned>(&self, known: &[&str]) -> Result<T, Error> {
        let mut map = self.raw.clone();
        if !self.tolerant {
            check::case_variants(&map, known, "")?;
        }
        normalize_keys(&mut map, known);
        json::from_value(Value::Object(map))
            .map_err(|e| Error::decode(format!("failed to load netconf: {e}")))
    }

    /// The `ipam.type`, i.e. the delegate to run.
    ///
    /// # Errors
    /// Code 7 `no IPAM plugin named: ipam.type is missing` when absent or empty, or naming what is
    /// wrong with it (see [`check::plugin_type`]).
    pub fn ipam_type(&self) -> Result<&str, Error> {
        match self.ipam.get("type").and_then(Value::as_str) {
            Some(t) if !t.is_empty() => check::plugin_type("ipam.type", t).map(|()| t),
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

fn string_field(raw: &Map<String, Value>, key: &str) -> Result<Option<String>, Error> {
    match raw.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(Error::decode(format!(
            "error unmarshall network config: {key} must be a string, got {other}"
        ))),
    }
}

/// `logLevel`, `logFile` and `logFileMaxBytes`, in that order.
type LogSettings = (Option<String>, Option<String>, Option<u64>);

/// `logLevel`, `logFile` and `logFileMaxBytes`, validated.
///
/// # Errors
/// Code 6 for a wrong JSON type; code 7 for a relative `logFile`, a zero or fractional
/// `logFileMaxBytes`, an unknown `logLevel`.
fn log_settings(raw: &Map<String, Value>) -> Result<LogSettings, Error> {
    let log_level = string_field(raw, "logLevel")?;
    let log_file = string_field(raw, "logFile")?;
    if let Some(f) = log_file.as_deref().filter(|f| !f.is_empty()) {
        if !f.starts_with('/') {
            return Err(Error::invalid_config(format!(
                    "logFile {f:?} is not an absolute path: a plugin's working directory is the runtime's"
                )));
        }
    }
    let log_file_max_bytes =
        match raw.get("logFileMaxBytes") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(0) => return Err(Error::invalid_config(
                    "logFileMaxBytes 0: the log file cap must be at least 1 byte (absent: 10 MiB)",
                )),
                Some(n) => Some(n),
                None => {
                    return Err(Error::invalid_config(format!(
                        "logFileMaxBytes {v} is not a whole number of bytes"
                    )))
                }
            },
        };
    if let Some(l) = log_level.as_deref() {
        if !["error", "warn", "info", "debug", "trace", ""]
            .contains(&l.to_ascii_lowercase().as_str())
        {
            return Err(Error::invalid_config(format!(
                "logLevel {l:?} is not one of error, warn, info, debug, trace"
            )));
        }
    }
    Ok((log_level, log_file, log_file_max_bytes))
}

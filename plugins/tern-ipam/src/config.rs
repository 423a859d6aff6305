//! The `ipam` section, read exactly as host-local reads it (containernetworking/plugins,
//! `plugins/ipam/host-local/backend/allocator/{config,range,range_set}.go`), and validated before
//! anything touches the disk.
//!
//! Invariant: an [`IpamConfig`] only holds canonical ranges: the subnet is a network address with
//! at least two host bits, `rangeStart <= rangeEnd`, both inside the subnet and neither the
//! network address nor (IPv4) the broadcast address, one address family per range set, and no two
//! ranges (in a set or across sets) overlap. So every address a range hands out lies inside it
//! (case-28; host-local accepts a start past the defaulted end and walks out of the subnet).

use std::net::IpAddr;
use std::path::PathBuf;

use ipnetwork::IpNetwork;
use serde::Deserialize;
use serde_json::{Map, Value};
use tern_cni::netconf::normalize_keys;
use tern_cni::{CniArgs, NetConf, Route, Version};

use crate::error::IpamError;

mod addr;
mod range;

pub use addr::{canonical_ip, ip_to_u128, next_ip};
use range::check_syntax;
pub use range::{Range, RangeSet, RawRange};

/// Where leases live when `dataDir` is absent or empty (host-local's default).
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

/// The `subnet` value that stands for the node's `spec.podCIDRs` (see `podcidr`).
pub const USE_POD_CIDR: &str = "usePodCidr";

/// Keys of the `ipam` object, in host-local's spelling (matched case-insensitively, as Go does).
const IPAM_KEYS: &[&str] = &[
    "type",
    "subnet",
    "rangeStart",
    "rangeEnd",
    "gateway",
    "routes",
    "dataDir",
    "resolvConf",
    "ranges",
];

/// Keys of one range object.
const RANGE_KEYS: &[&str] = &["subnet", "rangeStart", "rangeEnd", "gateway"];

/// Keys of `runtimeConfig` that tern-ipam reads.
const RUNTIME_KEYS: &[&str] = &["ips", "ipRanges"];

#[derive(Debug, Deserialize)]
struct RawIpam {
    #[serde(flatten)]
    legacy: RawRange,
    #[serde(default)]
    routes: Option<Vec<Route>>,
    #[serde(default, rename = "dataDir")]
    data_dir: Option<String>,
    #[serde(default, rename = "resolvConf")]
    resolv_conf: Option<String>,
    #[serde(default)]
    ranges: Option<Vec<Vec<RawRange>>>,
}

/// The validated IPAM configuration of one invocation.
#[derive(Clone, Debug)]
pub struct IpamConfig {
    /// The network name: the store directory is `<data_dir>/<name>`.
    pub name: String,
    /// The config's `cniVersion`.
    pub cni_version: Version,
    /// Range sets in allocation order: `runtimeConfig.ipRanges`, the legacy top-level range,
    /// then `ranges`. One address is handed out per set.
    pub ranges: Vec<RangeSet>,
    /// `routes`, returned verbatim in the result.
    pub routes: Vec<Route>,
    /// `dataDir`, default [`DEFAULT_DATA_DIR`].
    pub data_dir: PathBuf,
    /// `resolvConf`: a resolv.conf whose settings become the result's DNS.
    pub resolv_conf: Option<PathBuf>,
    /// Requested addresses in order: `CNI_ARGS` `IP=`, `args.cni.ips`, `runtimeConfig.ips`
    /// (prefixes dropped, duplicates removed).
    pub requested: Vec<IpAddr>,
}

/// The part of the config DEL and GC need: where the leases are. These verbs must work even when
/// the ranges have become invalid, so they do not validate them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreLocation {
    /// The network name.
    pub name: String,
    /// `dataDir`, default [`DEFAULT_DATA_DIR`].
    pub data_dir: PathBuf,
}

fn ipam_map(conf: &NetConf) -> Result<Map<String, Value>, IpamError> {
    match conf.raw.get("ipam") {
        None | Some(Value::Null) => Err(IpamError::Config("IPAM config missing 'ipam' key".into())),
        Some(Value::Object(m)) => {
            let mut m = m.clone();
            normalize_keys(&mut m, IPAM_KEYS);
            if let Some(Value::Array(sets)) = m.get_mut("ranges") {
                for set in sets {
                    normalize_range_set(set);
                }
            }
            Ok(m)
        }
        Some(other) => Err(IpamError::Decode(format!(
            "ipam must be an object, got {other}"
        ))),
    }
}

fn normalize_range_set(set: &mut Value) {
    if let Value::Array(ranges) = set {
        for r in ranges {
            if let Value::Object(m) = r {
                normalize_keys(m, RANGE_KEYS);
            }
        }
    }
}

fn data_dir(raw: Option<&str>) -> PathBuf {
    match raw {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(DEFAULT_DATA_DIR),
    }
}

impl StoreLocation {
    /// Reads `name` and `ipam.dataDir`.
    ///
    /// # Errors
    /// `IPAM config missing 'ipam' key`; a decode error when `dataDir` is not a string.
    pub fn load(conf: &NetConf) -> Result<StoreLocation, IpamError> {
        let m = ipam_map(conf)?;
        let dir = match m.get("dataDir") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(other) => {
                return Err(IpamError::Decode(format!(
                    "ipam.dataDir must be a string, got {other}"
                )))
            }
        };
        Ok(StoreLocation {
            name: conf.name.clone(),
            data_dir: data_dir(dir),
        })
    }
}

impl IpamConfig {
    /// Reads and validates the configuration of one invocation, as host-local's `LoadIPAMConfig`.
    ///
    /// # Errors
    /// [`IpamError::Config`] with host-local's messages (`IPAM config missing 'ipam' key`, `no IP
    /// ranges specified`, `invalid range set <i>: <err>`, `range set <i> overlaps with <j>`);
    /// [`IpamError::Args`] for `CNI_ARGS` (unknown keys without `IgnoreUnknown`, `invalid IP
    /// address x`); [`IpamError::Decode`] for wrong JSON types.
    pub fn load(conf: &NetConf, args: &CniArgs) -> Result<IpamConfig, IpamError> {
        IpamConfig::load_with(conf, args, &mut || {
            Err(IpamError::PodCidr(
                "usePodCidr: the node's podCIDRs are not available to this verb".into(),
            ))
        })
    }

    /// As [`IpamConfig::load`], with `pod_cidrs` giving the node's pod CIDRs for range sets of
    /// the form `{"subnet": "usePodCidr"}` (and a top-level `"subnet": "usePodCidr"`): each such
    /// set becomes one range set per pod CIDR, in the node's order (dual-stack when it has two).
    /// `pod_cidrs` is called at most once, and only when a set needs it.
    ///
    /// # Errors
    /// As [`IpamConfig::load`]; `pod_cidrs`'s error; [`IpamError::Config`] when `usePodCidr`
    /// shares its range set or comes with `rangeStart`, `rangeEnd` or `gateway`.
    pub fn load_with(
        conf: &NetConf,
        args: &CniArgs,
        pod_cidrs: &mut dyn FnMut() -> Result<Vec<String>, IpamError>,
    ) -> Result<IpamConfig, IpamError> {
        let m = ipam_map(conf)?;
        let raw: RawIpam = tern_cni::json::from_value(Value::Object(m))
            .map_err(|e| IpamError::Decode(format!("ipam: {e}")))?;

        let mut requested: Vec<IpAddr> = Vec::new();
        let mut push = |ip: IpAddr| {
            let ip = canonical_ip(ip);
            if !requested.contains(&ip) {
                requested.push(ip);
            }
        };
        if !args.pairs().is_empty() {
            args.check_known(&["IP"])
                .map_err(|e| IpamError::Args(e.msg))?;
            if let Some(list) = args.get("IP").filter(|v| !v.is_empty()) {
                for item in list.split(',') {
                    push(parse_requested(item.trim()).map_err(IpamError::Args)?);
                }
            }
        }
        for ip in requested_list(conf.args_cni.get("ips"), "args.cni.ips")? {
            push(ip);
        }
        let mut runtime = conf.runtime_config.clone();
        normalize_keys(&mut runtime, RUNTIME_KEYS);
        for ip in requested_list(runtime.get("ips"), "runtimeConfig.ips")? {
            push(ip);
        }

        let mut raw_sets: Vec<Vec<RawRange>> = Vec::new();
        if let Some(v) = runtime.get_mut("ipRanges") {
            if let Value::Array(sets) = v {
                for set in sets.iter_mut() {
                    normalize_range_set(set);
                }
            }
            let sets: Option<Vec<Vec<RawRange>>> = tern_cni::json::from_value(v.clone())
                .map_err(|e| IpamError::Decode(format!("runtimeConfig.ipRanges: {e}")))?;
            raw_sets.extend(sets.unwrap_or_default());
        }
        if raw.legacy.subnet.is_some() {
            raw_sets.push(vec![raw.legacy.clone()]);
        }
        raw_sets.extend(raw.ranges.unwrap_or_default());
        let raw_sets = expand_pod_cidr(raw_sets, pod_cidrs)?;
        if raw_sets.is_empty() {
            return Err(IpamError::Config("no IP ranges specified".into()));
        }
        // Go reports unparsable addresses while decoding, before any range set is validated, so
        // without the `invalid range set <i>:` prefix.
        for r in raw_sets.iter().flatten() {
            check_syntax(r).map_err(IpamError::Config)?;
        }
        let mut ranges = Vec::with_capacity(raw_sets.len());
        for (i, set) in raw_sets.iter().enumerate() {
            ranges.push(
                RangeSet::canonicalize(set)
                    .map_err(|e| IpamError::Config(format!("invalid range set {i}: {e}")))?,
            );
        }
        for (i, a) in ranges.iter().enumerate() {
            for (j, b) in ranges.iter().enumerate().skip(i + 1) {
                if a.overlaps(b) {
                    return Err(IpamError::Config(format!(
                        "range set {i} overlaps with {j}"
                    )));
                }
            }
        }
        Ok(IpamConfig {
            name: conf.name.clone(),
            cni_version: conf.cni_version,
            ranges,
            routes: raw.routes.unwrap_or_default(),
            data_dir: data_dir(raw.data_dir.as_deref()),
            resolv_conf: raw.resolv_conf.filter(|s| !s.is_empty()).map(PathBuf::from),
            requested,
        })
    }

    /// Where the leases live.
    pub fn location(&self) -> StoreLocation {
        StoreLocation {
            name: self.name.clone(),
            data_dir: self.data_dir.clone(),
        }
    }
}

fn expand_pod_cidr(
    sets: Vec<Vec<RawRange>>,
    pod_cidrs: &mut dyn FnMut() -> Result<Vec<String>, IpamError>,
) -> Result<Vec<Vec<RawRange>>, IpamError> {
    let is_pod_cidr = |r: &RawRange| r.subnet.as_deref() == Some(USE_POD_CIDR);
    if !sets.iter().flatten().any(is_pod_cidr) {
        return Ok(sets);
    }
    let cidrs = pod_cidrs()?;
    let mut out = Vec::with_capacity(sets.len() + 1);
    for set in sets {
        if !set.iter().any(is_pod_cidr) {
            out.push(set);
            continue;
        }
        let alone = set.len() == 1
            && [&set[0].range_start, &set[0].range_end, &set[0].gateway]
                .iter()
                .all(|f| f.as_deref().unwrap_or("").is_empty());
        if !alone {
            return Err(IpamError::Config(format!(
                "{USE_POD_CIDR} must be alone in its range set, without rangeStart, rangeEnd or gateway"
            )));
        }
        out.extend(cidrs.iter().map(|c| {
            vec![RawRange {
                subnet: Some(c.clone()),
                ..RawRange::default()
            }]
        }));
    }
    Ok(out)
}

fn requested_list(v: Option<&Value>, what: &str) -> Result<Vec<IpAddr>, IpamError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => parse_requested(s).map_err(IpamError::Decode),
                other => Err(IpamError::Decode(format!(
                    "{what}: invalid IP address {other}"
                ))),
            })
            .collect(),
        Some(other) => Err(IpamError::Decode(format!(
            "{what} must be a list, got {other}"
        ))),
    }
}

/// Parses a requested address, `ip` or `ip/prefix` (the prefix is dropped).
///
/// # Errors
/// `invalid IP address <s>`, host-local's text.
pub fn parse_requested(s: &str) -> Result<IpAddr, String> {
    let parsed = if s.contains('/') {
        s.parse::<IpNetwork>().ok().map(|n| n.ip())
    } else {
        s.parse::<IpAddr>().ok()
    };
    parsed
        .map(canonical_ip)
        .ok_or_else(|| format!("invalid IP address {s}"))
}

#[cfg(test)]
mod tests;

//! The `ipam` section, read exactly as host-local reads it (containernetworking/plugins,
//! `plugins/ipam/host-local/backend/allocator/{config,range,range_set}.go`), and validated before
//! anything touches the disk.
//!
//! Invariant: an [`IpamConfig`] only holds canonical ranges: the subnet is a network address with
//! at least two host bits, `rangeStart <= rangeEnd`, both inside the subnet, one address family per
//! range set, and no two ranges (in a set or across sets) overlap.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use ipnetwork::IpNetwork;
use serde::Deserialize;
use serde_json::{Map, Value};
use tern_cni::netconf::normalize_keys;
use tern_cni::{CniArgs, NetConf, Route, Version};

use crate::error::IpamError;

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

/// One range as written in the config: every field optional, strings not yet parsed.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct RawRange {
    /// First address handed out, inclusive.
    #[serde(default, rename = "rangeStart")]
    pub range_start: Option<String>,
    /// Last address handed out, inclusive.
    #[serde(default, rename = "rangeEnd")]
    pub range_end: Option<String>,
    /// The subnet, `a.b.c.d/n` or `x::/n`.
    #[serde(default)]
    pub subnet: Option<String>,
    /// The gateway; default: the subnet's first address.
    #[serde(default)]
    pub gateway: Option<String>,
}

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

/// A canonical range of one subnet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// The subnet, its address being the network address.
    pub subnet: IpNetwork,
    /// First address handed out, inclusive.
    pub range_start: IpAddr,
    /// Last address handed out, inclusive.
    pub range_end: IpAddr,
    /// The gateway, never handed out. Not required to lie inside the subnet (as host-local).
    pub gateway: IpAddr,
}

impl Range {
    /// Whether `ip` is inside this range (same family, in the subnet, between start and end).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical_ip(ip);
        ip.is_ipv4() == self.subnet.is_ipv4()
            && self.subnet.contains(ip)
            && ip >= self.range_start
            && ip <= self.range_end
    }

    /// Whether the two ranges share an address (host-local's `Range.Overlaps`).
    pub fn overlaps(&self, other: &Range) -> bool {
        self.subnet.is_ipv4() == other.subnet.is_ipv4()
            && (self.contains(other.range_start)
                || self.contains(other.range_end)
                || other.contains(self.range_start)
                || other.contains(self.range_end))
    }

    /// The number of addresses handed out from this range: start to end, minus the gateway when
    /// it lies between them. Saturates at `u128::MAX`.
    pub fn capacity(&self) -> u128 {
        let n = ip_to_u128(self.range_end)
            .saturating_sub(ip_to_u128(self.range_start))
            .saturating_add(1);
        if self.contains(self.gateway) {
            n - 1
        } else {
            n
        }
    }

    /// Canonicalizes a configured range (host-local's `Range.Canonicalize`).
    ///
    /// # Errors
    /// host-local's messages: `invalid CIDR address: x`, `invalid IP address: x`, `Network <cidr>
    /// too small to allocate from`, `Network has host bits set. …`, `RangeStart <ip> not in network
    /// <cidr>`, `RangeEnd …`, `IP <nil> not v4 nor v6` for a missing subnet.
    pub fn canonicalize(raw: &RawRange) -> Result<Range, String> {
        let subnet_s = raw
            .subnet
            .as_deref()
            .ok_or_else(|| "IP <nil> not v4 nor v6".to_owned())?;
        let given = parse_cidr(subnet_s)?;
        let given = match (given, canonical_ip(given.ip())) {
            (IpNetwork::V6(n), IpAddr::V4(v4)) if n.prefix() >= 96 => {
                IpNetwork::new(IpAddr::V4(v4), n.prefix() - 96).map_err(|e| e.to_string())?
            }
            (n, _) => n,
        };
        let bits = if given.is_ipv4() { 32 } else { 128 };
        if given.prefix() > bits - 2 {
            return Err(format!("Network {given} too small to allocate from"));
        }
        if given.ip() != given.network() {
            return Err(format!(
                "Network has host bits set. For a subnet mask of length {} the network address is {}",
                given.prefix(),
                given.network()
            ));
        }
        let subnet = given;
        let gateway = match opt_ip(&raw.gateway)? {
            Some(g) => g,
            None => next_ip(subnet.network()),
        };
        let given_end = opt_ip(&raw.range_end)?;
        let in_subnet = |ip: IpAddr| ip.is_ipv4() == subnet.is_ipv4() && subnet.contains(ip);
        let range_start = match opt_ip(&raw.range_start)? {
            Some(s) => {
                // host-local checks the start against the explicit end too, so a start past the
                // end is reported as a bad RangeStart.
                if !in_subnet(s) || given_end.is_some_and(|e| same_family(s, e) && s > e) {
                    return Err(format!("RangeStart {s} not in network {subnet}"));
                }
                s
            }
            None => next_ip(subnet.network()),
        };
        let range_end = match given_end {
            Some(e) => {
                if !in_subnet(e) || e < range_start {
                    return Err(format!("RangeEnd {e} not in network {subnet}"));
                }
                e
            }
            None => last_ip(subnet),
        };
        Ok(Range {
            subnet,
            range_start,
            range_end,
            gateway,
        })
    }
}

impl fmt::Display for Range {
    /// `<start>-<end>`, as host-local prints a range in messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.range_start, self.range_end)
    }
}

/// A range set: a pool of same-family ranges from which one address is handed out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeSet(pub Vec<Range>);

impl RangeSet {
    /// Canonicalizes a configured range set (host-local's `RangeSet.Canonicalize`).
    ///
    /// # Errors
    /// `empty range set`, `mixed address families`, `subnets <a> and <b> overlap`, or a range's
    /// error.
    pub fn canonicalize(raw: &[RawRange]) -> Result<RangeSet, String> {
        if raw.is_empty() {
            return Err("empty range set".into());
        }
        let mut ranges = Vec::with_capacity(raw.len());
        for r in raw {
            let r = Range::canonicalize(r)?;
            if let Some(first) = ranges.first() {
                let first: &Range = first;
                if first.subnet.is_ipv4() != r.subnet.is_ipv4() {
                    return Err("mixed address families".into());
                }
            }
            ranges.push(r);
        }
        for (i, a) in ranges.iter().enumerate() {
            for b in &ranges[i + 1..] {
                if a.overlaps(b) {
                    return Err(format!("subnets {a} and {b} overlap"));
                }
            }
        }
        Ok(RangeSet(ranges))
    }

    /// The range holding `ip`.
    ///
    /// # Errors
    /// `<ip> not in range set <set>`.
    pub fn range_for(&self, ip: IpAddr) -> Result<&Range, String> {
        let ip = canonical_ip(ip);
        self.0
            .iter()
            .find(|r| r.contains(ip))
            .ok_or_else(|| format!("{ip} not in range set {self}"))
    }

    /// Whether some range of the set holds `ip`.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.range_for(ip).is_ok()
    }

    /// Whether any range of `self` overlaps any of `other`.
    pub fn overlaps(&self, other: &RangeSet) -> bool {
        self.0.iter().any(|a| other.0.iter().any(|b| a.overlaps(b)))
    }

    /// Whether the set is IPv4.
    pub fn is_ipv4(&self) -> bool {
        self.0.first().is_some_and(|r| r.subnet.is_ipv4())
    }
}

impl fmt::Display for RangeSet {
    /// The ranges joined by `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
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
        let raw: RawIpam = serde_json::from_value(Value::Object(m))
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
            let sets: Option<Vec<Vec<RawRange>>> = serde_json::from_value(v.clone())
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

fn check_syntax(r: &RawRange) -> Result<(), String> {
    if let Some(s) = &r.subnet {
        parse_cidr(s)?;
    }
    for ip in [&r.range_start, &r.range_end, &r.gateway] {
        opt_ip(ip)?;
    }
    Ok(())
}

fn parse_cidr(s: &str) -> Result<IpNetwork, String> {
    if !s.contains('/') {
        return Err(format!("invalid CIDR address: {s}"));
    }
    s.parse::<IpNetwork>()
        .map_err(|_| format!("invalid CIDR address: {s}"))
}

fn opt_ip(s: &Option<String>) -> Result<Option<IpAddr>, String> {
    match s.as_deref() {
        // Go's net.IP decodes "" as nil: the field counts as absent.
        None | Some("") => Ok(None),
        Some(s) => s
            .parse::<IpAddr>()
            .map(|ip| Some(canonical_ip(ip)))
            .map_err(|_| format!("invalid IP address: {s}")),
    }
}

/// An IPv4-mapped IPv6 address as IPv4 (Go's `To4`), anything else unchanged.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

/// The address as an integer (IPv4 in the low 32 bits).
pub fn ip_to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The next address of the same family, wrapping at the top (host-local's `ip.NextIP`).
pub fn next_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4).wrapping_add(1))),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6).wrapping_add(1))),
    }
}

/// The default `rangeEnd`: the broadcast address minus one for IPv4, the last address for IPv6.
fn last_ip(subnet: IpNetwork) -> IpAddr {
    match subnet {
        IpNetwork::V4(n) => IpAddr::V4(Ipv4Addr::from(u32::from(n.broadcast()).wrapping_sub(1))),
        IpNetwork::V6(n) => {
            let host_bits = 128 - u32::from(n.prefix());
            let mask = if host_bits == 128 {
                u128::MAX
            } else {
                (1u128 << host_bits) - 1
            };
            IpAddr::V6(Ipv6Addr::from(u128::from(n.network()) | mask))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(ipam: Value) -> NetConf {
        conf_with(json!({"cniVersion": "1.0.0", "name": "net1", "type": "x", "ipam": ipam}))
    }

    fn conf_with(v: Value) -> NetConf {
        NetConf::parse(serde_json::to_vec(&v).unwrap()).unwrap()
    }

    fn load(ipam: Value) -> Result<IpamConfig, String> {
        IpamConfig::load(&conf(ipam), &CniArgs::default()).map_err(|e| e.to_string())
    }

    fn range(subnet: &str) -> RawRange {
        RawRange {
            subnet: Some(subnet.into()),
            ..RawRange::default()
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn defaults_of_a_v4_and_a_v6_range() {
        let r = Range::canonicalize(&range("10.1.2.0/24")).unwrap();
        assert_eq!(
            (r.range_start, r.range_end, r.gateway),
            (ip("10.1.2.1"), ip("10.1.2.254"), ip("10.1.2.1"))
        );
        assert_eq!(r.to_string(), "10.1.2.1-10.1.2.254");
        assert_eq!(r.capacity(), 253);
        let r = Range::canonicalize(&range("2001:db8:1::/64")).unwrap();
        assert_eq!(
            (r.range_start, r.range_end, r.gateway),
            (
                ip("2001:db8:1::1"),
                ip("2001:db8:1::ffff:ffff:ffff:ffff"),
                ip("2001:db8:1::1")
            )
        );
        let r = Range::canonicalize(&range("10.0.0.0/30")).unwrap();
        assert_eq!(
            (r.range_start, r.range_end),
            (ip("10.0.0.1"), ip("10.0.0.2"))
        );
    }

    #[test]
    fn range_validation_messages_are_host_locals() {
        let cases: Vec<(RawRange, &str)> = vec![
            (range("10.0.0.0/31"), "Network 10.0.0.0/31 too small to allocate from"),
            (range("10.0.0.1/32"), "Network 10.0.0.1/32 too small to allocate from"),
            (range("2001:db8::/127"), "Network 2001:db8::/127 too small to allocate from"),
            (
                range("10.1.2.3/24"),
                "Network has host bits set. For a subnet mask of length 24 the network address is 10.1.2.0",
            ),
            (range("10.1.2.0"), "invalid CIDR address: 10.1.2.0"),
            (range("nonsense/8"), "invalid CIDR address: nonsense/8"),
            (RawRange::default(), "IP <nil> not v4 nor v6"),
            (
                RawRange {
                    range_start: Some("10.1.3.5".into()),
                    ..range("10.1.2.0/24")
                },
                "RangeStart 10.1.3.5 not in network 10.1.2.0/24",
            ),
            (
                RawRange {
                    range_end: Some("10.1.3.5".into()),
                    ..range("10.1.2.0/24")
                },
                "RangeEnd 10.1.3.5 not in network 10.1.2.0/24",
            ),
            (
                RawRange {
                    range_start: Some("10.1.2.50".into()),
                    range_end: Some("10.1.2.40".into()),
                    ..range("10.1.2.0/24")
                },
                "RangeStart 10.1.2.50 not in network 10.1.2.0/24",
            ),
            (
                RawRange {
                    gateway: Some("bogus".into()),
                    ..range("10.1.2.0/24")
                },
                "invalid IP address: bogus",
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(Range::canonicalize(&raw).unwrap_err(), want, "{raw:?}");
        }
    }

    #[test]
    fn explicit_start_end_gateway_are_kept() {
        let r = Range::canonicalize(&RawRange {
            range_start: Some("10.1.2.9".into()),
            range_end: Some("10.1.2.20".into()),
            gateway: Some("10.1.2.254".into()),
            ..range("10.1.2.0/24")
        })
        .unwrap();
        assert_eq!(r.to_string(), "10.1.2.9-10.1.2.20");
        assert_eq!(r.gateway, ip("10.1.2.254"));
        assert!(r.contains(ip("10.1.2.9")) && r.contains(ip("10.1.2.20")));
        assert!(!r.contains(ip("10.1.2.8")) && !r.contains(ip("10.1.2.21")));
        assert!(!r.contains(ip("2001:db8::1")));
        assert_eq!(r.capacity(), 12, "the gateway is outside start..end");
        // Empty strings count as absent, as Go decodes them.
        let r = Range::canonicalize(&RawRange {
            range_start: Some(String::new()),
            ..range("10.1.2.0/24")
        })
        .unwrap();
        assert_eq!(r.range_start, ip("10.1.2.1"));
    }

    #[test]
    fn range_set_rules() {
        assert_eq!(RangeSet::canonicalize(&[]).unwrap_err(), "empty range set");
        assert_eq!(
            RangeSet::canonicalize(&[range("10.0.0.0/24"), range("2001:db8::/64")]).unwrap_err(),
            "mixed address families"
        );
        assert_eq!(
            RangeSet::canonicalize(&[range("10.0.0.0/24"), range("10.0.0.0/16")]).unwrap_err(),
            "subnets 10.0.0.1-10.0.0.254 and 10.0.0.1-10.0.255.254 overlap"
        );
        let s = RangeSet::canonicalize(&[range("10.0.0.0/24"), range("10.0.1.0/24")]).unwrap();
        assert_eq!(s.to_string(), "10.0.0.1-10.0.0.254,10.0.1.1-10.0.1.254");
        assert_eq!(
            s.range_for(ip("10.0.1.7")).unwrap().subnet.to_string(),
            "10.0.1.0/24"
        );
        assert_eq!(
            s.range_for(ip("10.0.2.7")).unwrap_err(),
            "10.0.2.7 not in range set 10.0.0.1-10.0.0.254,10.0.1.1-10.0.1.254"
        );
        assert!(
            s.contains(ip("::ffff:10.0.0.9")),
            "IPv4-mapped counts as IPv4"
        );
    }

    #[test]
    fn config_errors_are_host_locals() {
        let cases = [
            (json!({"type": "tern-ipam"}), "no IP ranges specified"),
            (
                json!({"type": "tern-ipam", "ranges": [[]]}),
                "invalid range set 0: empty range set",
            ),
            (
                json!({"subnet": "10.0.0.0/24", "ranges": [[{"subnet": "10.0.0.0/25"}]]}),
                "range set 0 overlaps with 1",
            ),
            (
                json!({"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.1.0.0/33"}]]}),
                "invalid CIDR address: 10.1.0.0/33",
            ),
        ];
        for (ipam, want) in cases {
            assert_eq!(load(ipam.clone()).unwrap_err(), want, "{ipam}");
        }
        let missing = conf_with(json!({"cniVersion": "1.0.0", "name": "n"}));
        let e = IpamConfig::load(&missing, &CniArgs::default()).unwrap_err();
        assert_eq!(e.to_string(), "IPAM config missing 'ipam' key");
        assert_eq!(e.to_cni().code, 7);
        let e = load(json!({"subnet": 5})).unwrap_err();
        assert!(e.starts_with("failed to load netconf: ipam:"), "{e}");
    }

    #[test]
    fn range_order_is_runtime_then_legacy_then_ranges() {
        let c = conf_with(json!({
            "cniVersion": "1.0.0", "name": "n",
            "RuntimeConfig": {"ipRanges": [[{"Subnet": "10.9.0.0/24"}]]},
            "ipam": {
                "type": "tern-ipam",
                "subnet": "10.1.0.0/24",
                "ranges": [[{"subnet": "10.2.0.0/24"}, {"subnet": "10.3.0.0/24"}], [{"subnet": "2001:db8::/64"}]],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.1.0.254"}],
                "DataDir": "/tmp/x",
                "resolvConf": "/etc/resolv.conf"
            }
        }));
        let c = IpamConfig::load(&c, &CniArgs::default()).unwrap();
        let sets: Vec<String> = c.ranges.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            sets,
            [
                "10.9.0.1-10.9.0.254",
                "10.1.0.1-10.1.0.254",
                "10.2.0.1-10.2.0.254,10.3.0.1-10.3.0.254",
                "2001:db8::1-2001:db8::ffff:ffff:ffff:ffff"
            ]
        );
        assert_eq!(c.routes.len(), 2);
        assert_eq!(c.routes[1].gw, Some(ip("10.1.0.254")));
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(c.resolv_conf, Some(PathBuf::from("/etc/resolv.conf")));
        let d = load(json!({"subnet": "10.1.0.0/24", "dataDir": ""})).unwrap();
        assert_eq!(d.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert_eq!(d.location().name, "net1");
    }

    #[test]
    fn requested_addresses_from_every_source_in_order() {
        let c = conf_with(json!({
            "cniVersion": "1.0.0", "name": "n",
            "args": {"cni": {"ips": ["10.1.0.7/24", "10.1.0.5"]}},
            "runtimeConfig": {"ips": ["2001:db8::9/64", "10.1.0.5"]},
            "ipam": {"type": "tern-ipam", "subnet": "10.1.0.0/24"}
        }));
        let args =
            CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.1.0.3, 10.1.0.4/24").unwrap();
        let c = IpamConfig::load(&c, &args).unwrap();
        let want: Vec<IpAddr> = [
            "10.1.0.3",
            "10.1.0.4",
            "10.1.0.7",
            "10.1.0.5",
            "2001:db8::9",
        ]
        .iter()
        .map(|s| ip(s))
        .collect();
        assert_eq!(c.requested, want);
    }

    #[test]
    fn bad_requested_addresses() {
        let c = conf(json!({"subnet": "10.1.0.0/24"}));
        let e = IpamConfig::load(&c, &CniArgs::parse("IP=10.1.0.300").unwrap()).unwrap_err();
        assert_eq!(
            (e.to_string().as_str(), e.to_cni().code),
            ("invalid IP address 10.1.0.300", 4)
        );
        let e = IpamConfig::load(&c, &CniArgs::parse("K8S_POD_NAME=x;IP=10.1.0.3").unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("unknown args"), "{e}");
        let c = conf_with(json!({
            "cniVersion": "1.0.0", "name": "n",
            "runtimeConfig": {"ips": ["nope"]},
            "ipam": {"subnet": "10.1.0.0/24"}
        }));
        let e = IpamConfig::load(&c, &CniArgs::default()).unwrap_err();
        assert!(e.to_string().contains("invalid IP address nope"), "{e}");
    }

    #[test]
    fn use_pod_cidr_expands_in_place() {
        let c = conf(json!({"subnet": "usePodCidr", "ranges": [[{"subnet": "10.50.0.0/24"}]]}));
        let mut calls = 0;
        let cfg = IpamConfig::load_with(&c, &CniArgs::default(), &mut || {
            calls += 1;
            Ok(vec!["10.244.1.0/24".into(), "fd00:244:1::/64".into()])
        })
        .unwrap();
        assert_eq!(calls, 1);
        let sets: Vec<String> = cfg.ranges.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            sets,
            [
                "10.244.1.1-10.244.1.254",
                "fd00:244:1::1-fd00:244:1:0:ffff:ffff:ffff:ffff",
                "10.50.0.1-10.50.0.254"
            ]
        );
        let c = conf(json!({"ranges": [[{"subnet": "usePodCidr"}, {"subnet": "10.50.0.0/24"}]]}));
        let e = IpamConfig::load_with(&c, &CniArgs::default(), &mut || Ok(vec![])).unwrap_err();
        assert!(e.to_string().contains("must be alone"), "{e}");
        let c = conf(json!({"subnet": "usePodCidr"}));
        let e = IpamConfig::load(&c, &CniArgs::default()).unwrap_err();
        assert_eq!(e.to_cni().code, 11);
        let plain = conf(json!({"subnet": "10.50.0.0/24"}));
        IpamConfig::load_with(&plain, &CniArgs::default(), &mut || panic!("not needed")).unwrap();
    }

    #[test]
    fn store_location_ignores_ranges() {
        let c = conf(json!({"subnet": "garbage", "dataDir": "/srv/leases"}));
        assert_eq!(
            StoreLocation::load(&c).unwrap(),
            StoreLocation {
                name: "net1".into(),
                data_dir: "/srv/leases".into()
            }
        );
    }
}

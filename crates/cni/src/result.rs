//! CNI results (SPEC.md section 5, "Success"): one internal shape, printed in any supported version.
//!
//! The internal form is the 1.1.0 result. Parsing accepts every version from 0.3.0 up and tolerates
//! what real runtimes send (a stray `ips[].version` in a 1.x result, unknown keys). Printing follows
//! the reference library's JSON: 0.x results always carry `ips[].version` and `dns`; 1.x results omit
//! empty `dns`; fields a version does not know are dropped.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{code, Error};
use crate::version::{Family, Version};

/// An interface created or adjusted by a plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interface {
    /// Interface name.
    pub name: String,
    /// Hardware address, lower-case hex with colons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// MTU in bytes (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The netns path of the interface; absent for host interfaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// vhost-user socket path (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_path: Option<String>,
    /// PCI ID (1.1.0).
    #[serde(default, rename = "pciID", skip_serializing_if = "Option::is_none")]
    pub pci_id: Option<String>,
}

/// An IP address assigned to an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpConfig {
    /// Index into `interfaces`; absent in IPAM results.
    pub interface: Option<usize>,
    /// Address with its prefix length, e.g. `10.99.0.2/24`.
    pub address: IpNetwork,
    /// Default gateway for this subnet, if any.
    pub gateway: Option<IpAddr>,
}

/// A route the plugin installed or wants installed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Route {
    /// Destination subnet.
    pub dst: IpNetwork,
    /// Next hop; absent means the default gateway of the family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    /// Route MTU (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Advertised MSS (1.1.0).
    #[serde(default, rename = "advmss", skip_serializing_if = "Option::is_none")]
    pub adv_mss: Option<u32>,
    /// Route priority / metric (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// Routing table (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    /// Route scope, as the kernel's `rtm_scope` (1.1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u32>,
}

impl Route {
    /// A route to `dst` through `gw` with none of the 1.1.0 extras.
    pub fn new(dst: IpNetwork, gw: Option<IpAddr>) -> Route {
        Route {
            dst,
            gw,
            mtu: None,
            adv_mss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }

    fn strip_1_1_fields(&mut self) {
        self.mtu = None;
        self.adv_mss = None;
        self.priority = None;
        self.table = None;
        self.scope = None;
    }
}

/// DNS settings (the `dns` dictionary of SPEC.md).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    /// Nameserver addresses, in priority order.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub nameservers: Vec<String>,
    /// Local domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Search domains.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub search: Vec<String>,
    /// Resolver options.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub options: Vec<String>,
}

impl Dns {
    /// True when no field is set.
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.as_deref().unwrap_or("").is_empty()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A CNI result, in the 1.1.0 shape. `cniVersion` is not stored: it is chosen when printing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CniResult {
    /// Interfaces created or adjusted.
    pub interfaces: Vec<Interface>,
    /// Assigned addresses.
    pub ips: Vec<IpConfig>,
    /// Routes.
    pub routes: Vec<Route>,
    /// DNS settings.
    pub dns: Dns,
}

#[derive(Deserialize)]
struct WireIp {
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    interface: Option<usize>,
    address: String,
    #[serde(default)]
    gateway: Option<String>,
}

#[derive(Deserialize)]
struct WireResult {
    #[serde(default, deserialize_with = "null_as_default")]
    interfaces: Vec<Interface>,
    #[serde(default, deserialize_with = "null_as_default")]
    ips: Vec<WireIp>,
    #[serde(default, deserialize_with = "null_as_default")]
    routes: Vec<Route>,
    #[serde(default, deserialize_with = "null_as_default")]
    dns: Dns,
}

fn decode_err(what: impl std::fmt::Display) -> Error {
    Error::decode(format!("could not parse result: {what}"))
}

impl CniResult {
    /// Parses a result of any supported version. Returns the result and its `cniVersion` when the
    /// JSON carries one.
    ///
    /// `ips[].version` is checked against the address family when present (0.x results always
    /// carry it; a stray one in a 1.x result is tolerated, as the reference library does).
    ///
    /// # Errors
    /// Code 1 for a `cniVersion` outside 0.3.0–1.1.0 (legacy 0.1/0.2 results are not supported);
    /// code 6 for malformed JSON, addresses or routes.
    pub fn from_json(v: &Value) -> Result<(CniResult, Option<Version>), Error> {
        let version = match v.get("cniVersion") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(Version::parse(s).ok_or_else(|| {
                Error::new(code::INCOMPATIBLE_VERSION, "incompatible CNI versions").with_details(
                    format!(
                        "result is {s:?}, plugin supports {}",
                        Version::supported_list()
                    ),
                )
            })?),
            Some(other) => return Err(decode_err(format!("cniVersion is not a string: {other}"))),
        };
        let wire: WireResult = serde_json::from_value(v.clone()).map_err(decode_err)?;
        let mut ips = Vec::with_capacity(wire.ips.len());
        for ip in wire.ips {
            let address: IpNetwork = ip
                .address
                .parse()
                .map_err(|e| decode_err(format!("invalid address {:?}: {e}", ip.address)))?;
            if let Some(fam) = ip.version.as_deref() {
                let expect = if address.is_ipv4() { "4" } else { "6" };
                if fam != expect {
                    return Err(decode_err(format!(
                        "ips entry {} has version {fam:?}, expected {expect:?}",
                        ip.address
                    )));
                }
            }
            let gateway = match ip.gateway.as_deref() {
                None | Some("") => None,
                Some(g) => Some(
                    g.parse()
                        .map_err(|e| decode_err(format!("invalid gateway {g:?}: {e}")))?,
                ),
            };
            if let Some(idx) = ip.interface {
                if idx >= wire.interfaces.len() {
                    return Err(decode_err(format!(
                        "ips entry {} names interface {idx}, but there are {}",
                        ip.address,
                        wire.interfaces.len()
                    )));
                }
            }
            ips.push(IpConfig {
                interface: ip.interface,
                address,
                gateway,
            });
        }
        Ok((
            CniResult {
                interfaces: wire.interfaces,
                ips,
                routes: wire.routes,
                dns: wire.dns,
            },
            version,
        ))
    }

    /// The result as JSON in version `v`, key order as the reference library prints it.
    ///
    /// Converting down drops what `v` does not know (interface `mtu`/`socketPath`/`pciID` and the
    /// route extras below 1.1.0) and adds `ips[].version` for 0.x.
    pub fn to_json(&self, v: Version) -> Value {
        let mut out = Map::new();
        out.insert("cniVersion".into(), Value::String(v.as_str().into()));
        let legacy_fields = v < Version::V1_1_0;
        if !self.interfaces.is_empty() {
            let ifaces: Vec<Value> = self
                .interfaces
                .iter()
                .map(|i| {
                    let mut i = i.clone();
                    if legacy_fields {
                        i.mtu = None;
                        i.socket_path = None;
                        i.pci_id = None;
                    }
                    serde_json::to_value(i).unwrap_or(Value::Null)
                })
                .collect();
            out.insert("interfaces".into(), Value::Array(ifaces));
        }
        if !self.ips.is_empty() {
            let ips: Vec<Value> = self
                .ips
                .iter()
                .map(|ip| {
                    let mut m = Map::new();
                    if v.family() == Family::V0 {
                        let fam = if ip.address.is_ipv4() { "4" } else { "6" };
                        m.insert("version".into(), Value::String(fam.into()));
                    }
                    if let Some(idx) = ip.interface {
                        m.insert("interface".into(), Value::from(idx));
                    }
                    m.insert("address".into(), Value::String(ip.address.to_string()));
                    if let Some(gw) = ip.gateway {
                        m.insert("gateway".into(), Value::String(gw.to_string()));
                    }
                    Value::Object(m)
                })
                .collect();
            out.insert("ips".into(), Value::Array(ips));
        }
        if !self.routes.is_empty() {
            let routes: Vec<Value> = self
                .routes
                .iter()
                .map(|r| {
                    let mut r = r.clone();
                    if legacy_fields {
                        r.strip_1_1_fields();
                    }
                    serde_json::to_value(r).unwrap_or(Value::Null)
                })
                .collect();
            out.insert("routes".into(), Value::Array(routes));
        }
        if v.family() == Family::V0 || !self.dns.is_empty() {
            out.insert(
                "dns".into(),
                serde_json::to_value(&self.dns).unwrap_or(Value::Null),
            );
        }
        Value::Object(out)
    }

    /// Parses a `prevResult` for a config of version `config`: its own `cniVersion`, when present,
    /// must be in the same result family (the reference library fails to decode a 0.4.0 result
    /// inside a 1.0.0 config, and the other way round).
    ///
    /// # Errors
    /// Code 1 `incompatible prevResult version` across families; otherwise as [`Self::from_json`].
    pub fn from_prev_result(v: &Value, config: Version) -> Result<CniResult, Error> {
        let (result, version) = CniResult::from_json(v)?;
        if let Some(prev) = version {
            if prev.family() != config.family() {
                return Err(Error::new(code::INCOMPATIBLE_VERSION, "incompatible prevResult version")
                    .with_details(format!(
                        "prevResult is {:?} but the config is {:?}: a runtime must send the result in the config's version",
                        prev.as_str(),
                        config.as_str()
                    )));
            }
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> CniResult {
        CniResult {
            interfaces: vec![
                Interface {
                    name: "tern0123456789a".into(),
                    mac: Some("ee:ee:ee:ee:ee:ee".into()),
                    mtu: Some(1500),
                    ..Default::default()
                },
                Interface {
                    name: "eth0".into(),
                    mac: Some("0a:58:0a:63:00:02".into()),
                    mtu: Some(1500),
                    sandbox: Some("/run/netns/pod".into()),
                    ..Default::default()
                },
            ],
            ips: vec![
                IpConfig {
                    interface: Some(1),
                    address: "10.99.0.2/24".parse().unwrap(),
                    gateway: Some("10.99.0.1".parse().unwrap()),
                },
                IpConfig {
                    interface: Some(1),
                    address: "fd00::2/64".parse().unwrap(),
                    gateway: None,
                },
            ],
            routes: vec![Route {
                priority: Some(100),
                ..Route::new(
                    "0.0.0.0/0".parse().unwrap(),
                    Some("169.254.1.1".parse().unwrap()),
                )
            }],
            dns: Dns::default(),
        }
    }

    fn golden(v: Version) -> Value {
        let v0 = v.family() == Family::V0;
        let v11 = v == Version::V1_1_0;
        let mut host = json!({"name": "tern0123456789a", "mac": "ee:ee:ee:ee:ee:ee"});
        let mut pod = json!({"name": "eth0", "mac": "0a:58:0a:63:00:02"});
        if v11 {
            host["mtu"] = json!(1500);
            pod["mtu"] = json!(1500);
        }
        pod["sandbox"] = json!("/run/netns/pod");
        let mut ip4 = json!({});
        let mut ip6 = json!({});
        if v0 {
            ip4["version"] = json!("4");
            ip6["version"] = json!("6");
        }
        ip4["interface"] = json!(1);
        ip4["address"] = json!("10.99.0.2/24");
        ip4["gateway"] = json!("10.99.0.1");
        ip6["interface"] = json!(1);
        ip6["address"] = json!("fd00::2/64");
        let mut route = json!({"dst": "0.0.0.0/0", "gw": "169.254.1.1"});
        if v11 {
            route["priority"] = json!(100);
        }
        let mut out = json!({
            "cniVersion": v.as_str(),
            "interfaces": [host, pod],
            "ips": [ip4, ip6],
            "routes": [route],
        });
        if v0 {
            out["dns"] = json!({});
        }
        out
    }

    #[test]
    fn prints_golden_json_for_every_version() {
        for v in Version::ALL {
            let printed = sample().to_json(v);
            assert_eq!(printed, golden(v), "version {v}");
            // Key order is the reference library's.
            assert_eq!(
                serde_json::to_string(&printed).unwrap(),
                serde_json::to_string(&golden(v)).unwrap(),
                "version {v}"
            );
        }
    }

    #[test]
    fn converts_between_every_pair_of_versions() {
        for from in Version::ALL {
            for to in Version::ALL {
                let (parsed, ver) = CniResult::from_json(&golden(from)).unwrap();
                assert_eq!(ver, Some(from));
                let mut expected = golden(to);
                // What `from` could not carry is gone for good.
                if from < Version::V1_1_0 && to == Version::V1_1_0 {
                    for i in expected["interfaces"].as_array_mut().unwrap() {
                        i.as_object_mut().unwrap().remove("mtu");
                    }
                    expected["routes"][0]
                        .as_object_mut()
                        .unwrap()
                        .remove("priority");
                }
                assert_eq!(parsed.to_json(to), expected, "{from} -> {to}");
            }
        }
    }

    #[test]
    fn tolerates_stray_version_in_1x_and_nulls() {
        let v = json!({
            "cniVersion": "1.0.0",
            "interfaces": null,
            "ips": [{"version": "4", "address": "10.1.0.5/24"}],
            "routes": null,
            "dns": {"nameservers": null},
            "extra": true
        });
        let (r, _) = CniResult::from_json(&v).unwrap();
        assert_eq!(r.ips[0].address.to_string(), "10.1.0.5/24");
        assert!(r.interfaces.is_empty() && r.routes.is_empty() && r.dns.is_empty());
    }

    #[test]
    fn rejects_bad_results() {
        let cases = [
            json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.2/24"}}),
            json!({"ips": [{"address": "not-an-ip"}]}),
            json!({"ips": [{"version": "6", "address": "10.0.0.2/24"}]}),
            json!({"ips": [{"interface": 3, "address": "10.0.0.2/24"}]}),
            json!({"routes": [{"gw": "10.0.0.1"}]}),
        ];
        for c in cases {
            assert!(CniResult::from_json(&c).is_err(), "{c}");
        }
    }

    #[test]
    fn prev_result_must_match_config_family() {
        let prev = golden(Version::V0_4_0);
        assert!(CniResult::from_prev_result(&prev, Version::V0_3_1).is_ok());
        let e = CniResult::from_prev_result(&prev, Version::V1_0_0).unwrap_err();
        assert_eq!(e.code, 1);
        let prev = golden(Version::V1_1_0);
        assert_eq!(
            CniResult::from_prev_result(&prev, Version::V0_4_0)
                .unwrap_err()
                .code,
            1
        );
        assert!(CniResult::from_prev_result(&prev, Version::V1_0_0).is_ok());
        let mut no_version = golden(Version::V1_0_0);
        no_version.as_object_mut().unwrap().remove("cniVersion");
        assert!(CniResult::from_prev_result(&no_version, Version::V0_4_0).is_ok());
    }
}

//! Reading results of any supported version.
//!
//! Reading results: any supported version's JSON into the internal shape, and a `prevResult`
//! checked against its config's version.

use serde::Deserialize;
use serde_json::Value;

use super::{null_as_default, parse_cidr, CniResult, Dns, Interface, IpConfig, Route};
use crate::error::{code, Error};
use crate::version::Version;

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
    /// code 6 for malformed JSON, addresses or routes: anything but an object where one is
    /// expected, an address or route destination without a prefix length.
    pub fn from_json(v: &Value) -> Result<(CniResult, Option<Version>), Error> {
        let version = match v.get("cniVersion") {
            // An empty version is an absent one, as the reference's ParsePrevResult reads it.
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
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
        if !v.is_object() {
            return Err(decode_err(format!("a result must be an object, got {v}")));
        }
        let wire: WireResult = crate::json::from_value(v.clone()).map_err(decode_err)?;
        let mut ips = Vec::with_capacity(wire.ips.len());
        for ip in wire.ips {
            let address =
                parse_cidr(&ip.address).map_err(|e| decode_err(format!("invalid address: {e}")))?;
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

    /// Parses a `prevResult` for a config of version `config`, as the reference library's
    /// `ParsePrevResult` does: a result without `cniVersion` is read as the config's version, and a
    /// result of any supported version is accepted and converted (the internal shape holds every
    /// version; printing in the config's version drops what that version cannot carry), so a chain
    /// keeps working while its plugins and the runtime roll out different spec versions.
    ///
    /// # Errors
    /// Code 1 `incompatible CNI versions` for a `cniVersion` no supported version matches (0.1.0,
    /// 0.2.0, unknown); code 6 when it is not an object or is malformed (see [`Self::from_json`]).
    pub fn from_prev_result(v: &Value, config: Version) -> Result<CniResult, Error> {
        if !v.is_object() {
            return Err(decode_err(format!("prevResult must be an object, got {v}")));
        }
        let (result, version) = CniResult::from_json(v)?;
        if let Some(prev) = version.filter(|p| *p != config) {
            tracing::debug!(prev = %prev, config = %config, "prevResult converted to the config's version");
        }
        Ok(result)
    }
}

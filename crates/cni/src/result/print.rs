//! Printing results in a chosen version.
//!
//! Printing results: the internal shape as JSON of a chosen version, in the reference library's
//! key order, dropping what that version does not know.

use serde_json::{Map, Value};

use super::CniResult;
use crate::version::{Family, Version};

impl CniResult {
    /// The result a reader of [`Self::to_json`]`(v)` parses back ([`CniResult::from_json`]), without
    /// the JSON: what `v` does not know dropped (interface `mtu`/`socketPath`/`pciID` and the
    /// route extras below 1.1.0, an empty `dns` in 1.x). Only for a result whose `ips` name existing
    /// interfaces ([`Self::interfaces_indexed`]); another would not parse back at all.
    pub fn printed_in(mut self, v: Version) -> CniResult {
        if v < Version::V1_1_0 {
            for i in &mut self.interfaces {
                i.mtu = None;
                i.socket_path = None;
                i.pci_id = None;
            }
            for r in &mut self.routes {
                r.strip_1_1_fields();
            }
        }
        // 1.x prints no `dns` that counts as empty (an empty `domain` alone): it reads back as none.
        if v.family() == Family::V1 && self.dns.is_empty() {
            self.dns = super::Dns::default();
        }
        self
    }

    /// Whether every `ips[].interface` is an index into `interfaces` (as parsing requires).
    pub fn interfaces_indexed(&self) -> bool {
        self.ips
            .iter()
            .all(|ip| ip.interface.is_none_or(|i| i < self.interfaces.len()))
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
}

//! CNI results (CNI spec section 5, "Success"): one internal shape, printed in any supported version.
//!
//! The internal form is the 1.1.0 result. Parsing accepts every version from 0.3.0 up and tolerates
//! what real runtimes send (a stray `ips[].version` in a 1.x result, unknown keys). Printing follows
//! the reference library's JSON: 0.x results always carry `ips[].version` and `dns`; 1.x results omit
//! empty `dns`; fields a version does not know are dropped.

mod parse;
mod print;

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

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
    /// Destination subnet, with its prefix length (`10.0.0.0/8`; a bare address is refused).
    #[serde(deserialize_with = "cidr")]
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

/// DNS settings (the `dns` dictionary of the CNI spec).
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

/// An address with its prefix length, as Go's `net.ParseCIDR` requires: `10.1.0.5` alone is not
/// read as `10.1.0.5/32`.
fn cidr<'de, D: serde::Deserializer<'de>>(d: D) -> Result<IpNetwork, D::Error> {
    let s = String::deserialize(d)?;
    parse_cidr(&s).map_err(serde::de::Error::custom)
}

/// Parses `addr/prefix`, refusing a bare address.
///
/// # Errors
/// A message naming the value.
pub fn parse_cidr(s: &str) -> Result<IpNetwork, String> {
    if !s.contains('/') {
        return Err(format!("{s:?} has no prefix length (address/length)"));
    }
    s.parse().map_err(|e| format!("invalid CIDR {s:?}: {e}"))
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

//! VXLAN devices and the two tables that steer them: neighbours (`RTM_*NEIGH`, `AF_INET` /
//! `AF_INET6`: an inner next hop → the remote VTEP's MAC) and the device's forwarding database
//! (`AF_BRIDGE` with `NTF_SELF`: a remote VTEP's MAC → its underlay address), as `ip link add
//! type vxlan`, `ip neigh` and `bridge fdb` write them.
//!
//! Invariant: every entry is written permanent (`NUD_PERMANENT`) with create-or-replace, so one
//! call converges whatever was there; a device is created with learning off, so the kernel never
//! adds FDB entries of its own (the source: `drivers/net/vxlan/vxlan_core.c`, `vxlan_snoop` runs
//! only with `VXLAN_F_LEARN`).

use std::net::IpAddr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVxlan, LinkAttribute, LinkInfo, LinkMessage,
};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::link::format_mac;
use super::{Family, Handle};
use crate::error::Result;

/// The settings a VXLAN device is made with (`ip link add NAME type vxlan id VNI dstport PORT
/// local LOCAL nolearning`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanSpec {
    /// The device's name (at most 15 bytes).
    pub name: String,
    /// The VXLAN network identifier (24 bits, `IFLA_VXLAN_ID`).
    pub vni: u32,
    /// The UDP destination port (`IFLA_VXLAN_PORT`; IANA's is 4789, Linux's old default 8472).
    pub port: u16,
    /// This VTEP's underlay address (`IFLA_VXLAN_LOCAL` or `_LOCAL6`); its family is the
    /// underlay's: an IPv6 one makes the device send and receive over IPv6 only.
    pub local: IpAddr,
    /// The device's MTU in bytes.
    pub mtu: u32,
}

/// What the kernel reports of an existing VXLAN device's identity (the fields of [`VxlanSpec`]
/// that cannot be changed in place).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VxlanInfo {
    /// `IFLA_VXLAN_ID`.
    pub vni: Option<u32>,
    /// `IFLA_VXLAN_PORT`.
    pub port: Option<u16>,
    /// `IFLA_VXLAN_LOCAL` or `_LOCAL6`.
    pub local: Option<IpAddr>,
    /// `IFLA_VXLAN_LEARNING`.
    pub learning: Option<bool>,
}

impl VxlanInfo {
    /// Whether a device with this identity serves `spec` (same VNI, port and local address,
    /// learning off).
    pub fn matches(&self, spec: &VxlanSpec) -> bool {
        self.vni == Some(spec.vni)
            && self.port == Some(spec.port)
            && self.local == Some(spec.local)
            && self.learning == Some(false)
    }
}

/// A permanent neighbour entry: an IP address on a link and the MAC it resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Neighbour {
    /// The neighbour's IP address (`NDA_DST`).
    pub ip: IpAddr,
    /// Its link-layer address (`NDA_LLADDR`).
    pub mac: [u8; 6],
}

/// A VXLAN forwarding-database entry: frames for `mac` go to the VTEP at `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FdbEntry {
    /// The remote VTEP device's MAC (`NDA_LLADDR`).
    pub mac: [u8; 6],
    /// The remote VTEP's underlay address (`NDA_DST`).
    pub dst: IpAddr,
}

fn neigh_addr(ip: IpAddr) -> NeighbourAddress {
    match ip {
        IpAddr::V4(v4) => NeighbourAddress::Inet(v4),
        IpAddr::V6(v6) => NeighbourAddress::Inet6(v6),
    }
}

fn neigh_ip(a: &NeighbourAddress) -> Option<IpAddr> {
    match a {
        NeighbourAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        NeighbourAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        // AF_BRIDGE entries carry the VTEP address as raw bytes, 4 or 16 of them.
        NeighbourAddress::Other(b) => match b.len() {
            4 => <[u8; 4]>::try_from(b.as_slice()).ok().map(IpAddr::from),
            16 => <[u8; 16]>::try_from(b.as_slice()).ok().map(IpAddr::from),
            _ => None,
        },
        _ => None,
    }
}

/// The MAC and destination of a neighbour or FDB message.
fn parse_entry(m: &NeighbourMessage) -> (Option<[u8; 6]>, Option<IpAddr>) {
    let mut mac = None;
    let mut ip = None;
    for a in &m.attributes {
        match a {
            NeighbourAttribute::LinkLayerAddress(b) => mac = <[u8; 6]>::try_from(b.as_slice()).ok(),
            NeighbourAttribute::Destination(d) => ip = neigh_ip(d),
            _ => {}
        }
    }
    (mac, ip)
}

fn entry_message(
    family: AddressFamily,
    index: u32,
    mac: Option<[u8; 6]>,
    ip: IpAddr,
) -> NeighbourMessage {
    let mut m = NeighbourMessage::default();
    m.header.family = family;
    m.header.ifindex = index;
    m.header.state = NeighbourState::Permanent;
    if family == AddressFamily::Bridge {
        // The device's own table (`bridge fdb ... self`), not a bridge master's.
        m.header.flags = NeighbourFlags::Own;
    }
    m.attributes
        .push(NeighbourAttribute::Destination(neigh_addr(ip)));
    if let Some(mac) = mac {
        m.attributes
            .push(NeighbourAttribute::LinkLayerAddress(mac.to_vec()));
    }
    m
}

impl Handle {
    /// Creates a VXLAN device from `spec`, down, with learning off and UDP checksums on.
    ///
    /// # Errors
    /// [`Error::Netlink`]: EEXIST when the name is taken; EADDRINUSE when another VXLAN device
    /// already uses this VNI, port and local address; EAFNOSUPPORT for an IPv6 underlay with
    /// IPv6 disabled.
    pub fn create_vxlan(&self, spec: &VxlanSpec) -> Result<()> {
        let mut data = vec![
            InfoVxlan::Id(spec.vni),
            InfoVxlan::Port(spec.port),
            InfoVxlan::Learning(false),
        ];
        match spec.local {
            IpAddr::V4(v4) => data.push(InfoVxlan::Local(v4)),
            IpAddr::V6(v6) => {
                data.push(InfoVxlan::Local6(v6));
                // RFC 8200 allows no zero UDP checksum over IPv6 by default; say it anyway.
                data.push(InfoVxlan::UDPZeroCsumTX(false));
            }
        }
        let mut msg = LinkMessage::default();
        msg.attributes
            .push(LinkAttribute::IfName(spec.name.clone()));
        msg.attributes.push(LinkAttribute::Mtu(spec.mtu));
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Vxlan),
            LinkInfo::Data(InfoData::Vxlan(data)),
        ]));
        let op = format!(
            "create vxlan {} (vni {} dstport {} local {})",
            spec.name, spec.vni, spec.port, spec.local
        );
        self.request(
            &op,
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            None,
        )
        .map_err(|e| super::address::with_ipv6_advice(e, Family::of(&spec.local)))
    }

    /// The VXLAN identity of the link named `name`; `Ok(None)` when there is no such link or it
    /// is not a VXLAN device.
    ///
    /// # Errors
    /// [`Error::Netlink`] for a failed lookup.
    pub fn vxlan_info(&self, name: &str) -> Result<Option<VxlanInfo>> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        let op = format!("get link {name}");
        let answer = match self.get_one(&op, RouteNetlinkMessage::GetLink(msg)) {
            Ok(a) => a,
            Err(e) if e.errno() == Some(libc::ENODEV) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(RouteNetlinkMessage::NewLink(m)) = answer else {
            return Ok(None);
        };
        for attr in m.attributes {
            let LinkAttribute::LinkInfo(infos) = attr else {
                continue;
            };
            for info in infos {
                if let LinkInfo::Data(InfoData::Vxlan(data)) = info {
                    let mut out = VxlanInfo {
                        vni: None,
                        port: None,
                        local: None,
                        learning: None,
                    };
                    for d in data {
                        match d {
                            InfoVxlan::Id(v) => out.vni = Some(v),
                            InfoVxlan::Port(p) => out.port = Some(p),
                            InfoVxlan::Local(a) if !a.is_unspecified() => {
                                out.local = Some(IpAddr::V4(a));
                            }
                            InfoVxlan::Local6(a) if !a.is_unspecified() => {
                                out.local = Some(IpAddr::V6(a));
                            }
                            InfoVxlan::Learning(l) => out.learning = Some(l),
                            _ => {}
                        }
                    }
                    return Ok(Some(out));
                }
            }
        }
        Ok(None)
    }

    /// The permanent neighbour entries of link `index`, both families.
    ///
    /// # Errors
    /// [`Error::Netlink`] when a dump fails.
    pub fn neighbours(&self, index: u32) -> Result<Vec<Neighbour>> {
        let mut out = Vec::new();
        for family in [Family::V4, Family::V6] {
            let msgs = self.dump(
                &format!("dump {family:?} neighbours of link #{index}"),
                || {
                    let mut m = NeighbourMessage::default();
                    m.header.family = family.to_nl();
                    // Strict checking takes the link as NDA_IFINDEX, not in the header.
                    m.attributes.push(NeighbourAttribute::IfIndex(index));
                    RouteNetlinkMessage::GetNeighbour(m)
                },
                None,
            )?;
            for m in msgs {
                let RouteNetlinkMessage::NewNeighbour(m) = m else {
                    continue;
                };
                if m.header.ifindex != index || m.header.state != NeighbourState::Permanent {
                    continue;
                }
                if let (Some(mac), Some(ip)) = parse_entry(&m) {
                    out.push(Neighbour { ip, mac });
                }
            }
        }
        Ok(out)
    }

    /// Adds a permanent neighbour entry, or replaces the one for the same address
    /// (`ip neigh replace IP lladdr MAC dev #index nud permanent`).
    ///
    /// # Errors
    /// [`Error::Netlink`]; ENODEV when the link is gone.
    pub fn replace_neighbour(&self, index: u32, n: &Neighbour) -> Result<()> {
        let family = Family::of(&n.ip).to_nl();
        self.request(
            &format!(
                "replace neighbour {} lladdr {} dev #{index}",
                n.ip,
                format_mac(&n.mac)
            ),
            RouteNetlinkMessage::NewNeighbour(entry_message(family, index, Some(n.mac), n.ip)),
            NLM_F_CREATE | NLM_F_REPLACE,
            None,
        )
    }

    /// Deletes the neighbour entry for `ip` on link `index`.
    ///
    /// # Errors
    /// [`Error::Netlink`]; ENOENT when there is none.
    pub fn del_neighbour(&self, index: u32, ip: IpAddr) -> Result<()> {
        let family = Family::of(&ip).to_nl();
        self.request(
            &format!("delete neighbour {ip} dev #{index}"),
            RouteNetlinkMessage::DelNeighbour(entry_message(family, index, None, ip)),
            0,
            None,
        )
    }

    /// The forwarding-database entries of VXLAN device `index` that have a destination (the
    /// device's own table, `bridge fdb show dev`).
    ///
    /// # Errors
    /// [`Error::Netlink`] when the dump fails.
    pub fn fdb(&self, index: u32) -> Result<Vec<FdbEntry>> {
        let msgs = self.dump(
            &format!("dump fdb of link #{index}"),
            || {
                let mut m = NeighbourMessage::default();
                m.header.family = AddressFamily::Bridge;
                // For AF_BRIDGE the kernel reads the port to dump from the header
                // (`valid_fdb_dump_strict`).
                m.header.ifindex = index;
                RouteNetlinkMessage::GetNeighbour(m)
            },
            None,
        )?;
        let mut out = Vec::new();
        for m in msgs {
            let RouteNetlinkMessage::NewNeighbour(m) = m else {
                continue;
            };
            if m.header.ifindex != index {
                continue;
            }
            if let (Some(mac), Some(dst)) = parse_entry(&m) {
                out.push(FdbEntry { mac, dst });
            }
        }
        Ok(out)
    }

    /// Adds a permanent FDB entry to VXLAN device `index`, or moves the one for the same MAC to
    /// the new destination (`bridge fdb replace MAC dev #index dst DST self permanent`).
    ///
    /// # Errors
    /// [`Error::Netlink`]; EAFNOSUPPORT when `dst`'s family is not the device's underlay's.
    pub fn replace_fdb(&self, index: u32, e: &FdbEntry) -> Result<()> {
        self.request(
            &format!(
                "replace fdb {} dst {} dev #{index}",
                format_mac(&e.mac),
                e.dst
            ),
            RouteNetlinkMessage::NewNeighbour(entry_message(
                AddressFamily::Bridge,
                index,
                Some(e.mac),
                e.dst,
            )),
            NLM_F_CREATE | NLM_F_REPLACE,
            None,
        )
    }

    /// Deletes an FDB entry of VXLAN device `index`.
    ///
    /// # Errors
    /// [`Error::Netlink`]; ENOENT when there is none.
    pub fn del_fdb(&self, index: u32, e: &FdbEntry) -> Result<()> {
        self.request(
            &format!(
                "delete fdb {} dst {} dev #{index}",
                format_mac(&e.mac),
                e.dst
            ),
            RouteNetlinkMessage::DelNeighbour(entry_message(
                AddressFamily::Bridge,
                index,
                Some(e.mac),
                e.dst,
            )),
            0,
            None,
        )
    }
}

#[cfg(test)]
mod tests;

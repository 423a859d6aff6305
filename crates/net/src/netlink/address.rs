//! IP addresses on links (`RTM_NEWADDR` / `RTM_DELADDR` / `RTM_GETADDR`).

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage, AddressScope,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::{ipv6_advice, Family, Handle};
use crate::error::{Error, Result};

/// An address on a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// The address with its prefix length (e.g. `10.0.0.2/32`).
    pub addr: IpNetwork,
    /// Raw `IFA_F_*` flags (linux/if_addr.h); see the `is_*` helpers.
    pub flags: u32,
}

impl Address {
    /// `IFA_F_TENTATIVE`: IPv6 duplicate address detection has not finished.
    pub fn is_tentative(&self) -> bool {
        self.flags & AddressFlags::Tentative.bits() != 0
    }

    /// `IFA_F_NODAD`: added without duplicate address detection.
    pub fn is_nodad(&self) -> bool {
        self.flags & AddressFlags::Nodad.bits() != 0
    }

    /// `IFA_F_DADFAILED`: IPv6 duplicate address detection failed.
    pub fn is_dad_failed(&self) -> bool {
        self.flags & AddressFlags::Dadfailed.bits() != 0
    }
}

fn message(index: u32, addr: &IpNetwork) -> AddressMessage {
    let mut msg = AddressMessage::default();
    msg.header.family = Family::of(&addr.ip()).to_nl();
    msg.header.prefix_len = addr.prefix();
    msg.header.index = index;
    msg.header.scope = AddressScope::Universe;
    // IFA_LOCAL is the interface's own address; IFA_ADDRESS the peer's on point-to-point links
    // and the same address otherwise (as `ip addr add` sends them).
    msg.attributes.push(AddressAttribute::Local(addr.ip()));
    msg.attributes.push(AddressAttribute::Address(addr.ip()));
    msg
}

impl Handle {
    /// Adds `addr` (with its prefix length) to link `index`. `nodad` skips IPv6 duplicate
    /// address detection (`IFA_F_NODAD`), so the address is usable at once.
    ///
    /// # Errors
    /// [`Error::Netlink`]: EEXIST when the address is already there; EACCES/EAFNOSUPPORT for
    /// IPv6 when IPv6 is disabled (the advice says so).
    pub fn add_address(&self, index: u32, addr: IpNetwork, nodad: bool) -> Result<()> {
        let mut msg = message(index, &addr);
        if nodad {
            msg.header.flags = AddressHeaderFlags::Nodad;
            msg.attributes
                .push(AddressAttribute::Flags(AddressFlags::Nodad));
        }
        let family = Family::of(&addr.ip());
        self.request(
            &format!("add address {addr} to link #{index}"),
            RouteNetlinkMessage::NewAddress(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            None,
        )
        .map_err(|e| with_ipv6_advice(e, family))
    }

    /// Removes `addr` from link `index`.
    ///
    /// # Errors
    /// [`Error::Netlink`]: EADDRNOTAVAIL when the address is not there.
    pub fn del_address(&self, index: u32, addr: IpNetwork) -> Result<()> {
        let msg = message(index, &addr);
        self.request(
            &format!("delete address {addr} from link #{index}"),
            RouteNetlinkMessage::DelAddress(msg),
            0,
            None,
        )
    }

    /// The addresses of link `index`, both families, in kernel order.
    ///
    /// # Errors
    /// [`Error::Netlink`] when the dump fails.
    pub fn addresses(&self, index: u32) -> Result<Vec<Address>> {
        let msgs = self.dump(
            &format!("dump addresses of link #{index}"),
            || {
                // With strict checking the kernel filters on ifa_index itself.
                let mut msg = AddressMessage::default();
                msg.header.index = index;
                RouteNetlinkMessage::GetAddress(msg)
            },
            None,
        )?;
        let mut out = Vec::new();
        for m in msgs {
            let RouteNetlinkMessage::NewAddress(m) = m else {
                continue;
            };
            if m.header.index != index {
                continue;
            }
            let mut local: Option<IpAddr> = None;
            let mut address: Option<IpAddr> = None;
            let mut flags = u32::from(m.header.flags.bits());
            for attr in &m.attributes {
                match attr {
                    AddressAttribute::Local(ip) => local = Some(*ip),
                    AddressAttribute::Address(ip) => address = Some(*ip),
                    AddressAttribute::Flags(f) => flags = f.bits(),
                    _ => {}
                }
            }
            let Some(ip) = local.or(address) else {
                continue;
            };
            let addr =
                IpNetwork::new(ip, m.header.prefix_len).map_err(|e| Error::NetlinkProtocol {
                    op: format!("dump addresses of link #{index}"),
                    reason: e.to_string(),
                })?;
            out.push(Address { addr, flags });
        }
        Ok(out)
    }
}

pub(crate) fn with_ipv6_advice(e: Error, family: Family) -> Error {
    match e {
        Error::Netlink { op, errno, advice } => Error::Netlink {
            advice: ipv6_advice(family, errno).or(advice),
            op,
            errno,
        },
        e => e,
    }
}

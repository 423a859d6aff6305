//! Links: lookup, veth creation (peer created directly in its namespace), deletion and the
//! attribute setters the plugins need (up, MTU, MAC, promisc, allmulti, txqueuelen).
//!
//! Every setter is one `RTM_SETLINK` on the link's index, so it acts in the handle's namespace.

use std::os::fd::{AsFd, AsRawFd};

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::Handle;
use crate::error::{Error, Result};
use crate::netns::NetNs;

/// A network interface as the kernel reports it (`RTM_NEWLINK`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface index (`ifi_index`), unique within its namespace.
    pub index: u32,
    /// Interface name (`IFLA_IFNAME`), at most 15 bytes.
    pub name: String,
    /// Link kind from `IFLA_INFO_KIND` (`"veth"`, `"bridge"`...); `None` for `lo` and physical
    /// devices.
    pub kind: Option<String>,
    /// Hardware address (`IFLA_ADDRESS`) when it is a 6-byte Ethernet address.
    pub mac: Option<[u8; 6]>,
    /// MTU in bytes (`IFLA_MTU`).
    pub mtu: u32,
    /// `IFF_UP` is set (administratively up).
    pub up: bool,
    /// `IFF_PROMISC` as requested by user space (the kernel reports `gflags`).
    pub promisc: bool,
    /// `IFF_ALLMULTI` as requested by user space.
    pub allmulti: bool,
    /// Transmit queue length in packets (`IFLA_TXQLEN`).
    pub txqlen: u32,
    /// `IFLA_LINK`: for a veth, its peer's ifindex (in the peer's namespace, which
    /// [`Link::peer_netnsid`] names when it is not this one); `None` when the kernel sends none.
    pub peer_index: Option<u32>,
    /// `IFLA_LINK_NETNSID`: the id, in this link's namespace, of the namespace of its
    /// [`Link::peer_index`]; `None` when that is this namespace.
    pub peer_netnsid: Option<i32>,
}

impl Link {
    fn from_message(msg: LinkMessage) -> Link {
        let mut link = Link {
            index: msg.header.index,
            name: String::new(),
            kind: None,
            mac: None,
            mtu: 0,
            up: msg.header.flags.contains(LinkFlags::Up),
            promisc: msg.header.flags.contains(LinkFlags::Promisc),
            allmulti: msg.header.flags.contains(LinkFlags::Allmulti),
            txqlen: 0,
            peer_index: None,
            peer_netnsid: None,
        };
        for attr in msg.attributes {
            match attr {
                LinkAttribute::IfName(n) => link.name = n,
                LinkAttribute::Mtu(m) => link.mtu = m,
                LinkAttribute::TxQueueLen(q) => link.txqlen = q,
                LinkAttribute::Link(i) => link.peer_index = Some(i),
                LinkAttribute::LinkNetNsId(id) => link.peer_netnsid = Some(id),
                LinkAttribute::Address(a) => link.mac = <[u8; 6]>::try_from(a.as_slice()).ok(),
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        if let LinkInfo::Kind(kind) = info {
                            link.kind = Some(kind.to_string());
                        }
                    }
                }
                _ => {}
            }
        }
        link
    }
}

/// Formats a MAC address as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses `aa:bb:cc:dd:ee:ff` (either case) into a MAC address.
///
/// # Errors
/// [`Error::NetlinkProtocol`] (op `parse mac`) for anything else.
pub fn parse_mac(s: &str) -> Result<[u8; 6]> {
    let bad = || Error::NetlinkProtocol {
        op: "parse mac".into(),
        reason: format!("{s:?} is not a MAC address (aa:bb:cc:dd:ee:ff)"),
    };
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut mac = [0u8; 6];
    for (b, p) in mac.iter_mut().zip(parts) {
        if p.len() != 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    Ok(mac)
}

fn link_op(what: &str, index: u32) -> String {
    format!("{what} link #{index}")
}

impl Handle {
    /// Looks a link up by name. `Ok(None)` when there is none (ENODEV).
    ///
    /// # Errors
    /// [`Error::Netlink`] for any other failure.
    pub fn link_by_name(&self, name: &str) -> Result<Option<Link>> {
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        self.get_link(&format!("get link {name}"), msg)
    }

    /// Looks a link up by index. `Ok(None)` when there is none (ENODEV).
    ///
    /// # Errors
    /// [`Error::Netlink`] for any other failure.
    pub fn link_by_index(&self, index: u32) -> Result<Option<Link>> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        self.get_link(&link_op("get", index), msg)
    }

    fn get_link(&self, op: &str, msg: LinkMessage) -> Result<Option<Link>> {
        match self.get_one(op, RouteNetlinkMessage::GetLink(msg)) {
            Ok(Some(RouteNetlinkMessage::NewLink(m))) => Ok(Some(Link::from_message(m))),
            Ok(Some(other)) => Err(Error::NetlinkProtocol {
                op: op.to_string(),
                reason: format!("expected RTM_NEWLINK, got {:?}", other.message_type()),
            }),
            Ok(None) => Ok(None),
            Err(e) if e.errno() == Some(libc::ENODEV) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// All links of the handle's namespace.
    ///
    /// # Errors
    /// [`Error::Netlink`] when the dump fails.
    pub fn links(&self) -> Result<Vec<Link>> {
        let msgs = self.dump(
            "dump links",
            || RouteNetlinkMessage::GetLink(LinkMessage::default()),
            None,
        )?;
        Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => Some(Link::from_message(l)),
                _ => None,
            })
            .collect())
    }

    /// Creates a veth pair in one request: `name` in this handle's namespace and `peer_name`
    /// directly in `peer_netns` (`IFLA_NET_NS_FD` inside the peer's `VETH_INFO_PEER`), so the
    /// peer never appears in this namespace. `mtu` applies to both ends; `peer_mac` sets the
    /// peer's hardware address. Both ends are left down.
    ///
    /// # Errors
    /// [`Error::Netlink`] with errno EEXIST when either name is taken in its namespace (nothing
    /// is created); EINVAL for a bad MTU or MAC.
    pub fn create_veth(
        &self,
        name: &str,
        peer_name: &str,
        peer_netns: &NetNs,
        mtu: Option<u32>,
        peer_mac: Option<[u8; 6]>,
    ) -> Result<()> {
        let mut peer = LinkMessage::default();
        peer.attributes
            .push(LinkAttribute::IfName(peer_name.to_string()));
        peer.attributes
            .push(LinkAttribute::NetNsFd(peer_netns.as_fd().as_raw_fd()));
        if let Some(mtu) = mtu {
            peer.attributes.push(LinkAttribute::Mtu(mtu));
        }
        if let Some(mac) = peer_mac {
            peer.attributes.push(LinkAttribute::Address(mac.to_vec()));
        }
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_string()));
        if let Some(mtu) = mtu {
            msg.attributes.push(LinkAttribute::Mtu(mtu));
        }
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
        ]));
        let op = format!(
            "create veth {name} (peer {peer_name} in {})",
            peer_netns.path().display()
        );
        let advice =
            Some("an interface with one of these names already exists, or the name is invalid");
        self.request(
            &op,
            RouteNetlinkMessage::NewLink(msg),
            NLM_F_CREATE | NLM_F_EXCL,
            None,
        )
        .map_err(|e| match e {
            Error::Netlink { op, errno, .. } if errno == libc::EEXIST => {
                Error::Netlink { op, errno, advice }
            }
            e => e,
        })
    }

    /// Deletes a link (for a veth, both ends go).
    ///
    /// # Errors
    /// [`Error::Netlink`]; errno ENODEV when there is no such link.
    pub fn delete_link(&self, index: u32) -> Result<()> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        self.request(
            &link_op("delete", index),
            RouteNetlinkMessage::DelLink(msg),
            0,
            None,
        )
    }

    /// Deletes the link named `name` (for a veth, both ends go). Returns whether it deleted one:
    /// a link that does not exist, or vanishes between lookup and delete (ENODEV), is `Ok(false)`,
    /// so teardown can run twice.
    ///
    /// # Errors
    /// [`Error::Netlink`] from the lookup or the delete, other than ENODEV.
    pub fn delete_link_by_name(&self, name: &str) -> Result<bool> {
        let Some(link) = self.link_by_name(name)? else {
            return Ok(false);
        };
        match self.delete_link(link.index) {
            Ok(()) => Ok(true),
            Err(e) if e.errno() == Some(libc::ENODEV) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn set_link(&self, op: &str, index: u32, build: impl FnOnce(&mut LinkMessage)) -> Result<()> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        build(&mut msg);
        self.request(
            &link_op(op, index),
            RouteNetlinkMessage::SetLink(msg),
            0,
            None,
        )
    }

    fn set_flag(&self, op: &str, index: u32, flag: LinkFlags, on: bool) -> Result<()> {
        self.set_link(op, index, |m| {
            m.header.change_mask = flag;
            m.header.flags = if on { flag } else { LinkFlags::empty() };
        })
    }

    /// Sets the link administratively up (`IFF_UP`).
    ///
    /// # Errors
    /// [`Error::Netlink`]; ENODEV when the link is gone.
    pub fn set_up(&self, index: u32) -> Result<()> {
        self.set_flag("set up", index, LinkFlags::Up, true)
    }

    /// Sets the link administratively down.
    ///
    /// # Errors
    /// [`Error::Netlink`]; ENODEV when the link is gone.
    pub fn set_down(&self, index: u32) -> Result<()> {
        self.set_flag("set down", index, LinkFlags::Up, false)
    }

    /// Sets the MTU in bytes (`IFLA_MTU`).
    ///
    /// # Errors
    /// [`Error::Netlink`]; EINVAL when outside the device's min/max MTU.
    pub fn set_mtu(&self, index: u32, mtu: u32) -> Result<()> {
        self.set_link(&format!("set mtu {mtu} on"), index, |m| {
            m.attributes.push(LinkAttribute::Mtu(mtu))
        })
    }

    /// Sets the hardware address (`IFLA_ADDRESS`).
    ///
    /// # Errors
    /// [`Error::Netlink`]; EADDRNOTAVAIL for a multicast or zero address.
    pub fn set_mac(&self, index: u32, mac: [u8; 6]) -> Result<()> {
        self.set_link(&format!("set mac {} on", format_mac(&mac)), index, |m| {
            m.attributes.push(LinkAttribute::Address(mac.to_vec()))
        })
    }

    /// Turns promiscuous mode on or off (`IFF_PROMISC`, as `ip link set promisc`).
    ///
    /// # Errors
    /// [`Error::Netlink`]; ENODEV when the link is gone.
    pub fn set_promisc(&self, index: u32, on: bool) -> Result<()> {
        self.set_flag(
            if on {
                "set promisc on"
            } else {
                "set promisc off"
            },
            index,
            LinkFlags::Promisc,
            on,
        )
    }

    /// Turns all-multicast mode on or off (`IFF_ALLMULTI`).
    ///
    /// # Errors
    /// [`Error::Netlink`]; ENODEV when the link is gone.
    pub fn set_allmulti(&self, index: u32, on: bool) -> Result<()> {
        self.set_flag(
            if on {
                "set allmulti on"
            } else {
                "set allmulti off"
            },
            index,
            LinkFlags::Allmulti,
            on,
        )
    }

    /// Sets the transmit queue length in packets (`IFLA_TXQLEN`); 0 is a valid value.
    ///
    /// # Errors
    /// [`Error::Netlink`]; ENODEV when the link is gone.
    pub fn set_txqlen(&self, index: u32, txqlen: u32) -> Result<()> {
        self.set_link(&format!("set txqueuelen {txqlen} on"), index, |m| {
            m.attributes.push(LinkAttribute::TxQueueLen(txqlen))
        })
    }
}

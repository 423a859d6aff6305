//! Routes (`RTM_NEWROUTE` / `RTM_DELROUTE` / `RTM_GETROUTE`), unicast, main table by default.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteProtocol,
    RouteScope as NlScope, RouteType,
};
use netlink_packet_route::RouteNetlinkMessage;

use super::address::with_ipv6_advice;
use super::{Family, Handle};
use crate::error::{Error, Result};

/// The main routing table (`RT_TABLE_MAIN`).
pub const MAIN_TABLE: u32 = 254;

/// Route scope (`rtm_scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RouteScope {
    /// `RT_SCOPE_UNIVERSE`: a route via a gateway, or global.
    #[default]
    Universe,
    /// `RT_SCOPE_LINK`: the destination is directly on the link.
    Link,
    /// `RT_SCOPE_HOST`: a local address.
    Host,
}

impl RouteScope {
    fn to_nl(self) -> NlScope {
        match self {
            RouteScope::Universe => NlScope::Universe,
            RouteScope::Link => NlScope::Link,
            RouteScope::Host => NlScope::Host,
        }
    }
}

/// A unicast route in the kernel's routing table (as opposed to the route list of a CNI result).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRoute {
    /// Destination network (`0.0.0.0/0` or `::/0` for a default route).
    pub dst: IpNetwork,
    /// Next hop (`RTA_GATEWAY`); `None` for a directly connected destination.
    pub gateway: Option<IpAddr>,
    /// Output interface index (`RTA_OIF`).
    pub oif: Option<u32>,
    /// Scope.
    pub scope: RouteScope,
    /// Preferred source address (`RTA_PREFSRC`).
    pub src: Option<IpAddr>,
    /// Routing table; `None` = main (254).
    pub table: Option<u32>,
    /// Metric (`RTA_PRIORITY`).
    pub priority: Option<u32>,
    /// `RTNH_F_ONLINK`: the gateway is on the link even though no address covers it (the
    /// `default via 169.254.1.1 dev eth0 onlink` pattern of routed-veth plugins).
    pub onlink: bool,
    /// Who installed the route (`rtm_protocol`, rtnetlink(7)); `None` adds with `RTPROT_BOOT`
    /// as `ip route add` does. A dump fills it in, so an owner can find exactly its own routes.
    pub protocol: Option<u8>,
}

impl KernelRoute {
    /// A route to `dst` with every optional field empty, scope universe, main table.
    pub fn new(dst: IpNetwork) -> KernelRoute {
        KernelRoute {
            dst,
            gateway: None,
            oif: None,
            scope: RouteScope::Universe,
            src: None,
            table: None,
            priority: None,
            onlink: false,
            protocol: None,
        }
    }

    fn family(&self) -> Family {
        Family::of(&self.dst.ip())
    }

    fn describe(&self) -> String {
        let mut s = self.dst.to_string();
        if let Some(gw) = self.gateway {
            s.push_str(&format!(" via {gw}"));
        }
        if let Some(oif) = self.oif {
            s.push_str(&format!(" dev #{oif}"));
        }
        if self.onlink {
            s.push_str(" onlink");
        }
        if let Some(t) = self.table {
            s.push_str(&format!(" table {t}"));
        }
        s
    }

    fn message(&self, delete: bool) -> RouteMessage {
        let table = self.table.unwrap_or(MAIN_TABLE);
        let mut msg = RouteMessage::default();
        msg.header.address_family = self.family().to_nl();
        msg.header.destination_prefix_length = self.dst.prefix();
        // Tables above 255 only fit in RTA_TABLE (iproute2 does the same).
        msg.header.table = u8::try_from(table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC);
        if delete {
            // Match any scope, protocol and type, as `ip route del` does (fib_table_delete).
            msg.header.scope = NlScope::NoWhere;
        } else {
            msg.header.scope = self.scope.to_nl();
            msg.header.protocol = self
                .protocol
                .map_or(RouteProtocol::Boot, RouteProtocol::from);
            msg.header.kind = RouteType::Unicast;
        }
        if self.onlink {
            msg.header.flags = RouteFlags::Onlink;
        }
        if self.dst.prefix() != 0 {
            msg.attributes
                .push(RouteAttribute::Destination(RouteAddress::from(
                    self.dst.ip(),
                )));
        }
        if let Some(gw) = self.gateway {
            msg.attributes
                .push(RouteAttribute::Gateway(RouteAddress::from(gw)));
        }
        if let Some(oif) = self.oif {
            msg.attributes.push(RouteAttribute::Oif(oif));
        }
        if let Some(src) = self.src {
            msg.attributes
                .push(RouteAttribute::PrefSource(RouteAddress::from(src)));
        }
        if let Some(p) = self.priority {
            msg.attributes.push(RouteAttribute::Priority(p));
        }
        msg.attributes.push(RouteAttribute::Table(table));
        msg
    }

    fn from_message(m: RouteMessage) -> Option<KernelRoute> {
        let family = match m.header.address_family {
            netlink_packet_route::AddressFamily::Inet => Family::V4,
            netlink_packet_route::AddressFamily::Inet6 => Family::V6,
            _ => return None,
        };
        let mut dst_ip: Option<IpAddr> = None;
        let mut route = KernelRoute::new(IpNetwork::V4(ipnetwork::Ipv4Network::from(
            Ipv4Addr::UNSPECIFIED,
        )));
        let mut table = u32::from(m.header.table);
        for attr in m.attributes {
            match attr {
                RouteAttribute::Destination(a) => dst_ip = ip_of(a),
                RouteAttribute::Gateway(a) => route.gateway = ip_of(a),
                RouteAttribute::PrefSource(a) => route.src = ip_of(a),
                RouteAttribute::Oif(i) => route.oif = Some(i),
                RouteAttribute::Priority(p) => route.priority = Some(p),
                RouteAttribute::Table(t) => table = t,
                _ => {}
            }
        }
        let ip = dst_ip.unwrap_or(match family {
            Family::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            Family::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        });
        route.dst = IpNetwork::new(ip, m.header.destination_prefix_length).ok()?;
        route.scope = match m.header.scope {
            NlScope::Link => RouteScope::Link,
            NlScope::Host => RouteScope::Host,
            _ => RouteScope::Universe,
        };
        route.table = Some(table);
        route.onlink = m.header.flags.contains(RouteFlags::Onlink);
        route.protocol = Some(u8::from(m.header.protocol));
        Some(route)
    }
}

fn ip_of(a: RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(v6)),
        _ => None,
    }
}

impl Handle {
    /// Adds a route (create, exclusive).
    ///
    /// # Errors
    /// [`Error::Netlink`]: EEXIST when the same route exists (the caller decides whether that is
    /// fine); ENETUNREACH when the gateway is not reachable (consider `onlink`); ENODEV when
    /// `oif` is gone; EACCES/EAFNOSUPPORT for IPv6 when IPv6 is disabled.
    pub fn add_route(&self, route: &KernelRoute) -> Result<()> {
        let advice = match route.gateway {
            Some(_) if !route.onlink => Some("the gateway must be reachable through an address on the link, or the route must be onlink"),
            _ => None,
        };
        self.request(
            &format!("add route {}", route.describe()),
            RouteNetlinkMessage::NewRoute(route.message(false)),
            NLM_F_CREATE | NLM_F_EXCL,
            None,
        )
        .map_err(|e| match e {
            Error::Netlink {
                op,
                errno,
                advice: a,
            } if errno == libc::ENETUNREACH => Error::Netlink {
                op,
                errno,
                advice: advice.or(a),
            },
            e => with_ipv6_advice(e, route.family()),
        })
    }

    /// Adds a route, or replaces the one with the same destination, table and priority in
    /// place (`NLM_F_CREATE | NLM_F_REPLACE`, as `ip route replace`): traffic to it never
    /// finds no route.
    ///
    /// # Errors
    /// As [`Handle::add_route`], without EEXIST.
    pub fn replace_route(&self, route: &KernelRoute) -> Result<()> {
        self.request(
            &format!("replace route {}", route.describe()),
            RouteNetlinkMessage::NewRoute(route.message(false)),
            NLM_F_CREATE | NLM_F_REPLACE,
            None,
        )
        .map_err(|e| with_ipv6_advice(e, route.family()))
    }

    /// Deletes a route. Scope, protocol and type are wildcards; destination, gateway, `oif` and
    /// table must match.
    ///
    /// # Errors
    /// [`Error::Netlink`]: ESRCH when no such route exists.
    pub fn del_route(&self, route: &KernelRoute) -> Result<()> {
        self.request(
            &format!("delete route {}", route.describe()),
            RouteNetlinkMessage::DelRoute(route.message(true)),
            0,
            None,
        )
        .map_err(|e| with_ipv6_advice(e, route.family()))
    }

    /// The unicast routes of `family` in the main table.
    ///
    /// # Errors
    /// [`Error::Netlink`] when the dump fails.
    pub fn routes(&self, family: Family) -> Result<Vec<KernelRoute>> {
        self.routes_in_table(family, MAIN_TABLE)
    }

    /// The unicast routes of `family` in `table`.
    ///
    /// # Errors
    /// [`Error::Netlink`] when the dump fails.
    pub fn routes_in_table(&self, family: Family, table: u32) -> Result<Vec<KernelRoute>> {
        let msgs = self
            .dump(
                &format!("dump {family:?} routes"),
                || {
                    let mut msg = RouteMessage::default();
                    msg.header.address_family = family.to_nl();
                    RouteNetlinkMessage::GetRoute(msg)
                },
                None,
            )
            .map_err(|e| with_ipv6_advice(e, family))?;
        Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewRoute(r) if r.header.kind == RouteType::Unicast => {
                    KernelRoute::from_message(r)
                }
                _ => None,
            })
            .filter(|r| r.table == Some(table))
            .collect())
    }
}

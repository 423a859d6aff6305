//! The pod's addressing scheme: link-local gateways answered by the host veth, addresses as /32
//! and /128. Shared by ADD (what it installs) and CHECK (what it expects).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;

/// The pod's IPv4 gateway: link-local, answered by proxy ARP on the host veth.
pub const GATEWAY_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);
/// The pod's IPv6 gateway: the link-local address tern puts on every host veth (without DAD).
pub const GATEWAY_V6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);

/// The gateway for an address family.
pub fn gateway_for(ip: &IpAddr) -> IpAddr {
    if ip.is_ipv4() {
        IpAddr::V4(GATEWAY_V4)
    } else {
        IpAddr::V6(GATEWAY_V6)
    }
}

/// `ip/32` or `ip/128`.
pub fn host_prefix(ip: IpAddr) -> IpNetwork {
    let prefix = if ip.is_ipv4() { 32 } else { 128 };
    // A full-length prefix is valid for either family.
    IpNetwork::new(ip, prefix).unwrap_or_else(|_| IpNetwork::from(ip))
}

/// `0.0.0.0/0` or `::/0`.
pub fn default_route(v4: bool) -> IpNetwork {
    if v4 {
        IpNetwork::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)
    } else {
        IpNetwork::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)
    }
    .unwrap_or_else(|_| IpNetwork::from(IpAddr::V4(Ipv4Addr::UNSPECIFIED)))
}

/// `fe80::1/64`, the host veth's IPv6 address.
pub fn host_link_local() -> IpNetwork {
    IpNetwork::new(IpAddr::V6(GATEWAY_V6), 64)
        .unwrap_or_else(|_| IpNetwork::from(IpAddr::V6(GATEWAY_V6)))
}

//! ADD's host side: forwarding on, the host veth's sysctls (proxy ARP, no RA) and link-local
//! address, and the host routes to the pod's addresses. Runs in the host netns (the caller's).

use std::net::IpAddr;

use tern_cni::{code, Error};
use tern_net::netlink::{Handle, KernelRoute, Link, RouteScope};
use tern_net::sysctl::{self, SysctlKey, SysctlValue};

use crate::gateway::{host_link_local, host_prefix};
use crate::naming::HOST_VETH_PREFIX;

/// Parses a sysctl key (with `IFNAME` standing for `ifname`) and its value.
///
/// # Errors
/// Code 7 for a key or value the sysctl rules refuse (never for tern's own constants).
pub fn sysctl(raw: &str, ifname: &str, value: &str) -> Result<(SysctlKey, SysctlValue), Error> {
    let key = SysctlKey::parse(raw, ifname)?;
    let value = SysctlValue::parse(raw, value)?;
    Ok((key, value))
}

/// Turns host forwarding on for each family the pod uses (as ptp does), writing only when off.
///
/// # Errors
/// Code 103 when the kernel refuses the write.
pub fn enable_forwarding(v4: bool, v6: bool) -> Result<(), Error> {
    let mut keys = Vec::new();
    if v4 {
        keys.push("net.ipv4.ip_forward");
    }
    if v6 {
        keys.push("net.ipv6.conf.all.forwarding");
    }
    for raw in keys {
        let (k, v) = sysctl(raw, "", "1")?;
        sysctl::ensure_host(&k, &v)?;
    }
    Ok(())
}

/// Configures the host veth and brings it up: for IPv4 `proxy_arp=1` and `neigh.proxy_delay=0`
/// (so it answers the pod's ARP for 169.254.1.1 at once); for IPv6 `accept_ra=0` and the address
/// `fe80::1/64` without DAD.
///
/// # Errors
/// Code 103 for a refused sysctl write, 101 for a netlink failure.
pub fn configure_host_side(host: &Handle, link: &Link, v4: bool, v6: bool) -> Result<(), Error> {
    if v4 {
        // Answer the pod's ARP for 169.254.1.1 at once (proxy_delay 0), from the host veth.
        let items = [
            sysctl("net.ipv4.conf.IFNAME.proxy_arp", &link.name, "1")?,
            sysctl("net.ipv4.neigh.IFNAME.proxy_delay", &link.name, "0")?,
        ];
        for (k, v) in &items {
            sysctl::write_host(k, v)?;
        }
    }
    if v6 {
        let (k, v) = sysctl("net.ipv6.conf.IFNAME.accept_ra", &link.name, "0")?;
        sysctl::write_host(&k, &v)?;
        host.add_address(link.index, host_link_local(), true)?;
    }
    host.set_up(link.index).map_err(Error::from)
}

/// Routes `addr/32` (or `/128`) to the host veth `oif`. A route to that very address through
/// another tern veth is stale (that veth's DEL never came, and IPAM has since handed the address
/// to this pod): it is replaced.
///
/// # Errors
/// Code 102 when the address is already routed through anything but a tern veth (never taken
/// over); 101 for a netlink failure.
pub fn add_host_route(host: &Handle, oif: u32, addr: IpAddr) -> Result<(), Error> {
    let mut r = KernelRoute::new(host_prefix(addr));
    r.oif = Some(oif);
    r.scope = RouteScope::Link;
    match host.add_route(&r) {
        Err(e) if e.errno() == Some(libc::EEXIST) => {
            // A route to this very address exists. Through a tern veth it is stale (that veth's
            // DEL never came, and IPAM has since handed the address to us): replace it. Through
            // anything else it is the host's own: never hijack it.
            let fam = tern_net::netlink::Family::of(&addr);
            let existing = host
                .routes(fam)?
                .into_iter()
                .find(|x| x.dst == host_prefix(addr));
            let dev = match existing.as_ref().and_then(|x| x.oif) {
                Some(i) => host.link_by_index(i)?.map(|l| l.name),
                None => None,
            };
            match dev {
                Some(d) if d.starts_with(HOST_VETH_PREFIX) => {
                    let mut stale = KernelRoute::new(host_prefix(addr));
                    stale.scope = RouteScope::Link;
                    host.del_route(&stale)?;
                    host.add_route(&r).map_err(Error::from)
                }
                other => Err(Error::new(
                    code::IPAM_NO_ADDRESS,
                    format!(
                        "pod address {addr} is already routed on this host via {}: refusing to take it over",
                        other.unwrap_or_else(|| "another route".into())
                    ),
                )),
            }
        }
        other => other.map_err(Error::from),
    }
}

//! ADD's pod side: the pod interface's addresses, link up, and routes through the link-local
//! gateway, shared with an earlier tern attachment of the same pod where the kernel already has
//! them. Netlink goes through a socket opened inside the pod netns; sysctls run on a thread in it.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use tern_cni::{code, Error, Route};
use tern_net::netlink::{Handle, KernelRoute, Link, RouteScope};
use tern_net::netns::NetNs;
use tern_net::sysctl;

use crate::gateway::{default_route, gateway_for, host_prefix};
use crate::host_side::sysctl;

/// Configures the pod end `link` in `netns` (through `pod`, a handle opened inside it): IPv6 on
/// when used, `addrs` as /32 and /128 without DAD, link up, the gateway and default routes of each
/// family, and the IPAM routes via the same gateway. Returns the routes it installed, for the
/// result.
///
/// # Errors
/// Code 101 for a netlink failure or a pod route tern cannot share; 103 for a refused sysctl.
pub fn configure_pod_side(
    pod: &Handle,
    netns: &NetNs,
    link: &Link,
    addrs: &[IpAddr],
    ipam_routes: &[Route],
) -> Result<Vec<Route>, Error> {
    if addrs.iter().any(IpAddr::is_ipv6) {
        // A runtime may create the netns with IPv6 disabled by default; the pod end needs it.
        let items = [sysctl(
            "net.ipv6.conf.IFNAME.disable_ipv6",
            &link.name,
            "0",
        )?];
        sysctl::write_all(netns, &items)?;
    }
    for addr in addrs {
        // No DAD: only tern routes to this /32 or /128, and a tentative address cannot be used.
        pod.add_address(link.index, host_prefix(*addr), true)?;
    }
    pod.set_up(link.index)?;

    let mut installed = Vec::new();
    for v4 in [true, false] {
        let Some(addr) = addrs.iter().find(|a| a.is_ipv4() == v4) else {
            continue;
        };
        let gw = gateway_for(addr);
        // A pod attached to a second tern network (another ifname, as with Multus) already has
        // these routes through its first interface for a family both use: the first attachment
        // keeps that default route; this one adds the defaults of families only it uses, and
        // its IPAM routes. The result lists what it added.
        if v4 {
            let mut r = KernelRoute::new(host_prefix(gw));
            r.oif = Some(link.index);
            r.scope = RouteScope::Link;
            add_route_or_keep_terns(pod, &r)?;
        }
        let mut r = KernelRoute::new(default_route(v4));
        r.gateway = Some(gw);
        r.oif = Some(link.index);
        r.onlink = true;
        if add_route_or_keep_terns(pod, &r)? {
            installed.push(Route::new(default_route(v4), Some(gw)));
        } else {
            tracing::info!(
                ifname = %link.name,
                dst = %default_route(v4),
                "the pod already has this default route through a veth (an earlier attachment's): left as it is"
            );
        }
    }
    // IPAM routes all go through the link-local gateway: in routed mode only the host is on-link.
    for route in ipam_routes {
        let v4 = route.dst.is_ipv4();
        if route.dst.prefix() == 0 || !addrs.iter().any(|a| a.is_ipv4() == v4) {
            continue;
        }
        let gw = gateway_for(&route.dst.ip());
        let mut r = KernelRoute::new(
            IpNetwork::new(route.dst.network(), route.dst.prefix()).unwrap_or(route.dst),
        );
        r.gateway = Some(gw);
        r.oif = Some(link.index);
        r.onlink = true;
        r.priority = route.priority;
        // Listed twice by IPAM, or routed by an earlier tern attachment: kept, not listed.
        if add_route_or_keep_terns(pod, &r)? {
            installed.push(Route {
                gw: Some(gw),
                ..route.clone()
            });
        }
    }
    Ok(installed)
}

/// Adds a pod route, or keeps the one the pod already has to that destination and metric when it
/// is a routed-veth one: the same link-local gateway through a veth of the pod (an earlier tern
/// attachment's interface; this one's for a route IPAM listed twice; or another plugin's that uses
/// the same gateway, as Calico does). `Ok(true)` when added, `Ok(false)` when kept.
///
/// # Errors
/// Code 101 when the kernel refuses the route, or when the pod's own route to that destination
/// and metric is not such a route (a blackhole or unreachable route, another gateway, another
/// kind of link): it is never replaced, and ADD then unwinds as for any failure (the reference
/// ptp fails too). A route with another metric is no duplicate: the kernel adds tern's beside it.
fn add_route_or_keep_terns(pod: &Handle, r: &KernelRoute) -> Result<bool, Error> {
    match pod.add_route(r) {
        Ok(()) => Ok(true),
        Err(e) if e.errno() == Some(libc::EEXIST) => {
            if has_terns_route(pod, r)? {
                return Ok(false);
            }
            Err(Error::new(
                code::NETLINK,
                format!(
                    "the pod already has a route to {} that tern cannot share: refusing to replace it",
                    r.dst
                ),
            )
            .with_details(format!(
                "tern routes {} via {} through a veth; the pod's own route (a blackhole, another gateway or link) stays",
                r.dst,
                r.gateway.map_or_else(|| "no gateway".to_owned(), |g| g.to_string()),
            )))
        }
        Err(e) => Err(Error::from(e)),
    }
}

/// Whether the pod has a unicast route to `r.dst` with `r`'s gateway and metric through one of
/// its veths: the very route the kernel refused as a duplicate, not another one beside it.
fn has_terns_route(pod: &Handle, r: &KernelRoute) -> Result<bool, Error> {
    let fam = tern_net::netlink::Family::of(&r.dst.ip());
    // The kernel's metric when none is given: 0 for IPv4, 1024 for IPv6 (IP6_RT_PRIO_USER).
    let metric = |x: &KernelRoute| x.priority.unwrap_or(if x.dst.is_ipv4() { 0 } else { 1024 });
    for existing in pod.routes(fam)? {
        if existing.dst != r.dst || existing.gateway != r.gateway || metric(&existing) != metric(r)
        {
            continue;
        }
        let Some(oif) = existing.oif else { continue };
        let link = pod.link_by_index(oif)?;
        if link.is_some_and(|l| l.kind.as_deref() == Some("veth")) {
            return Ok(true);
        }
    }
    Ok(false)
}

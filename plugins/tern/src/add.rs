//! ADD: IPAM from the host netns, then a veth pair whose pod end is created directly in the pod
//! netns, pod addresses as /32 and /128 behind a link-local gateway, host routes to them.
//!
//! Invariant: every change is pushed on the undo stack right after it is made, so any error (or
//! panic) leaves nothing behind: no IPAM reservation, no veth, no route, no state file.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::IpNetwork;
use tern_cni::{code, AddInput, CniResult, Command, Error, Interface, IpConfig, Route};
use tern_net::netlink::{format_mac, Handle, Link, Route as KernelRoute, RouteScope};
use tern_net::netns::NetNs;
use tern_net::sysctl::{self, SysctlKey, SysctlValue};

use crate::config::TernConf;
use crate::errors::{from_net, state_io};
use crate::naming::{host_veth_name, HOST_VETH_PREFIX};
use crate::rollback::Rollback;
use crate::state::{AttachmentState, StateStore};

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

fn default_route(v4: bool) -> IpNetwork {
    if v4 {
        IpNetwork::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)
    } else {
        IpNetwork::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)
    }
    .unwrap_or_else(|_| IpNetwork::from(IpAddr::V4(Ipv4Addr::UNSPECIFIED)))
}

fn sysctl(raw: &str, ifname: &str, value: &str) -> Result<(SysctlKey, SysctlValue), Error> {
    let key = SysctlKey::parse(raw, ifname).map_err(from_net)?;
    let value = SysctlValue::parse(raw, value).map_err(from_net)?;
    Ok((key, value))
}

/// Writes a host sysctl unless it already has the value (saves a write per ADD).
fn ensure_host_sysctl(raw: &str, ifname: &str, value: &str) -> Result<(), Error> {
    let (key, val) = sysctl(raw, ifname, value)?;
    if sysctl::read_host(&key).map_err(from_net)?.trim() != value {
        sysctl::write_host(&key, &val).map_err(from_net)?;
    }
    Ok(())
}

/// Runs ADD for one attachment.
///
/// # Errors
/// Code 8 when the netns cannot be opened; 100 when `CNI_IFNAME` exists in the pod; the IPAM
/// plugin's error with its code; 102 when IPAM returned no address; 101 for netlink failures;
/// 104 when the state file cannot be written. Every error has undone what ADD did.
pub fn add(input: &AddInput) -> Result<CniResult, Error> {
    let conf = TernConf::from_netconf(&input.config)?;
    let ifname = input.ifname.as_str();
    let netns = NetNs::open(&input.netns).map_err(from_net)?;
    let host = Handle::new().map_err(from_net)?;
    let pod = Handle::in_netns(&netns).map_err(from_net)?;
    if pod.link_by_name(ifname).map_err(from_net)?.is_some() {
        return Err(interface_exists(input));
    }

    let ipam_stdin = crate::lookup::ipam_stdin(input, &conf)?;
    let ipam = crate::ipam::delegate(input.delegate(&conf.ipam_type));
    let host_veth = host_veth_name(input.container_id.as_str(), ifname);
    let store = StateStore::new(&conf.state_dir, &input.config.name);
    let mut undo = Rollback::new();
    let ipam_result = ipam.add(&ipam_stdin)?;
    undo.push("release IPAM", || {
        ipam.exec(Command::Del, &ipam_stdin)
            .map_err(|e| e.to_string())
    });
    let addrs: Vec<IpAddr> = ipam_result.ips.iter().map(|c| c.address.ip()).collect();
    if addrs.is_empty() {
        return Err(Error::new(
            code::IPAM_NO_ADDRESS,
            "IPAM plugin returned missing IP config",
        )
        .with_details(format!("{} returned no address", conf.ipam_type)));
    }
    for a in &addrs {
        check_pod_address(a, &conf.ipam_type)?;
    }
    let has_v4 = addrs.iter().any(IpAddr::is_ipv4);
    let has_v6 = addrs.iter().any(IpAddr::is_ipv6);

    let state = AttachmentState {
        container_id: input.container_id.to_string(),
        ifname: ifname.to_owned(),
        host_veth: host_veth.clone(),
        netns: input.netns.display().to_string(),
        addresses: addrs.iter().map(|a| host_prefix(*a)).collect(),
    };
    // Written before the first kernel change, so DEL and GC see an ADD killed at any later point.
    store
        .save(&state)
        .map_err(|e| state_io("write attachment state", e))?;
    undo.push("remove state", || {
        store
            .remove(input.container_id.as_str(), ifname)
            .map_err(|e| e.to_string())
    });

    if has_v4 {
        ensure_host_sysctl("net.ipv4.ip_forward", "", "1")?;
    }
    if has_v6 {
        ensure_host_sysctl("net.ipv6.conf.all.forwarding", "", "1")?;
    }

    create_veth(&host, &host_veth, ifname, &netns, conf.mtu, input, &store)?;
    undo.push("delete host veth", || {
        delete_link_by_name(&host, &host_veth)
    });
    let host_link = required_link(&host, &host_veth, "host")?;
    let pod_link = required_link(&pod, ifname, "pod")?;

    configure_host_side(&host, &host_link, has_v4, has_v6)?;
    let routes = configure_pod_side(&pod, &netns, &pod_link, &addrs, &ipam_result.routes)?;
    for addr in &addrs {
        add_host_route(&host, host_link.index, *addr)?;
    }

    undo.commit();
    let mut result = CniResult {
        interfaces: vec![
            Interface {
                name: host_veth,
                mac: host_link.mac.as_ref().map(format_mac),
                mtu: Some(host_link.mtu),
                ..Default::default()
            },
            Interface {
                name: ifname.to_owned(),
                mac: pod_link.mac.as_ref().map(format_mac),
                mtu: Some(pod_link.mtu),
                sandbox: Some(input.netns.display().to_string()),
                ..Default::default()
            },
        ],
        ips: addrs
            .iter()
            .map(|a| IpConfig {
                interface: Some(1),
                address: host_prefix(*a),
                gateway: Some(gateway_for(a)),
            })
            .collect(),
        routes,
        dns: ipam_result.dns,
    };
    if let Some(dns) = conf.dns_override {
        result.dns = dns;
    }
    Ok(result)
}

fn interface_exists(input: &AddInput) -> Error {
    Error::new(
        code::INTERFACE_EXISTS,
        format!(
            "interface {} already exists in netns {}",
            input.ifname,
            input.netns.display()
        ),
    )
    .with_details("choose another CNI_IFNAME, or DEL the attachment that owns it first")
}

fn create_veth(
    host: &Handle,
    host_veth: &str,
    ifname: &str,
    netns: &NetNs,
    mtu: u32,
    input: &AddInput,
    store: &StateStore,
) -> Result<(), Error> {
    match host.create_veth(host_veth, ifname, netns, Some(mtu), None) {
        Ok(()) => Ok(()),
        Err(e) if e.errno() == Some(libc::EEXIST) => {
            // The host name is derived from (container ID, ifname). If another network's state
            // claims that pair, the link is its live veth (a runtime sent one container ID to two
            // networks): refuse. Otherwise it is a leftover of an earlier ADD of this very
            // attachment that was killed before DEL: replace it.
            if let Some(other) = store.claimed_elsewhere(input.container_id.as_str(), ifname) {
                return Err(Error::new(
                    code::INTERFACE_EXISTS,
                    format!(
                        "host veth {host_veth} belongs to container {} ifname {ifname} in network {other:?}",
                        input.container_id
                    ),
                )
                .with_details("a container ID and ifname can be attached to one network at a time"));
            }
            match host.link_by_name(host_veth).map_err(from_net)? {
                Some(stale) => {
                    tracing::warn!(
                        link = host_veth,
                        "removing a stale host veth of this attachment"
                    );
                    host.delete_link(stale.index).map_err(from_net)?;
                    host.create_veth(host_veth, ifname, netns, Some(mtu), None)
                        .map_err(from_net)
                }
                // Otherwise the pod end's name was taken since we looked.
                None => Err(interface_exists(input)),
            }
        }
        Err(e) => Err(from_net(e)),
    }
}

/// Refuses addresses no pod may have: unspecified, loopback, multicast, broadcast, link-local
/// (169.254.0.0/16 holds the pod's gateway; fe80::/10 is per link).
fn check_pod_address(addr: &IpAddr, ipam_type: &str) -> Result<(), Error> {
    let bad = match addr {
        IpAddr::V4(a) => {
            a.is_unspecified()
                || a.is_loopback()
                || a.is_multicast()
                || a.is_broadcast()
                || a.is_link_local()
        }
        IpAddr::V6(a) => {
            a.is_unspecified()
                || a.is_loopback()
                || a.is_multicast()
                || (a.segments()[0] & 0xffc0) == 0xfe80
        }
    };
    if bad {
        return Err(Error::new(
            code::IPAM_NO_ADDRESS,
            format!("IPAM plugin {ipam_type} returned {addr}, which cannot be a pod address"),
        )
        .with_details(
            "unspecified, loopback, multicast, broadcast and link-local addresses are refused",
        ));
    }
    Ok(())
}

fn required_link(h: &Handle, name: &str, side: &str) -> Result<Link, Error> {
    h.link_by_name(name).map_err(from_net)?.ok_or_else(|| {
        Error::new(
            code::NETLINK,
            format!("{side} veth {name} vanished right after it was created"),
        )
    })
}

/// Deletes a link by name; already gone is fine.
pub fn delete_link_by_name(h: &Handle, name: &str) -> Result<(), String> {
    match h.link_by_name(name) {
        Ok(Some(l)) => match h.delete_link(l.index) {
            Err(e) if e.errno() != Some(libc::ENODEV) => Err(e.to_string()),
            _ => Ok(()),
        },
        Ok(None) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

fn configure_host_side(host: &Handle, link: &Link, v4: bool, v6: bool) -> Result<(), Error> {
    if v4 {
        // Answer the pod's ARP for 169.254.1.1 at once (proxy_delay 0), from the host veth.
        let items = [
            sysctl("net.ipv4.conf.IFNAME.proxy_arp", &link.name, "1")?,
            sysctl("net.ipv4.neigh.IFNAME.proxy_delay", &link.name, "0")?,
        ];
        for (k, v) in &items {
            sysctl::write_host(k, v).map_err(from_net)?;
        }
    }
    if v6 {
        let (k, v) = sysctl("net.ipv6.conf.IFNAME.accept_ra", &link.name, "0")?;
        sysctl::write_host(&k, &v).map_err(from_net)?;
        host.add_address(link.index, host_prefix_ll(), true)
            .map_err(from_net)?;
    }
    host.set_up(link.index).map_err(from_net)
}

fn host_prefix_ll() -> IpNetwork {
    IpNetwork::new(IpAddr::V6(GATEWAY_V6), 64)
        .unwrap_or_else(|_| IpNetwork::from(IpAddr::V6(GATEWAY_V6)))
}

fn configure_pod_side(
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
        sysctl::write_all(netns, &items).map_err(from_net)?;
    }
    for addr in addrs {
        // No DAD: only tern routes to this /32 or /128, and a tentative address cannot be used.
        pod.add_address(link.index, host_prefix(*addr), true)
            .map_err(from_net)?;
    }
    pod.set_up(link.index).map_err(from_net)?;

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
        Err(e) => Err(from_net(e)),
    }
}

/// Whether the pod has a unicast route to `r.dst` with `r`'s gateway and metric through one of
/// its veths: the very route the kernel refused as a duplicate, not another one beside it.
fn has_terns_route(pod: &Handle, r: &KernelRoute) -> Result<bool, Error> {
    let fam = tern_net::netlink::Family::of(&r.dst.ip());
    // The kernel's metric when none is given: 0 for IPv4, 1024 for IPv6 (IP6_RT_PRIO_USER).
    let metric = |x: &KernelRoute| x.priority.unwrap_or(if x.dst.is_ipv4() { 0 } else { 1024 });
    for existing in pod.routes(fam).map_err(from_net)? {
        if existing.dst != r.dst || existing.gateway != r.gateway || metric(&existing) != metric(r)
        {
            continue;
        }
        let Some(oif) = existing.oif else { continue };
        let link = pod.link_by_index(oif).map_err(from_net)?;
        if link.is_some_and(|l| l.kind.as_deref() == Some("veth")) {
            return Ok(true);
        }
    }
    Ok(false)
}

fn add_host_route(host: &Handle, oif: u32, addr: IpAddr) -> Result<(), Error> {
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
                .routes(fam)
                .map_err(from_net)?
                .into_iter()
                .find(|x| x.dst == host_prefix(addr));
            let dev = match existing.as_ref().and_then(|x| x.oif) {
                Some(i) => host.link_by_index(i).map_err(from_net)?.map(|l| l.name),
                None => None,
            };
            match dev {
                Some(d) if d.starts_with(HOST_VETH_PREFIX) => {
                    let mut stale = KernelRoute::new(host_prefix(addr));
                    stale.scope = RouteScope::Link;
                    host.del_route(&stale).map_err(from_net)?;
                    host.add_route(&r).map_err(from_net)
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
        other => other.map_err(from_net),
    }
}

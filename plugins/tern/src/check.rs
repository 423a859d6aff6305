//! CHECK: the attachment still looks as ADD left it (CNI spec "CHECK"): the pod interface exists,
//! is a veth, has the prevResult MAC and addresses, the prevResult routes exist in the pod; the
//! host veth is up with a route to every pod address; delegated IPAM CHECK passes.

use std::net::IpAddr;

use tern_cni::{code, CheckInput, Error, IpConfig, Verb};
use tern_net::netlink::{format_mac, Family, Handle, Link};
use tern_net::netns::NetNs;

use crate::config::TernConf;
use crate::naming::host_veth_name;

fn failed(msg: String) -> Error {
    Error::new(code::CHECK_MISMATCH, msg)
}

/// A host sysctl must still hold `want` (`IFNAME` stands for `ifname`).
fn expect_host_sysctl(raw: &str, ifname: &str, want: &str, why: &str) -> Result<(), Error> {
    let key = tern_net::sysctl::SysctlKey::parse(raw, ifname)?;
    let have = tern_net::sysctl::read_host(&key)?;
    if have.trim() != want {
        return Err(failed(format!(
            "host sysctl {} is {}, expected {want} ({why})",
            key.relative(),
            have.trim()
        )));
    }
    Ok(())
}

/// Runs CHECK for one attachment.
///
/// # Errors
/// Code 7 without prevResult or when it does not name this attachment's interface; the IPAM
/// plugin's error; code 106 naming the first thing that is missing or different.
pub fn check(input: &CheckInput) -> Result<(), Error> {
    let conf = TernConf::from_netconf(&input.config)?;
    let prev = input
        .config
        .prev_result
        .as_ref()
        .ok_or_else(|| Error::invalid_config("required prevResult missing"))?;
    let ifname = input.ifname.as_str();
    let netns_path = input.netns.display().to_string();
    let (pod_idx, pod_iface) = prev
        .interfaces
        .iter()
        .enumerate()
        .find(|(_, i)| i.name == ifname && i.sandbox.as_deref() == Some(netns_path.as_str()))
        .ok_or_else(|| {
            Error::invalid_config(format!(
                "prevResult has no interface {ifname} in sandbox {netns_path}"
            ))
        })?;

    crate::ipam::delegate(input.delegate(&conf.ipam_type))
        .exec(Verb::Check, &input.config.bytes)?;

    let netns = NetNs::open(&input.netns)?;
    let pod = Handle::in_netns(&netns)?;
    let link = pod
        .link_by_name(ifname)?
        .ok_or_else(|| failed(format!("pod interface {ifname} not found in {netns_path}")))?;
    if link.kind.as_deref() != Some("veth") {
        return Err(failed(format!(
            "pod interface {ifname} is {}, not a veth",
            link.kind.as_deref().unwrap_or("a device without a kind")
        )));
    }
    if let (Some(want), Some(have)) = (&pod_iface.mac, &link.mac) {
        if !want.eq_ignore_ascii_case(&format_mac(have)) {
            return Err(failed(format!(
                "pod interface {ifname} has MAC {}, prevResult says {want}",
                format_mac(have)
            )));
        }
    }
    let pod_ips: Vec<_> = prev
        .ips
        .iter()
        .filter(|ip| ip.interface == Some(pod_idx))
        .collect();
    let on_link = pod.addresses(link.index)?;
    for ip in &pod_ips {
        if !on_link.iter().any(|a| a.addr == ip.address) {
            return Err(failed(format!(
                "address {} missing on pod interface {ifname}",
                ip.address
            )));
        }
    }
    check_pod_routes(&pod, &link, prev.routes.iter().map(|r| (r.dst, r.gw)))?;

    let host = Handle::new()?;
    let host_veth = host_veth_name(input.container_id.as_str(), ifname);
    let host_link = host
        .link_by_name(&host_veth)?
        .ok_or_else(|| failed(format!("host veth {host_veth} not found")))?;
    if !host_link.up {
        return Err(failed(format!("host veth {host_veth} is down")));
    }
    check_host_side(&host, &host_veth, &host_link, &pod_ips)
}

/// The host side of CHECK: forwarding and proxy ARP for each family the pod uses, and a host
/// route per pod address through the host veth.
///
/// # Errors
/// 106 naming the first sysctl or route that is missing or different; netlink errors.
fn check_host_side(
    host: &Handle,
    host_veth: &str,
    host_link: &Link,
    pod_ips: &[&IpConfig],
) -> Result<(), Error> {
    let fams: Vec<Family> = pod_ips
        .iter()
        .map(|ip| Family::of(&ip.address.ip()))
        .collect();
    if fams.contains(&Family::V4) {
        expect_host_sysctl(
            "net.ipv4.ip_forward",
            "",
            "1",
            "pods are routed through the host",
        )?;
        expect_host_sysctl(
            "net.ipv4.conf.IFNAME.proxy_arp",
            host_veth,
            "1",
            "the host veth answers the pod's ARP for 169.254.1.1",
        )?;
    }
    if fams.contains(&Family::V6) {
        expect_host_sysctl(
            "net.ipv6.conf.all.forwarding",
            "",
            "1",
            "pods are routed through the host",
        )?;
    }
    for fam in [Family::V4, Family::V6] {
        let wanted: Vec<IpAddr> = pod_ips
            .iter()
            .map(|ip| ip.address.ip())
            .filter(|a| Family::of(a) == fam)
            .collect();
        if wanted.is_empty() {
            continue;
        }
        let routes = host.routes(fam)?;
        for a in wanted {
            let found = routes.iter().any(|r| {
                r.dst.ip() == a
                    && r.dst.prefix() == crate::gateway::host_prefix(a).prefix()
                    && r.oif == Some(host_link.index)
            });
            if !found {
                return Err(failed(format!("host route {a} dev {host_veth} not found")));
            }
        }
    }
    Ok(())
}

fn check_pod_routes(
    pod: &Handle,
    link: &Link,
    wanted: impl Iterator<Item = (ipnetwork::IpNetwork, Option<IpAddr>)>,
) -> Result<(), Error> {
    let mut cache: Vec<(Family, Vec<tern_net::netlink::KernelRoute>)> = Vec::new();
    for (dst, gw) in wanted {
        let fam = Family::of(&dst.ip());
        if !cache.iter().any(|(f, _)| *f == fam) {
            cache.push((fam, pod.routes(fam)?));
        }
        let routes = cache
            .iter()
            .find(|(f, _)| *f == fam)
            .map(|(_, r)| r.as_slice())
            .unwrap_or_default();
        let found = routes.iter().any(|r| {
            r.dst.network() == dst.network()
                && r.dst.prefix() == dst.prefix()
                && (gw.is_none() || r.gateway == gw)
                && r.oif.is_none_or(|o| o == link.index)
        });
        if !found {
            let via = gw.map(|g| format!(" via {g}")).unwrap_or_default();
            return Err(failed(format!(
                "route {dst}{via} not found in the pod's routing table"
            )));
        }
    }
    Ok(())
}

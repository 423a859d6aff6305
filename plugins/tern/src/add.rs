//! ADD: IPAM from the host netns, then a veth pair whose pod end is created directly in the pod
//! netns, pod addresses as /32 and /128 behind a link-local gateway, host routes to them.
//!
//! Invariant: every change is pushed on the undo stack right after it is made, so any error (or
//! panic) leaves nothing behind: no IPAM reservation, no veth, no route, no state file.

use std::net::IpAddr;

use tern_cni::{code, AddInput, CniResult, Error, Interface, IpConfig, Verb};
use tern_net::netlink::{format_mac, Handle, Link};
use tern_net::netns::NetNs;

use crate::codes::state_io;
use crate::config::TernConf;
use crate::gateway::{gateway_for, host_prefix};
use crate::host_side::{add_host_route, configure_host_side, enable_forwarding};
use crate::naming::host_veth_name;
use crate::pod_side::configure_pod_side;
use crate::rollback::Rollback;
use crate::state::{AttachmentState, StateStore};

/// Runs ADD for one attachment in `netns`, the pod's (`CNI_NETNS`, opened by the caller).
///
/// # Errors
/// 100 when `CNI_IFNAME` exists in the pod; the IPAM plugin's error with its code; 102 when
/// IPAM returned no address; 101 for netlink failures; 104 when the state file cannot be
/// written; 107 when `ipMasq` is set and the nft tool is missing (before IPAM runs) or refuses
/// the rules; 11 when `networkPolicy` is set and
/// tern-agent does not admit the pod in time ([`crate::admission::admit`]). Every error has
/// undone what ADD did.
pub fn add(input: &AddInput, conf: &TernConf, netns: &NetNs) -> Result<CniResult, Error> {
    let ifname = input.ifname.as_str();
    let host = Handle::new()?;
    tern_node::phase::mark("socket-host");
    let pod = Handle::in_netns(netns)?;
    tern_node::phase::mark("netns-enter+socket-pod");
    if pod.link_by_name(ifname)?.is_some() {
        return Err(interface_exists(input));
    }

    // Found before IPAM runs: without the tool ADD would fail after allocating.
    let nft = conf.ip_masq.then(crate::masq::nft).transpose()?;
    let ipam_stdin = crate::lookup::ipam_stdin(input, conf)?;
    let ipam = crate::ipam::delegate(input.delegate(&conf.ipam_type));
    let host_veth = host_veth_name(input.container_id.as_str(), ifname);
    let store = StateStore::new(&conf.state_dir, &input.config.name);
    let mut undo = Rollback::new();
    tern_node::phase::mark("ipam-prepare");
    let ipam_result = ipam.add_for(input, &ipam_stdin)?;
    tern_node::phase::mark("ipam");
    undo.push("release IPAM", || {
        ipam.exec(Verb::Del, &ipam_stdin).map_err(|e| e.to_string())
    });
    let addrs = pod_addresses(&ipam_result, &conf.ipam_type)?;
    let has_v4 = addrs.iter().any(IpAddr::is_ipv4);
    let has_v6 = addrs.iter().any(IpAddr::is_ipv6);

    let state = AttachmentState {
        container_id: input.container_id.to_string(),
        ifname: ifname.to_owned(),
        host_veth: host_veth.clone(),
        netns: input.netns.display().to_string(),
        addresses: addrs.iter().map(|a| host_prefix(*a)).collect(),
        ip_masq: conf.ip_masq,
    };
    // Written before the first kernel change, so DEL and GC see an ADD killed at any later point.
    store
        .save(&state)
        .map_err(|e| state_io("write attachment state", e))?;
    tern_node::phase::mark("state-write");
    undo.push("remove state", || {
        store
            .remove(input.container_id.as_str(), ifname)
            .map_err(|e| e.to_string())
    });

    enable_forwarding(has_v4, has_v6)?;

    create_veth(&host, &host_veth, ifname, netns, conf.mtu, input, &store)?;
    undo.push("delete host veth", || {
        host.delete_link_by_name(&host_veth)
            .map(drop)
            .map_err(|e| e.to_string())
    });
    let host_link = required_link(&host, &host_veth, "host")?;
    let pod_link = required_link(&pod, ifname, "pod")?;

    configure_host_side(&host, &host_link, has_v4, has_v6)?;
    let routes = configure_pod_side(&pod, netns, &pod_link, &addrs, &ipam_result.routes)?;
    for addr in &addrs {
        add_host_route(&host, host_link.index, *addr)?;
    }
    if let Some(nft) = &nft {
        let (network, cid) = (&input.config.name, input.container_id.as_str());
        // Pushed first: a transaction that failed committed nothing, but one killed after the
        // commit must not be left behind by the undo either.
        undo.push("remove masquerade rules", || {
            crate::masq::remove(nft, network, cid, ifname)
                .map(drop)
                .map_err(|e| e.to_string())
        });
        let subnets: Vec<_> = ipam_result.ips.iter().map(|c| c.address).collect();
        crate::masq::add(nft, network, cid, ifname, &subnets)?;
    }
    // Last, with everything undoable: the pod runs only after ADD returns, so its rules are in
    // the kernel before its first packet.
    crate::admission::admit(input, conf, &addrs)?;

    undo.commit();
    Ok(CniResult {
        interfaces: vec![
            interface(host_veth, &host_link, None),
            interface(ifname.to_owned(), &pod_link, Some(input)),
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
        dns: conf.dns_override.clone().unwrap_or(ipam_result.dns),
    })
}

/// The result's entry for a link ADD made; `sandbox` is the pod's netns for the pod side.
fn interface(name: String, link: &Link, pod: Option<&AddInput>) -> Interface {
    Interface {
        name,
        mac: link.mac.as_ref().map(format_mac),
        mtu: Some(link.mtu),
        sandbox: pod.map(|i| i.netns.display().to_string()),
        ..Default::default()
    }
}

/// The addresses IPAM gave the pod, each one a pod may have.
///
/// # Errors
/// 102 when there is none, or one no pod may have (see [`check_pod_address`]).
fn pod_addresses(ipam_result: &CniResult, ipam_type: &str) -> Result<Vec<IpAddr>, Error> {
    let addrs: Vec<IpAddr> = ipam_result.ips.iter().map(|c| c.address.ip()).collect();
    if addrs.is_empty() {
        return Err(Error::new(
            code::IPAM_NO_ADDRESS,
            "IPAM plugin returned missing IP config",
        )
        .with_details(format!("{ipam_type} returned no address")));
    }
    for a in &addrs {
        check_pod_address(a, ipam_type)?;
    }
    Ok(addrs)
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
            match host.link_by_name(host_veth)? {
                Some(stale) => {
                    tracing::warn!(
                        link = host_veth,
                        "removing a stale host veth of this attachment"
                    );
                    host.delete_link(stale.index)?;
                    host.create_veth(host_veth, ifname, netns, Some(mtu), None)
                        .map_err(Error::from)
                }
                // Otherwise the pod end's name was taken since we looked.
                None => Err(interface_exists(input)),
            }
        }
        Err(e) => Err(Error::from(e)),
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
    h.link_by_name(name)?.ok_or_else(|| {
        Error::new(
            code::NETLINK,
            format!("{side} veth {name} vanished right after it was created"),
        )
    })
}

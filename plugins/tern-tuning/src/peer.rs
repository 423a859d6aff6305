//! The host end of the pod's veth, for `mtu` (case-26; containernetworking/plugins#352): a veth
//! drops a frame larger than the receiving end's MTU silently (no ICMP "fragmentation needed"
//! comes back), so a pod at 1400 behind a host end at 1500 loses every forwarded frame above 1400.
//! tern-tuning therefore sets `mtu` on both ends of a veth, and restores both on DEL.
//!
//! Invariant: a host link is taken for the peer only when the two ends name each other: it is a
//! veth in the plugin's own netns (where the runtime runs the chain, and where tern and ptp put
//! the host end) whose `IFLA_LINK` is the pod link's ifindex, while the pod link's `IFLA_LINK` is
//! its ifindex and names another namespace (`IFLA_LINK_NETNSID`). No other host link is touched.

use tern_cni::{CniResult, Error};
use tern_net::netlink::{Handle, Link};

/// The host end of a pod veth, with a netlink socket in the plugin's own netns.
pub struct HostPeer {
    /// A socket in the plugin's (the host's) netns.
    pub handle: Handle,
    /// The host end as read before any change.
    pub link: Link,
}

/// Whether `host` and `pod` are the two ends of one veth pair (see the module invariant).
pub fn are_peers(host: &Link, pod: &Link) -> bool {
    host.kind.as_deref() == Some("veth")
        && pod.kind.as_deref() == Some("veth")
        && host.peer_index == Some(pod.index)
        && pod.peer_index == Some(host.index)
        && pod.peer_netnsid.is_some()
}

/// Finds the host end of `pod_link` in the plugin's own netns. Candidates, in order: the
/// interfaces `prev` lists without a `sandbox` (the main plugin's host end: tern's and ptp's
/// results list it so), then the link whose index is the pod link's `IFLA_LINK`; the first that
/// passes [`are_peers`] wins.
///
/// # Errors
/// `Ok(None)` when `pod_link` is not a veth (no other end to match). Code 7 when it is a veth
/// whose other end is not in the plugin's netns: tern-tuning cannot keep both ends equal, so it
/// refuses before any change; netlink errors (101) reading the host's links.
pub fn find(pod_link: &Link, prev: Option<&CniResult>) -> Result<Option<HostPeer>, Error> {
    if pod_link.kind.as_deref() != Some("veth") {
        return Ok(None);
    }
    let handle = Handle::new()?;
    let named = prev
        .map(|p| {
            p.interfaces
                .iter()
                .filter(|i| i.sandbox.as_deref().unwrap_or("").is_empty())
                .map(|i| i.name.clone())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let mut candidates = Vec::new();
    for name in named {
        if let Some(l) = handle.link_by_name(&name)? {
            candidates.push(l);
        }
    }
    if let Some(idx) = pod_link.peer_index {
        if let Some(l) = handle.link_by_index(idx)? {
            candidates.push(l);
        }
    }
    match candidates.into_iter().find(|l| are_peers(l, pod_link)) {
        Some(link) => Ok(Some(HostPeer { handle, link })),
        None => Err(Error::invalid_config(format!(
            "mtu: the other end of veth {} is not in the plugin's network namespace",
            pod_link.name
        ))
        .with_details(
            "tern-tuning sets the MTU on both ends of a veth (a veth silently drops frames larger \
             than the receiving end's MTU); run it in the namespace that holds the host end, \
             after the plugin that made the veth",
        )),
    }
}

//! DEL: remove the host veth (its pod end goes with it) while IPAM releases the addresses, then
//! the attachment's masquerade rules (`ipMasq`, in the config or recorded at ADD), then the state.
//!
//! Invariants: never needs the netns (it may be gone or `CNI_NETNS` empty), never needs
//! `prevResult`, never calls the API server, and keeps going after a failed step; a repeated DEL
//! succeeds. Reads only what it needs of the netconf (`DelConf`: `stateDir`, `ipam.type`,
//! `ipMasq`, with the network name, container ID and ifname): a netconf ADD refuses (`"mtu":
//! 70000`, a bad `ipMasqBackend`, ...) never makes it fail, or a runtime would retry it forever
//! and keep the sandbox.

use tern_cni::{DelInput, Error, Verb};
use tern_net::netlink::Handle;

use crate::codes::state_io;
use crate::config::DelConf;
use crate::naming::host_veth_name;
use crate::state::StateStore;
use crate::teardown::Teardown;

/// Runs DEL for one attachment with what it needs of the netconf (`conf`, read leniently: a
/// netconf ADD refuses never makes DEL fail, see [`DelConf`]).
///
/// # Errors
/// Only when something that exists could not be removed, after every step was tried: the
/// first failure's code (IPAM's error keeps its own), every failure's message
/// ([`Teardown::finish`]).
pub fn del(input: &DelInput, conf: &DelConf) -> Result<(), Error> {
    let ifname = input.ifname.as_str();
    let cid = input.container_id.as_str();
    let mut errors = Teardown::new();

    let host_veth = host_veth_name(cid, ifname);
    let store = conf
        .state_dir
        .as_ref()
        .map(|d| StateStore::new(d, &input.config.name));
    // Read once: it says whether ADD masqueraded, and that the veth of this name is ours.
    let state = store.as_ref().and_then(|s| s.load(cid, ifname));
    // Another network's live attachment with the same (container ID, ifname) owns the veth of
    // that name; without state of our own (readable or not), this DEL has no veth to remove.
    // Without a usable stateDir, ADD refused this config before making a veth: none is ours.
    let foreign = match &store {
        None => Some("(unknown: stateDir unusable)".to_owned()),
        Some(_) if state.is_some() => None,
        Some(s) if s.exists(cid, ifname) => None,
        Some(s) => s.claimed_elsewhere(cid, ifname),
    };
    let ipam = conf
        .ipam_type
        .as_ref()
        .map(|t| crate::ipam::delegate(input.delegate(t)));
    // IPAM DEL runs beside the host veth deletion (the kernel's part, which waits for RCU grace
    // periods, is the slowest step): the two touch nothing in common. Both are always waited for.
    // `config.bytes` is the netconf without the fields DEL ignored, so the IPAM plugin can read it.
    let release = || match &ipam {
        Some(ipam) => ipam.exec(Verb::Del, &input.config.bytes),
        None => Ok(()), // no usable ipam.type: ADD refused this config before IPAM ran
    };
    let delete_veth = |errors: &mut Teardown| {
        if let Some(other) = &foreign {
            if store.is_some() {
                tracing::warn!(link = %host_veth, network = %other, "host veth belongs to another network: left alone");
            }
            return;
        }
        match Handle::new() {
            Ok(host) => {
                if let Err(e) = host.delete_link_by_name(&host_veth) {
                    errors.push(Error::new(
                        tern_cni::code::NETLINK,
                        format!("delete {host_veth}: {e}"),
                    ));
                }
            }
            Err(e) => errors.push(Error::from(e)),
        }
    };
    let ipam_name = conf.ipam_type.as_deref().unwrap_or("");
    let ipam_result = std::thread::scope(|s| {
        match std::thread::Builder::new().spawn_scoped(s, release) {
            Ok(released) => {
                delete_veth(&mut errors);
                released.join().unwrap_or_else(|_| {
                    Err(Error::io(format!(
                        "IPAM plugin {ipam_name} panicked during DEL"
                    )))
                })
            }
            // No thread to spare (the node is out of processes): one step after the other.
            Err(_) => {
                delete_veth(&mut errors);
                release()
            }
        }
    });
    errors.record(ipam_result);
    // The rules are keyed by (network, container ID, ifname): found without the netns.
    let masq = conf.ip_masq || state.as_ref().is_some_and(|s| s.ip_masq);
    if masq && foreign.is_none() {
        match tern_net::nft::Nft::find() {
            Ok(nft) => {
                errors.record(crate::masq::remove(&nft, &input.config.name, cid, ifname));
            }
            // No tool, no rules: nothing of ours can be left.
            Err(e) => tracing::warn!(error = %e, "ipMasq: no masquerade rules to remove"),
        }
    }
    if let Some(store) = &store {
        errors.record(
            store
                .remove(cid, ifname)
                .map_err(|e| state_io("remove attachment state", e)),
        );
    }
    errors.finish()
}

/// While the conflist drains, the DEL of the node's last pod releases what no DEL needs (the
/// agent is gone by then): [`tern_net::drain::release_if_idle`] on the conf dir (the
/// kubeconfig's) and the state dir: the kubeconfig, the egress NAT table, the node routes. The
/// conflist and the plugins stay for the runtime's repeat DELs. Never fails the DEL (the pod is
/// torn down): what could not be released is logged, and `tern-agent uninstall` does it.
pub fn release_drained(conf: &DelConf) {
    let (true, Some(conf_dir), Some(state_dir)) = (conf.draining, &conf.conf_dir, &conf.state_dir)
    else {
        return;
    };
    match tern_net::drain::release_if_idle(conf_dir, state_dir) {
        Ok(tern_net::drain::Release::Released) => {
            tracing::info!(conf_dir = %conf_dir.display(), "draining: no attachment left: kubeconfig, egress NAT table and node routes released");
        }
        Ok(other) => tracing::debug!(?other, "draining: nothing released"),
        Err(e) => {
            tracing::warn!(error = %e, "draining: not released; `tern-agent uninstall` on the node removes it");
        }
    }
}

//! DEL: remove the host veth (its pod end goes with it) while IPAM releases the addresses, then
//! the attachment's masquerade rules (`ipMasq`, in the config or recorded at ADD), then the state.
//!
//! Invariants: never needs the netns (it may be gone or `CNI_NETNS` empty), never needs
//! `prevResult`, never calls the API server, and keeps going after a failed step; a repeated DEL
//! succeeds.

use tern_cni::{DelInput, Error, Verb};
use tern_net::netlink::Handle;

use crate::codes::{from_net, state_io};
use crate::config::TernConf;
use crate::naming::host_veth_name;
use crate::state::StateStore;
use crate::teardown::Teardown;

/// Runs DEL for one attachment.
///
/// # Errors
/// Only when something that exists could not be removed, after every step was tried: the
/// first failure's code (IPAM's error keeps its own), every failure's message
/// ([`Teardown::finish`]).
pub fn del(input: &DelInput) -> Result<(), Error> {
    let conf = TernConf::from_netconf(&input.config)?;
    let ifname = input.ifname.as_str();
    let mut errors = Teardown::new();

    let host_veth = host_veth_name(input.container_id.as_str(), ifname);
    let store = StateStore::new(&conf.state_dir, &input.config.name);
    // Read once: it says whether ADD masqueraded, and that the veth of this name is ours.
    let state = store.load(input.container_id.as_str(), ifname);
    // Another network's live attachment with the same (container ID, ifname) owns the veth of
    // that name; without state of our own (readable or not), this DEL has no veth to remove.
    let foreign = if state.is_some() || store.exists(input.container_id.as_str(), ifname) {
        None
    } else {
        store.claimed_elsewhere(input.container_id.as_str(), ifname)
    };
    let ipam = crate::ipam::delegate(input.delegate(&conf.ipam_type));
    // IPAM DEL runs beside the host veth deletion (the kernel's part, which waits for RCU grace
    // periods, is the slowest step): the two touch nothing in common. Both are always waited for.
    let release = || ipam.exec(Verb::Del, &input.config.bytes);
    let delete_veth = |errors: &mut Teardown| {
        if let Some(other) = &foreign {
            tracing::warn!(link = %host_veth, network = %other, "host veth belongs to another network: left alone");
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
            Err(e) => errors.push(from_net(e)),
        }
    };
    let ipam_result = std::thread::scope(|s| {
        match std::thread::Builder::new().spawn_scoped(s, release) {
            Ok(released) => {
                delete_veth(&mut errors);
                released.join().unwrap_or_else(|_| {
                    Err(Error::io(format!(
                        "IPAM plugin {} panicked during DEL",
                        conf.ipam_type
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
                errors.record(crate::masq::remove(
                    &nft,
                    &input.config.name,
                    input.container_id.as_str(),
                    ifname,
                ));
            }
            // No tool, no rules: nothing of ours can be left.
            Err(e) => tracing::warn!(error = %e, "ipMasq: no masquerade rules to remove"),
        }
    }
    errors.record(
        store
            .remove(input.container_id.as_str(), ifname)
            .map_err(|e| state_io("remove attachment state", e)),
    );
    errors.finish()
}

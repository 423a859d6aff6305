//! GC (CNI 1.1.0): forward to IPAM, then remove the masquerade rules (`ipMasq`), host veth and
//! state (and any lock file left by a killed verb) of every attachment of this network that is
//! not in `cni.dev/valid-attachments`. Keeps going on errors and reports
//! them all (CNI spec "GC").

use std::collections::HashSet;

use tern_cni::{code, Error, GcInput, Verb};
use tern_net::netlink::Handle;

use crate::config::TernConf;
use crate::state::StateStore;
use crate::teardown::Teardown;

/// Runs GC for one network.
///
/// # Errors
/// After every step was tried: the first failure's code (the IPAM plugin's error keeps its own;
/// 101 for a veth, 104 for a state file), every failure's message ([`Teardown::finish`]).
pub fn gc(input: &GcInput) -> Result<(), Error> {
    let conf = TernConf::from_netconf(&input.config)?;
    let mut errors = Teardown::new();
    errors.record(
        crate::ipam::delegate(input.delegate(&conf.ipam_type)).exec(Verb::Gc, &input.config.bytes),
    );
    // No list at all means the runtime asked for nothing to be removed.
    if let Some(valid) = &input.valid_attachments {
        let valid: HashSet<(&str, &str)> = valid
            .iter()
            .map(|a| (a.container_id.as_str(), a.ifname.as_str()))
            .collect();
        let store = StateStore::new(&conf.state_dir, &input.config.name);
        let host = Handle::new()?;
        let states = store.list();
        // Masquerade rules first, from the valid list alone: a rule whose state is gone (a DEL
        // that could not reach nft) is found by its key.
        if conf.ip_masq || states.iter().any(|s| s.ip_masq) {
            match tern_net::nft::Nft::find() {
                Ok(nft) => {
                    errors.record(crate::masq::collect(&nft, &input.config.name, &valid));
                }
                Err(e) => tracing::warn!(error = %e, "ipMasq: no masquerade rules to collect"),
            }
        }
        for st in states {
            if valid.contains(&(st.container_id.as_str(), st.ifname.as_str())) {
                continue;
            }
            tracing::info!(container_id = %st.container_id, ifname = %st.ifname, "collecting stale attachment");
            if let Err(e) = host.delete_link_by_name(&st.host_veth) {
                errors.push(Error::new(
                    code::NETLINK,
                    format!("delete {}: {e}", st.host_veth),
                ));
                continue;
            }
            if let Err(e) = store.remove(&st.container_id, &st.ifname) {
                errors.push(Error::new(
                    code::STATE_IO,
                    format!("remove state of {}: {e}", st.container_id),
                ));
            }
        }
        // Lock files of verbs killed with no DEL after them.
        let keep = valid
            .iter()
            .map(|(cid, ifname)| tern_node::lock::file_name(cid, ifname))
            .collect();
        tern_node::lock::sweep(&conf.state_dir.join(&input.config.name), &keep);
    }
    errors.finish()
}

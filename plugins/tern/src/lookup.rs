//! Pod lookup on ADD (DESIGN.md, "Pod lookup"): what IPAM is asked for.

use tern_cni::{AddInput, Error};

use crate::config::TernConf;

/// The netconf bytes to send to IPAM for this ADD: the config as received, plus the `ips`
/// runtimeConfig when the pod's `tern.io/ip-addrs` annotation asks for addresses.
///
/// # Errors
/// Code 7 while a kubeconfig is configured: the lookup is not part of this build yet.
pub fn ipam_stdin(input: &AddInput, conf: &TernConf) -> Result<Vec<u8>, Error> {
    match &conf.kubernetes {
        None => Ok(input.config.bytes.clone()),
        Some(k) => Err(Error::invalid_config(format!(
            "kubernetes.kubeconfig {} is set, but this build of tern has no pod lookup yet (agent socket {})",
            k.kubeconfig.display(),
            conf.agent_socket.display()
        ))),
    }
}

//! STATUS (CNI 1.1.0): ready when the IPAM delegate is, and — with a pod lookup configured — when
//! `tern-lookup` is in `CNI_PATH`, the kubeconfig is readable and its token is valid or the agent is there to renew it. Makes no
//! API call.

use std::os::unix::net::UnixStream;

use tern_cni::{code, Delegate, Error, StatusInput};
use tern_kube::helper::HELPER;
use tern_kube::kubeconfig;
use tern_kube::time::unix_now;

use crate::config::TernConf;

/// Runs STATUS.
///
/// # Errors
/// Code 50 `draining: …` while the conflist is draining (`tern-agent uninstall`); the IPAM
/// plugin's error (50 when it is missing); code 50 when `ipMasq` is set and the nft tool
/// is missing; code 50, with a kubeconfig configured, when
/// `tern-lookup` is not in `CNI_PATH`, the kubeconfig is unreadable or not a regular file (a FIFO
/// is refused without waiting on it), or its token has expired and
/// the agent socket does not accept a connection.
pub fn status(input: &StatusInput) -> Result<(), Error> {
    let conf = TernConf::from_netconf(&input.config)?;
    if conf.draining {
        return Err(Error::new(
            code::NOT_AVAILABLE,
            "draining: tern is being uninstalled from this node",
        )
        .with_details("ADD is refused; DEL and GC still work"));
    }
    crate::ipam::delegate(input.delegate(&conf.ipam_type)).status(&input.config.bytes)?;
    if conf.ip_masq {
        crate::masq::nft().map_err(|e| Error::new(code::NOT_AVAILABLE, e.msg))?;
    }
    let Some(kube) = &conf.kubernetes else {
        return Ok(());
    };
    let not_available = |msg: String| Error::new(code::NOT_AVAILABLE, msg);
    // ADD's lookup runs in tern-lookup: without it every looked-up ADD would fail (code 7).
    if let Err(e) = Delegate::without_attachment(HELPER, &input.cni_path).find() {
        return Err(not_available(format!(
            "{}: the pod lookup needs {HELPER} beside the plugins",
            e.msg
        )));
    }
    // STATUS has no deadline of its own: `load` never waits on a FIFO (see its reader).
    let cfg = kubeconfig::load(&kube.kubeconfig).map_err(|e| {
        // tern-agent writes the kubeconfig: a missing one points at it, a bad file does not.
        let hint = if kube.kubeconfig.exists() {
            ""
        } else {
            "; is tern-agent running?"
        };
        not_available(format!(
            "kubeconfig {} is not usable: {e}{hint}",
            kube.kubeconfig.display()
        ))
    })?;
    let expired = cfg
        .token
        .expiry()
        .ok()
        .flatten()
        .is_some_and(|exp| exp <= unix_now());
    if expired {
        if let Err(e) = UnixStream::connect(&conf.agent_socket) {
            return Err(not_available(format!(
                "the token in {} has expired and tern-agent at {} cannot be reached: {e}",
                kube.kubeconfig.display(),
                conf.agent_socket.display()
            )));
        }
    }
    Ok(())
}

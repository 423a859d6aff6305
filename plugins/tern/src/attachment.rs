//! What ADD and DEL check and lock before touching an attachment.
//!
//! Before a verb touches an attachment: everything tern can check that would otherwise fail
//! after IPAM ran (the state file storable, `CNI_ARGS` as the IPAM plugin will read them), then
//! the attachment's lock, so that ADD and DEL of one attachment never interleave (racing, they
//! could leave a wired pod whose address was released) while different attachments never wait
//! for each other. CHECK only reads and takes no lock.

use tern_cni::{AddInput, AttachmentInput, CniArgs, DelInput, Error};
use tern_node::lock::{check_storable, AttachmentLock};

use crate::codes::state_io;
use crate::config::{DelConf, TernConf};

/// The IPAM types that read `CNI_ARGS` as host-local does: `IP` and `IgnoreUnknown` only,
/// anything else refused unless `IgnoreUnknown` is set.
const HOST_LOCAL_LIKE: &[&str] = &["host-local", "tern-ipam"];

/// The state file's name for an attachment (see [`crate::state::StateStore`]).
fn state_name(container_id: &str, ifname: &str) -> String {
    format!("{container_id}_{ifname}.json")
}

/// Refuses, before anything is written, a `CNI_ARGS` that the IPAM plugin would refuse (with
/// code 999, after tern had begun): for host-local and tern-ipam, keys other than `IP` without
/// `IgnoreUnknown`, and `IP` values that are not addresses (host-local takes one; tern-ipam a
/// comma-separated list). Other IPAM types read `CNI_ARGS` their own way: not checked.
///
/// # Errors
/// Code 4 naming the pair.
pub fn check_cni_args(args: &CniArgs, ipam_type: &str) -> Result<(), Error> {
    if !HOST_LOCAL_LIKE.contains(&ipam_type) {
        return Ok(());
    }
    args.check_known(&["IP"])
        .map_err(|e| e.with_details(format!("{ipam_type} reads CNI_ARGS this way")))?;
    let Some(list) = args.get("IP").filter(|v| !v.is_empty()) else {
        return Ok(());
    };
    let items: Vec<&str> = if ipam_type == "host-local" {
        vec![list]
    } else {
        list.split(',').map(str::trim).collect()
    };
    for item in items {
        if tern_ipam::config::parse_requested(item).is_err() {
            return Err(Error::invalid_env(format!(
                "ARGS: IP={list:?}: {item:?} is not an IP address"
            ))
            .with_details(format!(
                "{ipam_type} takes {}",
                if ipam_type == "host-local" {
                    "one address"
                } else {
                    "a comma-separated list of addresses"
                }
            )));
        }
    }
    Ok(())
}

/// ADD: checks what can be checked of `input` and its parsed netconf `conf`, then takes the lock.
///
/// # Errors
/// Code 7 when the state file cannot be stored (names too long, `stateDir` under a file); code
/// 4 for `CNI_ARGS` the IPAM plugin would refuse; 108 while draining; code 104 when the lock
/// cannot be taken.
pub fn prepare_add(input: &AddInput, conf: &TernConf) -> Result<AttachmentLock, Error> {
    if conf.draining {
        return Err(TernConf::draining_error());
    }
    let dir = conf.state_dir.join(&input.config.name);
    let (cid, ifname) = (input.container_id.as_str(), input.ifname.as_str());
    check_storable(&dir, &state_name(cid, ifname), "attachment state")?;
    check_cni_args(&input.args, &conf.ipam_type)?;
    tern_node::phase::mark("checks");
    lock(&dir, input)
}

/// DEL: the lock when it can be had; `None` when the state could not exist (names too long,
/// `stateDir` unusable: DEL treats that state as gone, so there is nothing to serialise with),
/// and when the network's state directory does not exist (no ADD has locked or written there;
/// DEL creates nothing).
pub fn prepare_del(input: &DelInput, conf: &DelConf) -> Option<AttachmentLock> {
    let dir = conf.state_dir.as_ref()?.join(&input.config.name);
    let name = state_name(input.container_id.as_str(), input.ifname.as_str());
    check_storable(&dir, &name, "attachment state").ok()?;
    if !dir.is_dir() {
        return None;
    }
    lock(&dir, input)
        .map_err(|e| tracing::warn!(error = %e, "DEL without the attachment lock"))
        .ok()
}

fn lock<N>(dir: &std::path::Path, input: &AttachmentInput<N>) -> Result<AttachmentLock, Error> {
    AttachmentLock::acquire(dir, input.container_id.as_str(), input.ifname.as_str())
        .map_err(|e| state_io(&format!("lock attachment in {}", dir.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> CniArgs {
        CniArgs::parse(s).unwrap()
    }

    #[test]
    fn cni_args_as_the_ipam_reads_them() {
        for ipam in ["host-local", "tern-ipam"] {
            for bad in [
                "K8S_POD_NAME=p",
                "FOO=1;IP=10.0.0.5",
                "IP=ten",
                "IP=10.0.0.300",
            ] {
                let e = check_cni_args(&args(bad), ipam).unwrap_err();
                assert_eq!(e.code, 4, "{ipam} {bad}");
            }
            for good in [
                "",
                "IP=10.0.0.5",
                "IP=10.0.0.5/24",
                "IgnoreUnknown=1;K8S_POD_NAME=p;IP=fd00::5",
            ] {
                check_cni_args(&args(good), ipam).unwrap();
            }
        }
        assert_eq!(
            check_cni_args(&args("IP=10.0.0.5,10.0.0.6"), "host-local")
                .unwrap_err()
                .code,
            4
        );
        check_cni_args(&args("IP=10.0.0.5, 10.0.0.6"), "tern-ipam").unwrap();
        // Another IPAM reads CNI_ARGS its own way.
        check_cni_args(&args("K8S_POD_NAME=p;IP=ten"), "calico-ipam").unwrap();
    }
}

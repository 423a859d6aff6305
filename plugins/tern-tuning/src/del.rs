//! DEL: restore what ADD changed from the backup, inside the pod netns.
//!
//! Invariants: reads nothing from the netconf but `dataDir` — a field of the wrong type,
//! duplicated sysctl keys or unknown `CNI_ARGS` fail ADD, never DEL (CNI spec "DEL": complete
//! without error even if resources are missing; libcni stops a chain's DEL at the first error,
//! which would strand the main plugin's veth, state and lease). Succeeds when there is no
//! backup, when it is unreadable, when the netns is absent, gone or no longer a netns (a plain
//! file left by an unmounted bind mount, case-27: nothing left to restore; the backup is
//! removed), and when the interface is gone (link attributes skipped). A backup entry
//! that does not validate (a key outside `/proc/sys/net`, a bad value or MAC: only a tampered
//! or damaged file holds one) is skipped with a warning naming it and never written. Every
//! valid item is restored independently; the backup is kept, and DEL fails, only when a valid
//! item could not be restored on a sysctl or interface that still exists.

use tern_cni::{code, DelInput, Error};
use tern_net::netlink::Handle;
use tern_net::netns::NetNs;
use tern_net::sysctl::{self, SysctlKey, SysctlValue};

use crate::backup::{self, Backup};
use crate::config::{data_dir_for_del, parse_mac};
use crate::TuningPlugin;

/// Runs DEL.
///
/// The backup is kept only when restoring a *valid* entry failed on something that still
/// exists: the pre-tuning value is still needed and the failure may pass (a busy netlink socket,
/// memory pressure), so a retried DEL can finish the job; removing the backup would lose that
/// value for good. Invalid entries are not such a failure: no retry can make them valid, so they
/// are skipped rather than blocking DEL (and everything after it in the chain) forever.
///
/// # Errors
/// Code 5 listing every valid restore that failed on an interface or sysctl that still exists
/// (the backup is kept); 5 when the netns exists but cannot be opened or entered; 104 when the backup
/// cannot be read or removed.
pub fn del(_plugin: &TuningPlugin, input: &DelInput) -> Result<(), Error> {
    let ifname = input.ifname.as_str();
    let data_dir = match data_dir_for_del(&input.config) {
        Ok(d) => d,
        Err(msg) => {
            // ADD refuses such a netconf before writing anything: no backup can exist for it.
            tracing::warn!(problem = %msg, "DEL: no backup to restore (dataDir unusable)");
            return Ok(());
        }
    };
    let file = backup::path(&data_dir, input.container_id.as_str(), ifname);
    let saved = match backup::load(&file) {
        Ok(Some(b)) => b,
        // No backup; a temp file of an ADD killed while writing the first one may remain.
        Ok(None) => return backup::remove(&file),
        Err(e) => {
            // A corrupt backup cannot be fixed by retrying: drop it rather than block DEL.
            tracing::warn!(error = %e, "dropping an unreadable backup");
            return backup::remove(&file);
        }
    };
    let netns = match input.netns.as_ref().map(NetNs::open) {
        None => return backup::remove(&file),
        Some(Err(e)) if e.is_netns_unusable() => {
            // Gone, or a plain file left by an unmounted bind mount (case-27): the namespace and
            // everything tuned in it are gone; what is left to undo is the backup.
            tracing::warn!(error = %e, "DEL: the netns is gone, nothing to restore; backup dropped");
            return backup::remove(&file);
        }
        Some(Err(e)) => return Err(e.into()),
        Some(Ok(ns)) => ns,
    };
    let failures = restore(&netns, ifname, &saved)?;
    if failures.is_empty() {
        backup::remove(&file)
    } else {
        Err(Error::new(
            code::IO_FAILURE,
            format!("restore tuning of {ifname}: {}", failures.join("; ")),
        )
        .with_details(format!(
            "the backup {} is kept so DEL can be retried",
            file.display()
        )))
    }
}

/// Restores `saved` in `netns`, skipping (with a warning) entries that do not validate; returns
/// what failed among the valid ones.
fn restore(netns: &NetNs, ifname: &str, saved: &Backup) -> Result<Vec<String>, Error> {
    let mut failures = Vec::new();
    let mut items = Vec::new();
    let mut skipped = Vec::new();
    for (k, v) in &saved.sysctl {
        match (SysctlKey::parse(k, ifname), SysctlValue::from_kernel(k, v)) {
            (Ok(k), Ok(v)) => items.push((k, v)),
            (Err(e), _) | (_, Err(e)) => skipped.push(format!("sysctl {k:?}: {e}")),
        }
    }
    let mac = match saved.mac.as_deref().map(|m| (m, parse_mac(m))) {
        None => None,
        Some((_, Ok(m))) => Some(m),
        Some((text, Err(e))) => {
            skipped.push(format!("mac {text:?}: {}", e.msg));
            None
        }
    };
    if !skipped.is_empty() {
        tracing::warn!(
            skipped = %skipped.join("; "),
            "DEL: skipping invalid backup entries (the backup was damaged or tampered with); restoring the rest"
        );
    }
    if !items.is_empty() {
        failures.extend(
            sysctl::restore(netns, &items)?
                .iter()
                .map(ToString::to_string),
        );
    }
    if !saved.has_link_attributes() {
        // Sysctls only (an interface's keys too, restored through /proc): no netlink socket in the pod.
        return Ok(failures);
    }
    let handle = Handle::in_netns(netns)?;
    let Some(link) = handle.link_by_name(ifname)? else {
        return Ok(failures); // the interface is gone with its attributes
    };
    let idx = link.index;
    let mut note = |what: &str, r: Result<(), tern_net::Error>| {
        if let Err(e) = r {
            failures.push(format!("failed to restore {what}: {e}"));
        }
    };
    if let Some(mtu) = saved.mtu {
        note("MTU", handle.set_mtu(idx, mtu));
    }
    if let (Some(host), Some(mtu)) = (&saved.host_ifname, saved.host_mtu) {
        // The veth's host end, if it is still this pod link's peer (see `peer`).
        match Handle::new().and_then(|h| Ok((h.link_by_name(host)?, h))) {
            Ok((Some(l), h)) if crate::peer::are_peers(&l, &link) => {
                note("MTU of the host end", h.set_mtu(l.index, mtu));
            }
            Ok(_) => {
                tracing::warn!(link = %host, "DEL: the veth's host end is gone or no longer its peer; its MTU is not restored")
            }
            Err(e) => note("MTU of the host end", Err(e)),
        }
    }
    if let Some(mac) = mac {
        note("MAC address", handle.set_mac(idx, mac));
    }
    if let Some(b) = saved.promisc {
        note("promiscuous mode", handle.set_promisc(idx, b));
    }
    if let Some(b) = saved.allmulti {
        note("all-multicast mode", handle.set_allmulti(idx, b));
    }
    if let Some(q) = saved.txqlen {
        note("transmit queue length", handle.set_txqlen(idx, q));
    }
    Ok(failures)
}

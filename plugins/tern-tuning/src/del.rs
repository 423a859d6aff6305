//! DEL: restore what ADD changed from the backup, inside the pod netns.
//!
//! Invariants: succeeds when there is no backup, when the netns is absent or gone (nothing left
//! to restore; the backup is removed), and when the interface is gone (link attributes skipped);
//! restores every item independently and keeps going; keeps the backup and reports an error only
//! when something that exists could not be restored, so a retried DEL can finish the job.

use tern_cni::{code, DelInput, Error};
use tern_net::netlink::Handle;
use tern_net::netns::NetNs;
use tern_net::sysctl::{self, SysctlKey, SysctlValue};

use crate::backup::{self, Backup};
use crate::config::{parse_mac, TuningConf};
use crate::TuningPlugin;

/// Runs DEL.
///
/// # Errors
/// Code 6/7/4 for an unparsable config or `CNI_ARGS`; code 5 listing every restore that failed
/// on an interface or sysctl that still exists; 104 when the backup cannot be read or removed.
pub fn del(_plugin: &TuningPlugin, input: &DelInput) -> Result<(), Error> {
    let ifname = input.ifname.as_str();
    let conf = TuningConf::from_netconf(&input.config, &input.args)?;
    let file = backup::path(&conf.data_dir, input.container_id.as_str(), ifname);
    let saved = match backup::load(&file) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(()),
        Err(e) => {
            // A corrupt backup cannot be fixed by retrying: drop it rather than block DEL.
            tracing::warn!(error = %e, "dropping an unreadable backup");
            return backup::remove(&file);
        }
    };
    let netns = match input.netns.as_ref().map(NetNs::open) {
        None => return backup::remove(&file),
        Some(Err(e)) if e.is_netns_gone() => return backup::remove(&file),
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

/// Restores `saved` in `netns`; returns what failed.
fn restore(netns: &NetNs, ifname: &str, saved: &Backup) -> Result<Vec<String>, Error> {
    let mut failures = Vec::new();
    let mut items = Vec::new();
    for (k, v) in &saved.sysctl {
        match (SysctlKey::parse(k, ifname), SysctlValue::parse(k, v)) {
            (Ok(k), Ok(v)) => items.push((k, v)),
            (Err(e), _) | (_, Err(e)) => failures.push(e.to_string()),
        }
    }
    if !items.is_empty() {
        failures.extend(
            sysctl::restore(netns, &items)?
                .iter()
                .map(ToString::to_string),
        );
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
    if let Some(mac) = &saved.mac {
        match parse_mac(mac) {
            Ok(m) => note("MAC address", handle.set_mac(idx, m)),
            Err(e) => note(
                "MAC address",
                Err(tern_net::Error::NetlinkProtocol {
                    op: format!("parse backed-up MAC {mac}"),
                    reason: e.to_string(),
                }),
            ),
        }
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

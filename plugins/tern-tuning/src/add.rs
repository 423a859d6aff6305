//! ADD: validate everything, back up the previous values, then apply inside the pod netns —
//! sysctls, MAC, promisc, MTU, allmulti, txqueuelen (the reference's order) — undoing every
//! applied step if a later one fails. `mtu` on a veth is set on its host end too (`peer`). A
//! netns-wide sysctl whose value already differs from a new netns's was written by the runtime
//! (a pod's own `securityContext.sysctls` on CRI-O): it is left so and recorded (`baseline`).
//!
//! Invariants: nothing is written before the whole configuration validated (keys, values,
//! allowlist, MAC, prevResult, and the link exists when link attributes or `IFNAME` keys need
//! it; a sysctl-only configuration does not need `CNI_IFNAME` in the netns; with `mtu` on a
//! veth, its host end is found in the plugin's netns); the backup exists before the first change;
//! on failure the pod netns is left as it was and a backup this ADD created is removed.

use tern_cni::{AddInput, CniResult, Error};
use tern_net::netlink::{format_mac, Handle, Link};
use tern_net::netns::NetNs;
use tern_net::sysctl::{self, Allowlist, SysctlKey, SysctlValue};

use crate::backup::{self, Backup};
use crate::baseline;
use crate::config::{Plan, TuningConf};
use crate::peer::{self, HostPeer};
use crate::TuningPlugin;

/// One applied change and how to undo it.
enum Undo {
    Sysctls(Vec<(SysctlKey, String)>),
    Mac([u8; 6]),
    Promisc(bool),
    Mtu(u32),
    HostMtu(u32),
    Allmulti(bool),
    Txqlen(u32),
}

/// Runs ADD.
///
/// # Errors
/// Code 7 for an invalid or disallowed configuration (nothing written), a missing prevResult or
/// a missing interface (when link attributes or `IFNAME` keys are configured), or `mtu` on a veth
/// whose host end is not in the plugin's netns; 103 when the kernel rejects a sysctl value (earlier writes rolled back);
/// 101 for netlink failures; 104 when the backup cannot be written; 8 when `CNI_NETNS` does not
/// exist or is not a network namespace (checked before anything is written); 5 when it cannot be
/// entered.
pub fn add(plugin: &TuningPlugin, input: &AddInput) -> Result<CniResult, Error> {
    let ifname = input.ifname.as_str();
    let conf = TuningConf::from_netconf(&input.config, &input.args)?;
    let allowlist = Allowlist::load(&plugin.allowlist_path)?;
    tern_node::phase::mark("allowlist");
    let plan = conf.plan(ifname, Some(&allowlist))?;
    let mut result = input.config.prev_result.clone().ok_or_else(|| {
        Error::invalid_config("required prevResult missing").with_details(
            "tern-tuning is a meta plugin: put it after a plugin that creates the interface",
        )
    })?;

    let netns = NetNs::open(&input.netns)?;
    tern_node::phase::mark("netns-open");
    let pod_link = pod_link(&plan, &netns, input)?;
    let link = pod_link.as_ref().map(|(_, l)| l);
    // The veth's host end gets the same MTU (case-26); found, or refused, before any change.
    let host_peer = match (plan.mtu, link) {
        (Some(_), Some(l)) => peer::find(l, Some(&result))?,
        _ => None,
    };

    let _lock = crate::lock::acquire(&conf.data_dir, input)?;
    let file = backup::path(&conf.data_dir, input.container_id.as_str(), ifname);
    let keys: Vec<SysctlKey> = plan.sysctls.iter().map(|(k, _)| k.clone()).collect();
    let existing = backup::load(&file)?;
    let new_netns = baseline::new_netns_values(&conf.data_dir, &keys)?;
    tern_node::phase::mark("new-netns-values");
    // The backup (of the values read just before) is saved before the first write; with
    // sysctls, read, backup and writes happen on one thread inside the pod netns (one entry).
    let host_before = host_peer
        .as_ref()
        .map(|p| (p.link.name.clone(), p.link.mtu));
    let save_backup = |current: Vec<String>| -> Result<(bool, Vec<bool>), Error> {
        let write = to_write(&keys, &current, &new_netns, existing.as_ref());
        let (mut sysctl, mut kept_sysctl) = (Vec::new(), Vec::new());
        for ((key, value), write) in keys.iter().zip(current).zip(&write) {
            let entry = (key.raw().to_string(), value);
            if *write {
                sysctl.push(entry);
            } else {
                tracing::info!(key = key.raw(), value = %entry.1, "left at the value the runtime wrote before the chain (the pod's own sysctl)");
                kept_sysctl.push(entry);
            }
        }
        let mut fresh = Backup {
            network: Some(input.config.name.clone()),
            container_id: Some(input.container_id.as_str().to_owned()),
            ifname: Some(ifname.to_owned()),
            sysctl,
            kept_sysctl,
            mac: plan
                .mac
                .and(link.and_then(|l| l.mac.as_ref()).map(format_mac)),
            mtu: plan.mtu.and(link.map(|l| l.mtu)),
            host_ifname: host_before.as_ref().map(|(n, _)| n.clone()),
            host_mtu: host_before.as_ref().map(|(_, m)| *m),
            promisc: plan.promisc.and(link.map(|l| l.promisc)),
            allmulti: plan.allmulti.and(link.map(|l| l.allmulti)),
            txqlen: plan.txqlen.and(link.map(|l| l.txqlen)),
        };
        // A repeated ADD keeps the values from before the first one.
        let created = existing.is_none();
        if let Some(existing) = existing.clone() {
            merge_into(&mut fresh, existing);
        }
        backup::save(&file, &fresh)?;
        tern_node::phase::mark("backup");
        Ok((created, write))
    };

    let mut undo = Vec::new();
    let created = if plan.sysctls.is_empty() {
        save_backup(Vec::new())?.0
    } else {
        let mut created = false;
        let written = sysctl::write_all_after(&netns, &plan.sysctls, |current| {
            let (c, write) = save_backup(current)?;
            created = c;
            Ok::<_, Error>(write)
        });
        match written {
            Ok(Ok(previous)) => undo.push(Undo::Sysctls(previous)),
            // Nothing written: the backup could not be saved.
            Ok(Err(e)) => return Err(e),
            // write_all_after rolled back its own earlier writes.
            Err(e) => return Err(fail_after_backup(&file, created, e.into())),
        }
        created
    };
    if let Err(e) = apply(pod_link.as_ref(), host_peer.as_ref(), &plan, &mut undo) {
        unwind(&netns, pod_link.as_ref(), host_peer.as_ref(), undo);
        return Err(fail_after_backup(&file, created, e));
    }
    show_in_result(&mut result, &plan, ifname, host_peer.as_ref());
    Ok(result)
}

/// The pod interface and a netlink socket in the pod netns, when the plan needs them: only link
/// attributes and `IFNAME` keys do; a sysctl-only configuration works on the netns alone, as the
/// reference's does (no netlink socket in the pod either).
///
/// # Errors
/// Code 7 when the interface is not in the pod netns; netlink errors.
fn pod_link(plan: &Plan, netns: &NetNs, input: &AddInput) -> Result<Option<(Handle, Link)>, Error> {
    if !plan.needs_link() {
        return Ok(None);
    }
    let ifname = input.ifname.as_str();
    let handle = Handle::in_netns(netns)?;
    let link = handle.link_by_name(ifname)?.ok_or_else(|| {
        Error::invalid_config(format!(
            "interface {ifname} not found in {}",
            input.netns.display()
        ))
        .with_details("tern-tuning adjusts an interface created by an earlier plugin in the chain")
    })?;
    Ok(Some((handle, link)))
}

/// The new MTU (pod interface and its host peer) and MAC (pod interface) in the result passed on.
fn show_in_result(result: &mut CniResult, plan: &Plan, ifname: &str, host_peer: Option<&HostPeer>) {
    if let Some(mtu) = plan.mtu {
        let host = host_peer.map(|p| p.link.name.as_str());
        for iface in result.interfaces.iter_mut() {
            let in_pod = !iface.sandbox.as_deref().unwrap_or("").is_empty();
            if (in_pod && iface.name == ifname) || (!in_pod && Some(iface.name.as_str()) == host) {
                iface.mtu = Some(mtu);
            }
        }
    }
    if let Some(mac) = plan.mac {
        let mac = format_mac(&mac);
        for iface in result.interfaces.iter_mut().filter(|i| i.name == ifname) {
            iface.mac = Some(mac.clone());
        }
    }
}

/// A failed ADD's error, after removing the backup when this ADD `created` it.
fn fail_after_backup(file: &std::path::Path, created: bool, e: Error) -> Error {
    if created {
        if let Err(re) = backup::remove(file) {
            tracing::warn!(error = %re, "could not remove the backup after a failed ADD");
        }
    }
    e
}

/// Per key, whether ADD writes it: not when its value in the pod netns (`current`) differs from a
/// new netns's (`new_netns`, `baseline`), i.e. the runtime wrote it before the chain, as CRI-O
/// writes a pod's `securityContext.sysctls`; containerd writes them after the chain, so the pod's
/// value wins on both. A repeated ADD decides as the first did (the first's writes differ from a
/// new netns's too).
fn to_write(
    keys: &[SysctlKey],
    current: &[String],
    new_netns: &[Option<String>],
    existing: Option<&Backup>,
) -> Vec<bool> {
    let recorded = |list: Option<&Vec<(String, String)>>, key: &SysctlKey| {
        list.is_some_and(|l| l.iter().any(|(k, _)| k == key.raw()))
    };
    keys.iter()
        .zip(current)
        .zip(new_netns)
        .map(|((key, cur), new)| {
            if recorded(existing.map(|b| &b.sysctl), key) {
                return true;
            }
            if recorded(existing.map(|b| &b.kept_sysctl), key) {
                return false;
            }
            new.as_ref()
                .is_none_or(|new| baseline::same_value(new, cur))
        })
        .collect()
}

/// Fields already in `existing` win (they hold the pre-tuning values).
fn merge_into(fresh: &mut Backup, existing: Backup) {
    for (k, v) in existing.sysctl {
        match fresh.sysctl.iter_mut().find(|(key, _)| *key == k) {
            Some(slot) => slot.1 = v,
            None => fresh.sysctl.push((k, v)),
        }
    }
    for (k, v) in existing.kept_sysctl {
        if !fresh.kept_sysctl.iter().any(|(key, _)| *key == k) {
            fresh.kept_sysctl.push((k, v));
        }
    }
    fresh.mac = existing.mac.or(fresh.mac.take());
    fresh.mtu = existing.mtu.or(fresh.mtu);
    if existing.host_mtu.is_some() {
        fresh.host_ifname = existing.host_ifname;
        fresh.host_mtu = existing.host_mtu;
    }
    fresh.promisc = existing.promisc.or(fresh.promisc);
    fresh.allmulti = existing.allmulti.or(fresh.allmulti);
    fresh.txqlen = existing.txqlen.or(fresh.txqlen);
}

/// Writes the link attributes through `pod_link` (present whenever [`Plan::needs_link`]); the
/// sysctls are written before, with the backup.
fn apply(
    pod_link: Option<&(Handle, Link)>,
    host_peer: Option<&HostPeer>,
    plan: &Plan,
    undo: &mut Vec<Undo>,
) -> Result<(), Error> {
    let Some((handle, link)) = pod_link else {
        return Ok(());
    };
    let idx = link.index;
    if let Some(mac) = plan.mac {
        handle.set_mac(idx, mac)?;
        if let Some(old) = link.mac {
            undo.push(Undo::Mac(old));
        }
    }
    if let Some(on) = plan.promisc {
        handle.set_promisc(idx, on)?;
        undo.push(Undo::Promisc(link.promisc));
    }
    if let Some(mtu) = plan.mtu {
        // Both ends of a veth, so that neither drops what the other sends (see `peer`).
        if let Some(p) = host_peer {
            p.handle.set_mtu(p.link.index, mtu)?;
            undo.push(Undo::HostMtu(p.link.mtu));
        }
        handle.set_mtu(idx, mtu)?;
        undo.push(Undo::Mtu(link.mtu));
    }
    if let Some(on) = plan.allmulti {
        handle.set_allmulti(idx, on)?;
        undo.push(Undo::Allmulti(link.allmulti));
    }
    if let Some(q) = plan.txqlen {
        handle.set_txqlen(idx, q)?;
        undo.push(Undo::Txqlen(link.txqlen));
    }
    Ok(())
}

/// Undoes applied steps in reverse order; failures are logged (the ADD error is what matters).
fn unwind(
    netns: &NetNs,
    pod_link: Option<&(Handle, Link)>,
    host_peer: Option<&HostPeer>,
    undo: Vec<Undo>,
) {
    for step in undo.into_iter().rev() {
        let link_step = |f: &dyn Fn(&Handle, u32) -> Result<(), tern_net::Error>| match pod_link {
            Some((handle, link)) => f(handle, link.index),
            None => Ok(()), // no link, so no link step was applied
        };
        let r: Result<(), tern_net::Error> = match step {
            Undo::Sysctls(prev) => {
                let items: Vec<(SysctlKey, SysctlValue)> = prev
                    .into_iter()
                    .filter_map(|(k, v)| SysctlValue::from_kernel(k.raw(), &v).ok().map(|v| (k, v)))
                    .collect();
                sysctl::restore(netns, &items).map(|failures| {
                    for f in failures {
                        tracing::warn!(error = %f, "undo sysctl");
                    }
                })
            }
            Undo::Mac(m) => link_step(&|h, i| h.set_mac(i, m)),
            Undo::Promisc(b) => link_step(&|h, i| h.set_promisc(i, b)),
            Undo::Mtu(m) => link_step(&|h, i| h.set_mtu(i, m)),
            Undo::HostMtu(m) => match host_peer {
                Some(p) => p.handle.set_mtu(p.link.index, m),
                None => Ok(()),
            },
            Undo::Allmulti(b) => link_step(&|h, i| h.set_allmulti(i, b)),
            Undo::Txqlen(q) => link_step(&|h, i| h.set_txqlen(i, q)),
        };
        if let Err(e) = r {
            tracing::warn!(error = %e, "undo after failed ADD");
        }
    }
}

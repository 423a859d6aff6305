//! CHECK: every configured sysctl and link attribute still has its configured value.
//!
//! A sysctl ADD left at the value the runtime wrote (the backup's `keptSysctl`) is expected at
//! that value.
//!
//! Invariant: read-only. The interface must exist only when ADD needed it (link attributes or
//! `IFNAME` keys: [`crate::config::Plan::needs_link`]); the reference requires it even for plain
//! sysctls, which would fail CHECK right after a successful ADD. Sysctl values are compared after
//! collapsing whitespace (the kernel prints multi-value sysctls with tabs; the reference compares
//! strings exactly and fails on them).

use tern_cni::{code, CheckInput, Error};
use tern_net::netlink::{format_mac, Handle};
use tern_net::netns::NetNs;
use tern_net::sysctl::{self, SysctlKey};

use crate::backup;
use crate::baseline::same_value;
use crate::config::{Plan, TuningConf};
use crate::TuningPlugin;

/// Code used when the pod's state differs from the configuration: 106, not 5 (an I/O failure
/// is something else; a runtime may want to tell "broken" from "drifted").
pub const CHECK_MISMATCH: u32 = code::CHECK_MISMATCH;

/// Runs CHECK.
///
/// # Errors
/// Code 7 when prevResult is missing or the configuration is invalid; code 106
/// ([`code::CHECK_MISMATCH`]) naming every mismatch with its expected and current value, or a
/// missing interface.
pub fn check(_plugin: &TuningPlugin, input: &CheckInput) -> Result<(), Error> {
    let ifname = input.ifname.as_str();
    let conf = TuningConf::from_netconf(&input.config, &input.args)?;
    // The allowlist governs what may be written; CHECK only reads.
    let plan = conf.plan(ifname, None)?;
    if input.config.prev_result.is_none() {
        return Err(Error::invalid_config("required prevResult missing"));
    }
    let netns = NetNs::open(&input.netns)?;
    // As ADD: plain sysctls need no interface, so only then is its absence no mismatch.
    let link = if plan.needs_link() {
        let handle = Handle::in_netns(&netns)?;
        let link = handle.link_by_name(ifname)?.ok_or_else(|| {
            Error::new(
                CHECK_MISMATCH,
                format!("cannot find container link {ifname}"),
            )
        })?;
        Some(link)
    } else {
        None
    };
    let mut diffs = sysctl_diffs(&conf, input, &plan, &netns)?;
    let Some(link) = link else {
        return mismatch(ifname, diffs);
    };
    if let Some(mac) = plan.mac {
        if link.mac != Some(mac) {
            diffs.push(format!(
                "mac: expected {}, current {}",
                format_mac(&mac),
                link.mac
                    .as_ref()
                    .map(format_mac)
                    .unwrap_or_else(|| "none".into())
            ));
        }
    }
    let host_end = match plan.mtu {
        Some(_) => match crate::peer::find(&link, input.config.prev_result.as_ref()) {
            Ok(Some(p)) => Some(Ok(p)),
            Ok(None) => None,
            Err(e) => Some(Err(e.msg)),
        },
        None => None,
    };
    let mut cmp = |what: &str, want: Option<String>, cur: String| {
        if let Some(want) = want {
            if want != cur {
                diffs.push(format!("{what}: expected {want}, current {cur}"));
            }
        }
    };
    cmp("mtu", plan.mtu.map(|v| v.to_string()), link.mtu.to_string());
    // Both ends of a veth (see `peer`).
    if let Some(Ok(p)) = &host_end {
        cmp(
            &format!("mtu of the host end {}", p.link.name),
            plan.mtu.map(|v| v.to_string()),
            p.link.mtu.to_string(),
        );
    }
    cmp(
        "promisc",
        plan.promisc.map(|v| v.to_string()),
        link.promisc.to_string(),
    );
    cmp(
        "allmulti",
        plan.allmulti.map(|v| v.to_string()),
        link.allmulti.to_string(),
    );
    cmp(
        "txQLen",
        plan.txqlen.map(|v| v.to_string()),
        link.txqlen.to_string(),
    );
    if let Some(Err(msg)) = host_end {
        diffs.push(msg);
    }
    mismatch(ifname, diffs)
}

/// Every configured sysctl whose value in the pod netns differs from what ADD left: the
/// configured value, or the runtime's for a key ADD kept (the backup's `keptSysctl`).
///
/// # Errors
/// Code 104 when the backup cannot be read; sysctl read and netns errors.
fn sysctl_diffs(
    conf: &TuningConf,
    input: &CheckInput,
    plan: &Plan,
    netns: &NetNs,
) -> Result<Vec<String>, Error> {
    let keys: Vec<SysctlKey> = plan.sysctls.iter().map(|(k, _)| k.clone()).collect();
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let file = backup::path(
        &conf.data_dir,
        input.container_id.as_str(),
        input.ifname.as_str(),
    );
    let kept = backup::load(&file)?
        .map(|b| b.kept_sysctl)
        .unwrap_or_default();
    let current = sysctl::read(netns, &keys)?;
    let mut diffs = Vec::new();
    for ((key, want), cur) in plan.sysctls.iter().zip(current) {
        let (want, whose) = match kept.iter().find(|(k, _)| k == key.raw()) {
            Some((_, v)) => (v.as_str(), " (the runtime's, kept at ADD)"),
            None => (want.as_str(), ""),
        };
        if !same_value(want, &cur) {
            diffs.push(format!(
                "sysctl {} ({}): expected {want:?}{whose}, current {cur:?}",
                key.raw(),
                key.path().display(),
            ));
        }
    }
    Ok(diffs)
}

/// `Ok` when `diffs` is empty, else code 106 listing them.
fn mismatch(ifname: &str, diffs: Vec<String>) -> Result<(), Error> {
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(Error::new(
            CHECK_MISMATCH,
            format!(
                "tuning of {ifname} differs from the configuration: {}",
                diffs.join("; ")
            ),
        ))
    }
}

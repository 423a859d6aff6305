//! `tern-agent install`: the DaemonSet's init step, in order; its settings are in `config.rs`, the
//! conflist template and its checks in the crate's `conflist.rs`.
//!
//! Order: (1) render and validate the conflist (reading the node's `spec.podCIDRs` when the
//! template needs them), check that every plugin in `--plugins` is a regular file in
//! `--src-bin-dir` and read it, and so for every reference plugin in `--reference-plugins`
//! (portmap, bandwidth); (2) mint the first CNI token (TokenRequest), kept in memory; (3) copy
//! the plugins, then the reference plugins (`reference.rs`: its ledger first, a name the node
//! already had is never recorded as tern's); (4) write the kubeconfig; (5) write the conflist,
//! last.
//!
//! Invariants: nothing on the host changes unless the rendered conflist is valid JSON whose
//! `tern-tuning`/`tuning` sysctl entries all pass the same key, value and allowlist checks as
//! tern-tuning (`tern_net::sysctl`), every listed plugin is present, and the TokenRequest
//! succeeded; only the listed plugins (by default `tern`, `tern-tuning`, `tern-ipam`,
//! `tern-lookup`, and the reference `portmap` and `bandwidth`) are copied, never anything else
//! in the source directory; every file is replaced atomically (temp file in
//! the same directory, fsync, rename), so a running plugin never sees a half-written binary and the
//! runtime never sees a half-written conflist; the kubeconfig (0600) is written before the
//! conflist (0644), so the runtime never sees a network without credentials; a refusal leaves the
//! previous conflist in place.

use std::time::Duration;

use anyhow::{bail, Context as _};
use tern_kube::write_atomic;
use tern_net::sysctl::Allowlist;
use tracing::info;

use crate::conflist::{
    ranges_for, render, require_lookup_helper, validate_tuning, RANGES_PLACEHOLDER,
};
use crate::mint::{in_cluster_client, mint_kubeconfig};

mod config;
pub mod reference;

pub use config::{InstallArgs, InstallConfig, Report, DEFAULT_PLUGINS};

/// Reads every plugin in `names` (`cfg.plugins` or `cfg.reference_plugins`, the flag `flag`)
/// from `cfg.src_bin_dir`: (name, bytes).
///
/// # Errors
/// A plugin is missing or not a regular file (named, with the directory and the flag to change).
fn read_plugins(
    cfg: &InstallConfig,
    names: &[String],
    flag: &str,
) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut missing = Vec::new();
    let mut out = Vec::new();
    for name in names {
        let path = cfg.src_bin_dir.join(name);
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => {
                let bytes =
                    std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
                out.push((name.clone(), bytes));
            }
            _ => missing.push(name.as_str()),
        }
    }
    if !missing.is_empty() {
        bail!(
            "plugin {} not found in {} (a regular file is needed; --src-bin-dir sets the directory, {flag} the list, now {})",
            missing.join(", "),
            cfg.src_bin_dir.display(),
            names.join(",")
        );
    }
    Ok(out)
}

/// Runs the install in the order of the module docs.
///
/// # Errors
/// Any step failed. A failure up to and including the TokenRequest changes nothing on the host;
/// after it, what was already replaced stays replaced (plugins, kubeconfig), and the conflist is
/// written only when everything before it succeeded.
pub fn install(cfg: &InstallConfig) -> anyhow::Result<Report> {
    let host_kubeconfig = cfg.host_conf_dir.join(&cfg.kubeconfig_name);
    // 1. Render and validate, and read the plugins, before touching anything.
    let ranges = if cfg.pod_cidrs_from_node {
        if cfg.node_name.is_empty() {
            bail!("reading the node's spec.podCIDRs (for {RANGES_PLACEHOLDER}) needs the node name: set NODE_NAME or pass --node-name (or --pod-cidrs-from-node false with a template that does not use {RANGES_PLACEHOLDER})");
        }
        let (client, _) =
            in_cluster_client(&cfg.token_target.api).context("in-cluster credentials")?;
        let node = client
            .get_node(&cfg.node_name, Duration::from_secs(10))
            .with_context(|| format!("read node {}", cfg.node_name))?;
        if node.pod_cidrs.is_empty() {
            bail!("node {} has no spec.podCIDRs yet; retry once the controller manager has assigned them", cfg.node_name);
        }
        Some(ranges_for(&node.pod_cidrs))
    } else {
        None
    };
    let conflist = render(
        &cfg.template,
        &host_kubeconfig,
        &cfg.node_name,
        ranges.as_ref(),
    )?;
    let allowlist = Allowlist::load(&cfg.allowlist)?;
    validate_tuning(&conflist, &allowlist)?;
    require_lookup_helper(&conflist, &cfg.plugins)?;
    let conflist_text = serde_json::to_string_pretty(&conflist)? + "\n";
    if cfg.plugins.is_empty() {
        bail!("no plugins to install (--plugins is empty)");
    }
    let plugins = read_plugins(cfg, &cfg.plugins, "--plugins")?;
    let reference_plugins = read_plugins(cfg, &cfg.reference_plugins, "--reference-plugins")?;

    // 2. The first token, before the host changes: a failing TokenRequest leaves it untouched.
    let mut target = cfg.token_target.clone();
    target.kubeconfig = cfg.cni_conf_dir.join(&cfg.kubeconfig_name);
    let minted = mint_kubeconfig(&target).context("mint the first CNI token")?;

    // 3–5 under the conf dir's lock: a running agent's pod-range rewrite never interleaves with
    // them, nor an uninstall (which holds it from its mark to its finish), so an install that
    // began while an uninstall ran is never undone by that uninstall's finish.
    std::fs::create_dir_all(&cfg.cni_conf_dir)
        .with_context(|| format!("create {}", cfg.cni_conf_dir.display()))?;
    let _held = tern_net::drain::lock_conf_dir(&cfg.cni_conf_dir)
        .with_context(|| format!("lock {}", cfg.cni_conf_dir.display()))?;

    // 3. The plugins (only those listed), each replaced atomically.
    std::fs::create_dir_all(&cfg.cni_bin_dir)
        .with_context(|| format!("create {}", cfg.cni_bin_dir.display()))?;
    let mut binaries = Vec::new();
    for (name, bytes) in plugins {
        write_atomic(&cfg.cni_bin_dir.join(&name), &bytes, 0o755)?;
        info!(binary = %name, dir = %cfg.cni_bin_dir.display(), "installed binary");
        binaries.push(name);
    }
    // 3b. The reference plugins (portmap, bandwidth), under reference.rs's rules: the ledger
    // first, then each binary atomically.
    let reference = reference::install(
        &cfg.cni_bin_dir,
        &reference_plugins,
        cfg.update_reference_plugins,
    )?;

    // 4. The kubeconfig, before the conflist.
    minted.write(&target.kubeconfig)?;
    info!(kubeconfig = %target.kubeconfig.display(), expires_at = %tern_kube::time::format_rfc3339(minted.status.expiration_timestamp), "wrote kubeconfig");

    // 5. The conflist, last; then the mark's removal.
    let conflist_path = cfg.cni_conf_dir.join(&cfg.conflist_name);
    write_atomic(&conflist_path, conflist_text.as_bytes(), 0o644)?;
    info!(conflist = %conflist_path.display(), "wrote conflist");
    // A (re)install supersedes an unfinished uninstall: its controllers keep the node again.
    let mark = cfg.cni_conf_dir.join(crate::uninstall::UNINSTALLING_MARK);
    match std::fs::remove_file(&mark) {
        Ok(()) => info!(mark = %mark.display(), "removed the uninstall mark"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("remove {}", mark.display())),
    }
    Ok(Report {
        binaries,
        reference,
        kubeconfig: target.kubeconfig,
        conflist: conflist_path,
    })
}

/// Entry point for `tern-agent install` with its parsed flags.
///
/// # Errors
/// As [`InstallConfig::from_install_args`] and [`install`].
pub fn main(args: InstallArgs) -> anyhow::Result<()> {
    let cfg = InstallConfig::from_install_args(args, &|k| std::env::var(k).ok())?;
    let r = install(&cfg)?;
    info!(binaries = ?r.binaries, reference = ?r.reference, "install done");
    Ok(())
}

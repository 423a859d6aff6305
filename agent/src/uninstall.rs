//! `tern-agent uninstall`: removes tern from a node — the conflist first (the runtime stops using
//! tern at once), then the kubeconfig and the binaries, but only when no tern attachment is left
//! (a pod still wired by tern needs them for its DEL), and with them the egress NAT table
//! (`inet tern_nat`: those pods keep their egress until they are gone) and the node routes
//! (every route with tern's protocol number, 116, both families).
//!
//! Invariants: only the named files are removed, never anything else in the directories; a
//! missing file is already removed; with `--if-daemonset-deleted` nothing changes unless the
//! DaemonSet is gone or being deleted (a restarted or upgraded agent pod leaves tern installed).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use tern_kube::KubeError;
use tracing::{info, warn};

use crate::cli::{parse_plugins, ApiArgs};
use crate::config::RunConfig;
use crate::mint::in_cluster_client;

/// `tern-agent uninstall` flags.
#[derive(Debug, Clone, Args)]
pub struct UninstallArgs {
    /// The API server and the agent's credentials (used only with --if-daemonset-deleted).
    #[command(flatten)]
    pub api: ApiArgs,
    /// Comma-separated plugin file names to remove from --cni-bin-dir
    #[arg(
        long,
        value_name = "LIST",
        default_value = "tern,tern-tuning,tern-ipam,tern-lookup"
    )]
    pub plugins: String,
    /// The host's CNI bin dir as mounted here
    #[arg(long, value_name = "DIR", default_value = "/host/opt/cni/bin")]
    pub cni_bin_dir: PathBuf,
    /// The host's CNI conf dir as mounted here
    #[arg(long, value_name = "DIR", default_value = "/host/etc/cni/net.d")]
    pub cni_conf_dir: PathBuf,
    /// File name of the conflist
    #[arg(long, value_name = "NAME", default_value = "10-tern.conflist")]
    pub conflist_name: String,
    /// File name of the kubeconfig
    #[arg(long, value_name = "NAME", default_value = "tern-kubeconfig")]
    pub kubeconfig_name: String,
    /// tern's attachment state (the plugin's stateDir) as mounted here: one directory per
    /// network, one JSON file per attachment
    #[arg(long, value_name = "DIR", default_value = "/host/run/cni/tern")]
    pub state_dir: PathBuf,
    /// Also remove the egress NAT table (inet tern_nat) with the kubeconfig and the plugins
    /// (true, false, 1 or 0; false leaves it, e.g. in a test on a node whose NAT must stay)
    #[arg(
        long,
        value_name = "BOOL",
        default_value = "true",
        value_parser = crate::cli::parse_bool,
        action = clap::ArgAction::Set
    )]
    pub remove_egress_nat: bool,
    /// Also remove the node routes (every route with protocol 116, both families) with the
    /// kubeconfig and the plugins (true, false, 1 or 0; false leaves them, e.g. in a test in the
    /// machine's own netns)
    #[arg(
        long,
        value_name = "BOOL",
        default_value = "true",
        value_parser = crate::cli::parse_bool,
        action = clap::ArgAction::Set
    )]
    pub remove_node_routes: bool,
    /// Act only when this DaemonSet (in the agent's namespace) is gone or being deleted, or the
    /// agent's RBAC refuses the read (403: removed with it)
    #[arg(long, value_name = "NAME")]
    pub if_daemonset_deleted: Option<String>,
}

/// What `uninstall` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The conflist is removed; the kubeconfig and binaries are kept because `attachments` tern
    /// attachments are left on the node.
    ConflistOnly {
        /// How many attachment state files were found.
        attachments: usize,
    },
    /// Everything removed (files that were already absent count as removed).
    Removed,
}

/// The number of tern attachments on the node: `*.json` files one level under `state_dir`
/// (`<stateDir>/<network>/<containerID>_<ifname>.json`). An absent directory holds none.
///
/// # Errors
/// A directory that exists but cannot be read (then nothing can be concluded).
pub fn count_attachments(state_dir: &Path) -> anyhow::Result<usize> {
    let nets = match std::fs::read_dir(state_dir) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("read {}", state_dir.display())),
    };
    let mut n = 0;
    for net in nets {
        let net = net.with_context(|| format!("read {}", state_dir.display()))?;
        if !net.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let files = std::fs::read_dir(net.path())
            .with_context(|| format!("read {}", net.path().display()))?;
        for f in files.flatten() {
            if f.path().extension().is_some_and(|e| e == "json") {
                n += 1;
            }
        }
    }
    Ok(n)
}

fn remove(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {
            info!(file = %path.display(), "removed");
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("remove {}", path.display())),
    }
}

/// Removes tern's files in the order of the module docs (no DaemonSet check).
///
/// # Errors
/// A file could not be removed, or the state directory could not be read (then the conflist is
/// gone and the kubeconfig and binaries are kept).
pub fn uninstall(a: &UninstallArgs) -> anyhow::Result<Outcome> {
    let plugins = parse_plugins(&a.plugins)?;
    remove(&a.cni_conf_dir.join(&a.conflist_name))?;
    let attachments = count_attachments(&a.state_dir)?;
    if attachments > 0 {
        warn!(
            attachments,
            state_dir = %a.state_dir.display(),
            "tern attachments are left on the node: keeping the kubeconfig and the binaries for their DEL; run uninstall again once those pods are gone"
        );
        return Ok(Outcome::ConflistOnly { attachments });
    }
    remove(&a.cni_conf_dir.join(&a.kubeconfig_name))?;
    for p in &plugins {
        remove(&a.cni_bin_dir.join(p))?;
    }
    if a.remove_egress_nat {
        crate::egress::remove().context("remove the egress NAT table (nft)")?;
        info!(
            table = crate::egress::TABLE,
            "egress NAT table removed (if there was one)"
        );
    }
    if a.remove_node_routes {
        let h = tern_net::netlink::Handle::new().context("netlink (remove the node routes)")?;
        let n = crate::routes::kernel::remove_all(&h)
            .context("remove the node routes (protocol 116)")?;
        info!(
            routes = n,
            protocol = crate::routes::TERN_PROTOCOL,
            "node routes removed"
        );
    }
    Ok(Outcome::Removed)
}

/// Whether the DaemonSet `name` is being removed: gone (404), being deleted, or the agent's RBAC
/// refused (403: removed with it; `install` needs the same RBAC, so tern could not come back).
///
/// # Errors
/// The API server could not tell: unreachable, timeout, 5xx, unreadable credentials, or 401 (a
/// signing-key rotation looks the same as a deleted service account, and must not remove tern).
fn daemonset_deleted(cfg: &RunConfig, name: &str) -> anyhow::Result<bool> {
    let (client, _) = in_cluster_client(cfg).context("in-cluster credentials")?;
    match client.daemonset_deleting(&cfg.namespace, name, Duration::from_secs(10)) {
        Ok(deleting) => Ok(deleting),
        Err(KubeError::NotFound { .. } | KubeError::Forbidden { .. }) => Ok(true),
        Err(e) => Err(e).with_context(|| {
            format!("read daemonset {}/{name} (tern stays installed; run `tern-agent uninstall` on the node to remove it)", cfg.namespace)
        }),
    }
}

/// Entry point for `tern-agent uninstall` with its parsed flags.
///
/// # Errors
/// As [`uninstall`]; with `--if-daemonset-deleted`, also when the API server cannot say whether
/// the DaemonSet is being deleted (then nothing changed).
pub fn main(a: UninstallArgs) -> anyhow::Result<()> {
    if let Some(ds) = &a.if_daemonset_deleted {
        let cfg = RunConfig::from_api(&a.api, &|k| std::env::var(k).ok())?;
        if !daemonset_deleted(&cfg, ds)? {
            info!(daemonset = %ds, "the DaemonSet is not being deleted: tern stays installed");
            return Ok(());
        }
    }
    match uninstall(&a)? {
        Outcome::Removed => info!("uninstall done: conflist, kubeconfig and binaries removed"),
        Outcome::ConflistOnly { attachments } => {
            info!(
                attachments,
                "uninstall: conflist removed, kubeconfig and binaries kept"
            );
        }
    }
    Ok(())
}

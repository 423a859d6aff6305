//! `tern-agent uninstall`: removes tern from a node by draining it. First it marks the node
//! (`tern-uninstalling` beside the conflist: from then on no egress NAT or node-route resync of a
//! running agent restores anything) and rewrites the conflist as draining (`"draining": true` on
//! tern's plugin object): STATUS answers 50 (the kubelet reports the network not ready), ADD is
//! refused (108), while DEL and GC work, so the runtime still tears down every pod deleted
//! afterwards (containerd 2 cannot DEL without a conflist) — through the whole chain, so
//! `portmap` and `bandwidth` remove a pod's hostPort rules and qdiscs too. Only when no tern
//! attachment is left does it remove the conflist, the kubeconfig, the binaries (tern's own, and
//! the reference plugins its ledger says tern installed: never the node's own `portmap`), the
//! egress NAT table (`inet tern_nat`) and the node routes (protocol 116, both families), then the
//! mark. The mark holds the plan of what to remove ([`tern_net::drain::DrainPlan`]): with the
//! agent gone, the DEL of the node's last pod releases what no DEL needs (the kubeconfig, the
//! egress NAT table, the node routes; [`tern_net::drain::release_if_idle`]), and a run by hand
//! once no sandbox is left removes the rest (a runtime DELs a stopped sandbox again before
//! removing it).
//!
//! Invariants: only the named files are removed, never anything else in the directories; a
//! missing file is already removed; with `--if-daemonset-deleted` nothing changes unless the
//! DaemonSet is gone or being deleted (a restarted or upgraded agent pod leaves tern installed);
//! `tern-agent install` removes the mark (a reinstall supersedes an unfinished uninstall).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use nix::fcntl::Flock;
use tern_kube::KubeError;
use tern_net::drain::DrainPlan;
use tracing::{info, warn};

use crate::args::{api_server_from, namespace_from, parse_plugins, ApiArgs};
use crate::mint::{in_cluster_client, ApiAccess};

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
    #[arg(long, value_name = "BOOL", default_value = "true")]
    pub remove_egress_nat: crate::args::Switch,
    /// Also remove the node routes (every route with protocol 116, both families) with the
    /// kubeconfig and the plugins (true, false, 1 or 0; false leaves them, e.g. in a test in the
    /// machine's own netns)
    #[arg(long, value_name = "BOOL", default_value = "true")]
    pub remove_node_routes: crate::args::Switch,
    /// Also remove the NetworkPolicy table (inet tern_netpol) with the kubeconfig and the
    /// plugins (true, false, 1 or 0)
    #[arg(long, value_name = "BOOL", default_value = "true")]
    pub remove_network_policy: crate::args::Switch,
    /// Act only when this DaemonSet (in the agent's namespace) is gone or being deleted, or the
    /// agent's RBAC refuses the read (403: removed with it)
    #[arg(long, value_name = "NAME")]
    pub if_daemonset_deleted: Option<String>,
    /// With no attachment left, keep the conflist and plugins (draining) until this long after
    /// the node's last teardown: the runtime may DEL a stopped sandbox again when it removes it
    /// (containerd 2; the kubelet removes a deleted pod's sandbox at its container GC, every
    /// 60 s). 0s removes them at once
    #[arg(long, value_name = "DURATION", default_value = "75s", value_parser = crate::args::parse_duration)]
    pub sandbox_removal_wait: Duration,
}

/// The mark `uninstall` leaves in the CNI conf dir while tern drains; a running agent's
/// controllers stop restoring state when it is there ([`uninstalling`]).
pub use tern_net::drain::MARK as UNINSTALLING_MARK;

/// Whether `tern-agent uninstall` began on this node: the mark is beside the kubeconfig (which
/// lives in the CNI conf dir). The egress NAT and node-route controllers check it before each
/// change, so no resync brings back what uninstall removes.
pub fn uninstalling(kubeconfig: &Path) -> bool {
    kubeconfig.with_file_name(UNINSTALLING_MARK).exists()
}

/// What `uninstall` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The conflist is draining (STATUS 50, ADD refused, DEL and GC work); the kubeconfig and
    /// binaries are kept because `attachments` tern attachments are left on the node.
    Draining {
        /// How many attachment state files were found.
        attachments: usize,
    },
    /// Everything removed (files that were already absent count as removed).
    Removed,
    /// `tern-agent install` ran while this waited for the runtime's repeat DELs (the mark gone):
    /// the install stands, nothing more removed.
    Superseded,
}

/// The number of tern attachments on the node: `*.json` files one level under `state_dir`
/// (`<stateDir>/<network>/<containerID>_<ifname>.json`). An absent directory holds none.
///
/// # Errors
/// A directory that exists but cannot be read (then nothing can be concluded).
pub fn count_attachments(state_dir: &Path) -> anyhow::Result<usize> {
    Ok(tern_net::drain::count_attachments(state_dir)?)
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

/// Rewrites the conflist at `path` as draining: `"draining": true` on every plugin of type
/// `tern`, atomically. A missing conflist is left missing; one that is not a conflist JSON (no
/// `plugins` list) is removed instead (the runtime then stops using it at once, as before).
///
/// # Errors
/// The file could not be read, written or removed.
pub fn drain(path: &Path) -> anyhow::Result<()> {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    };
    let mut list: serde_json::Value = match serde_json::from_slice(&text) {
        Ok(v) => v,
        Err(e) => {
            warn!(error = %e, conflist = %path.display(), "the conflist is not JSON: removed instead of drained");
            return remove(path);
        }
    };
    let Some(plugins) = list.get_mut("plugins").and_then(|p| p.as_array_mut()) else {
        warn!(conflist = %path.display(), "the conflist has no plugins list: removed instead of drained");
        return remove(path);
    };
    let mut changed = false;
    for p in plugins.iter_mut() {
        if p.get("type").and_then(|t| t.as_str()) == Some("tern")
            && p.get("draining").and_then(|d| d.as_bool()) != Some(true)
        {
            p["draining"] = serde_json::Value::Bool(true);
            changed = true;
        }
    }
    if changed {
        let bytes = serde_json::to_vec_pretty(&list).context("encode the draining conflist")?;
        tern_kube::write_atomic(path, &bytes, 0o644)?;
        info!(conflist = %path.display(), "conflist draining: STATUS 50, ADD refused, DEL and GC work");
    }
    Ok(())
}

/// Writes the mark (the plan) in `conf_dir`, then drains the conflist `plan.conflist`, both under
/// the conf dir's lock ([`tern_net::drain::lock_conf_dir`]): the running agent's pod-range rewrite
/// checks the mark under the same lock, so it either wrote before the drain (which then drains
/// its file) or sees the mark and writes nothing. An absent conf dir gets no mark and has no
/// conflist to drain.
///
/// # Errors
/// The conf dir cannot be locked, the mark cannot be written, or [`drain`] fails.
pub fn mark_and_drain(plan: &DrainPlan, conf_dir: &Path) -> anyhow::Result<()> {
    let held = lock_conf_dir_if_present(conf_dir)?;
    mark_and_drain_held(plan, conf_dir, held.as_ref())
}

/// The conf dir's lock ([`tern_net::drain::lock_conf_dir_if_present`]); `None` when the directory
/// is absent.
fn lock_conf_dir_if_present(conf_dir: &Path) -> anyhow::Result<Option<Flock<File>>> {
    tern_net::drain::lock_conf_dir_if_present(conf_dir)
        .with_context(|| format!("lock {}", conf_dir.display()))
}

/// [`mark_and_drain`] with the conf dir's lock `held` by the caller (`None`: no conf dir, so
/// nothing to mark or drain).
fn mark_and_drain_held(
    plan: &DrainPlan,
    conf_dir: &Path,
    held: Option<&Flock<File>>,
) -> anyhow::Result<()> {
    if held.is_none() {
        return Ok(());
    }
    plan.write_mark(conf_dir)?;
    drain(&conf_dir.join(&plan.conflist))
}

/// Removes tern from the node in the order of the module docs (no DaemonSet check).
///
/// # Errors
/// The mark could not be written, the conflist could not be drained, a file could not be
/// removed, or the state directory could not be read (then the conflist stays draining and the
/// kubeconfig and binaries are kept).
pub fn uninstall(a: &UninstallArgs) -> anyhow::Result<Outcome> {
    let plan = DrainPlan {
        conflist: a.conflist_name.clone(),
        kubeconfig: a.kubeconfig_name.clone(),
        plugins: parse_plugins(&a.plugins)?,
        remove_egress_nat: a.remove_egress_nat.0,
        remove_node_routes: a.remove_node_routes.0,
        remove_network_policy: a.remove_network_policy.0,
    };
    plan.validate()
        .map_err(|e| anyhow::anyhow!("--conflist-name, --kubeconfig-name, --plugins: {e}"))?;
    // The conf dir's lock from the mark to the finish (the mark's removal included): an install
    // that began meanwhile waits for it, so this finish never removes what that install wrote.
    let held = lock_conf_dir_if_present(&a.cni_conf_dir)?;
    mark_and_drain_held(&plan, &a.cni_conf_dir, held.as_ref())?;
    let attachments = count_attachments(&a.state_dir)?;
    if attachments > 0 {
        warn!(
            attachments,
            state_dir = %a.state_dir.display(),
            "tern attachments are left on the node: the conflist drains (ADD refused, DEL works) and the kubeconfig and binaries stay for their DEL; the DEL of the last one removes them (or run uninstall again once those pods are gone)"
        );
        return Ok(Outcome::Draining { attachments });
    }
    let _held = match wait_for_repeat_dels(a, &plan, held)? {
        Waited::Quiet(held) => held,
        Waited::Superseded => return Ok(Outcome::Superseded),
        Waited::Draining(attachments) => return Ok(Outcome::Draining { attachments }),
    };
    tern_net::drain::remove_installed(&plan, &a.cni_conf_dir, &a.cni_bin_dir)?;
    // The reference plugins (portmap, bandwidth) only where tern placed them: its ledger's
    // entries whose bytes are still tern's (install/reference.rs); the node's own stay.
    let reference = crate::install::reference::uninstall(&a.cni_bin_dir)
        .context("remove the reference plugins tern installed")?;
    info!(removed = ?reference, "reference plugins tern installed: removed");
    remove(&a.cni_conf_dir.join(UNINSTALLING_MARK))?;
    Ok(Outcome::Removed)
}

/// How [`wait_for_repeat_dels`] ended.
enum Waited {
    /// No teardown for `--sandbox-removal-wait`: the conf dir's lock (held again) for the finish.
    Quiet(Option<Flock<File>>),
    /// An install removed the mark meanwhile.
    Superseded,
    /// The conflist stays draining: attachments appeared, or teardowns kept coming.
    Draining(usize),
}

/// With no attachment left, a sandbox whose pod was torn down lately may still be on the node:
/// containerd 2 DELs it again when the kubelet's container GC removes it, and with no conflist
/// that DEL fails (`cni plugin not initialized`) and the sandbox is never removed. So the
/// conflist and plugins stay, draining, until `--sandbox-removal-wait` has passed since the
/// node's last teardown ([`tern_net::drain::since_last_teardown`]); what no DEL needs is released
/// at once (as the last DEL does on the draining path). The lock is let go while waiting (each
/// DEL takes it to release), then taken again and the mark and attachments checked again.
fn wait_for_repeat_dels(
    a: &UninstallArgs,
    plan: &DrainPlan,
    mut held: Option<Flock<File>>,
) -> anyhow::Result<Waited> {
    let deadline = std::time::Instant::now() + a.sandbox_removal_wait + Duration::from_secs(1);
    let mut released = false;
    loop {
        let since = tern_net::drain::since_last_teardown(&a.state_dir)?;
        let left = match since {
            Some(s) if held.is_some() && s < a.sandbox_removal_wait => a.sandbox_removal_wait - s,
            _ => return Ok(Waited::Quiet(held)),
        };
        if std::time::Instant::now() + left > deadline {
            warn!("teardowns kept coming: the conflist stays draining; run uninstall again");
            return Ok(Waited::Draining(0));
        }
        if !released {
            tern_net::drain::release(plan, &a.cni_conf_dir)?;
            released = true;
        }
        info!(
            wait = ?left,
            "no tern attachment left: the conflist and plugins stay (draining) for the runtime's repeat DEL of sandboxes torn down lately"
        );
        drop(held);
        std::thread::sleep(left);
        held = lock_conf_dir_if_present(&a.cni_conf_dir)?;
        if DrainPlan::read_mark(&a.cni_conf_dir)?.is_none() {
            info!("tern-agent install ran meanwhile: nothing more removed");
            return Ok(Waited::Superseded);
        }
        let attachments = count_attachments(&a.state_dir)?;
        if attachments > 0 {
            return Ok(Waited::Draining(attachments));
        }
    }
}

/// Whether the DaemonSet `name` is being removed: gone (404), being deleted, or the agent's RBAC
/// refused (403: removed with it; `install` needs the same RBAC, so tern could not come back).
///
/// # Errors
/// The API server could not tell: unreachable, timeout, 5xx, unreadable credentials, or 401 (a
/// signing-key rotation looks the same as a deleted service account, and must not remove tern).
fn daemonset_deleted(api: &ApiAccess, namespace: &str, name: &str) -> anyhow::Result<bool> {
    let (client, _) = in_cluster_client(api).context("in-cluster credentials")?;
    match client.daemonset_deleting(namespace, name, api.request_timeout) {
        Ok(deleting) => Ok(deleting),
        Err(KubeError::NotFound { .. } | KubeError::Forbidden { .. }) => Ok(true),
        Err(e) => Err(e).with_context(|| {
            format!("read daemonset {namespace}/{name} (tern stays installed; run `tern-agent uninstall` on the node to remove it)")
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
        let api = ApiAccess {
            api_server: api_server_from(a.api.api_server.as_ref(), &|k| std::env::var(k).ok())?,
            sa_dir: a.api.sa_dir.clone(),
            request_timeout: Duration::from_secs(10),
        };
        let namespace = namespace_from(a.api.namespace.as_ref(), &a.api.sa_dir);
        if !daemonset_deleted(&api, &namespace, ds)? {
            info!(daemonset = %ds, "the DaemonSet is not being deleted: tern stays installed");
            return Ok(());
        }
    }
    match uninstall(&a)? {
        Outcome::Removed => info!("uninstall done: conflist, kubeconfig and binaries removed"),
        Outcome::Superseded => info!("uninstall: superseded by an install"),
        Outcome::Draining { attachments } => {
            info!(
                attachments,
                "uninstall: conflist draining, kubeconfig and binaries kept"
            );
        }
    }
    Ok(())
}

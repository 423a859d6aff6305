//! The end of a draining uninstall, shared by `tern-agent uninstall` and tern's DEL: the drain
//! mark's plan, the count of attachments left, the release of what no DEL needs once none is
//! left, and the removal of the rest.
//!
//! `tern-agent uninstall` writes the mark ([`MARK`], beside the conflist and the kubeconfig) with
//! a [`DrainPlan`] in it (JSON: file names only, never paths) and makes the conflist draining.
//! The agent is gone by the time the node's last pod goes, so tern's DEL of the last attachment
//! releases what no DEL needs ([`release_if_idle`]: the egress NAT table, the node routes, the
//! kubeconfig and its token). The conflist and the plugins stay: a runtime DELs a sandbox again
//! after its first DEL (containerd 2 on every StopPodSandbox, which the kubelet's sandbox GC calls
//! before RemovePodSandbox), and with no conflist that DEL fails ("cni plugin not initialized")
//! and the sandbox is never removed. They go with `tern-agent uninstall` once no sandbox is left
//! ([`remove_installed`]).
//!
//! Invariants: only the plan's plain file names are removed, from the directories given, and
//! nothing else in them; the release holds the conf dir's exclusive lock ([`lock_conf_dir`]), so
//! two last DELs at once release one after the other and never beside an install or uninstall.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::netlink::Handle;
use crate::nft::NftError;

/// The mark's file name, in the CNI conf dir (a name libcni never loads: no `.conf`,
/// `.conflist` or `.json`): tern is being uninstalled from this node.
pub const MARK: &str = "tern-uninstalling";

/// tern-agent's egress NAT table: its family.
pub const EGRESS_NAT_FAMILY: &str = "inet";
/// tern-agent's egress NAT table: its name.
pub const EGRESS_NAT_TABLE: &str = "tern_nat";

/// tern-agent's NetworkPolicy table: its family.
pub const NETWORK_POLICY_FAMILY: &str = "inet";
/// tern-agent's NetworkPolicy table: its name.
pub const NETWORK_POLICY_TABLE: &str = "tern_netpol";

/// tern's routing protocol number (`rtm_protocol`) for the node routes: not in iproute2's
/// `rt_protos` nor used by the common CNIs (Calico's 80, BIRD's 12, zebra's 11), so `ip route
/// show proto 116` lists exactly the routes tern-agent owns.
pub const NODE_ROUTE_PROTOCOL: u8 = 116;

/// tern-agent's VXLAN device (`--node-routes=vxlan`); deleting it removes its neighbour and FDB
/// entries and every route through it.
pub const VXLAN_DEVICE: &str = "tern.vxlan";

/// What the finish removes, as `tern-agent uninstall` wrote it into the mark (camelCase JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DrainPlan {
    /// The conflist's file name in the CNI conf dir.
    pub conflist: String,
    /// The kubeconfig's file name in the CNI conf dir.
    pub kubeconfig: String,
    /// The plugin file names tern installed in the CNI bin dir.
    pub plugins: Vec<String>,
    /// Remove the egress NAT table ([`EGRESS_NAT_FAMILY`] [`EGRESS_NAT_TABLE`]).
    pub remove_egress_nat: bool,
    /// Remove every route with [`NODE_ROUTE_PROTOCOL`], both families, and the VXLAN device
    /// [`VXLAN_DEVICE`].
    pub remove_node_routes: bool,
    /// Remove the NetworkPolicy table ([`NETWORK_POLICY_FAMILY`] [`NETWORK_POLICY_TABLE`]);
    /// absent in a mark written before it existed: false.
    #[serde(default)]
    pub remove_network_policy: bool,
}

/// Why a finish could not be done (each step is still tried; the mark stays).
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// The mark, a directory or a file could not be read, locked, written or removed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The mark holds no valid plan (e.g. a path instead of a file name).
    #[error("the drain mark {path}: {msg}")]
    BadPlan {
        /// The mark.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// The egress NAT table could not be removed.
    #[error("remove the egress NAT table: {0}")]
    Nft(#[from] NftError),
    /// The node routes could not be removed.
    #[error("remove the node routes: {0}")]
    Routes(#[from] crate::Error),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DrainError {
    let what = what.into();
    move |source| DrainError::Io { what, source }
}

impl DrainPlan {
    /// Refuses a name that is not one plain file name (empty, `.`, `..`, or with a `/`).
    ///
    /// # Errors
    /// The first bad name, as a message.
    pub fn validate(&self) -> Result<(), String> {
        let names = [&self.conflist, &self.kubeconfig]
            .into_iter()
            .chain(&self.plugins);
        for n in names {
            if n.is_empty() || n == "." || n == ".." || n.contains('/') || n.contains('\0') {
                return Err(format!("{n:?} is not a plain file name"));
            }
        }
        Ok(())
    }

    /// Writes the plan as the mark in `conf_dir`, atomically and durably (0644).
    ///
    /// # Errors
    /// The file could not be written.
    pub fn write_mark(&self, conf_dir: &Path) -> Result<(), DrainError> {
        let mark = conf_dir.join(MARK);
        let mut bytes = serde_json::to_vec_pretty(self).map_err(|e| DrainError::BadPlan {
            path: mark.clone(),
            msg: e.to_string(),
        })?;
        bytes.push(b'\n');
        tern_node::fs::write_atomic(&mark, &bytes, 0o644)
            .map_err(io(format!("write {}", mark.display())))
    }

    /// The plan in the mark in `conf_dir`: `None` when there is no mark.
    ///
    /// # Errors
    /// An unreadable mark, or one that holds no valid plan (a mark an older agent wrote holds a
    /// line of text: the finish is then left to `tern-agent uninstall`).
    pub fn read_mark(conf_dir: &Path) -> Result<Option<DrainPlan>, DrainError> {
        let mark = conf_dir.join(MARK);
        let text = match std::fs::read(&mark) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(format!("read {}", mark.display()))(e)),
        };
        let bad = |msg: String| DrainError::BadPlan {
            path: mark.clone(),
            msg,
        };
        let plan: DrainPlan = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
        plan.validate().map_err(bad)?;
        Ok(Some(plan))
    }
}

/// The number of tern attachments on the node: `*.json` files one level under `state_dir`
/// (`<stateDir>/<network>/<containerID>_<ifname>.json`). An absent directory holds none.
///
/// # Errors
/// A directory that exists but cannot be read (then nothing can be concluded).
pub fn count_attachments(state_dir: &Path) -> Result<usize, DrainError> {
    let nets = match std::fs::read_dir(state_dir) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(format!("read {}", state_dir.display()))(e)),
    };
    let mut n = 0;
    for net in nets {
        let net = net.map_err(io(format!("read {}", state_dir.display())))?;
        if !net.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let files =
            std::fs::read_dir(net.path()).map_err(io(format!("read {}", net.path().display())))?;
        for f in files.flatten() {
            if f.path().extension().is_some_and(|e| e == "json") {
                n += 1;
            }
        }
    }
    Ok(n)
}

/// How long ago the node's last teardown was: the state dir's mtime, which tern's DEL sets to
/// now when it removes an attachment's state (a repeat DEL finds none and leaves it). `None`
/// when there is no state dir (no attachment ever). A time ahead of the clock counts as now.
///
/// # Errors
/// A state dir that exists but cannot be read.
pub fn since_last_teardown(state_dir: &Path) -> Result<Option<std::time::Duration>, DrainError> {
    match std::fs::metadata(state_dir).and_then(|m| m.modified()) {
        Ok(t) => Ok(Some(t.elapsed().unwrap_or_default())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(format!("stat {}", state_dir.display()))(e)),
    }
}

/// Removes `path`; an absent file is already removed. Returns whether it was there.
fn remove(path: &Path) -> Result<bool, DrainError> {
    match std::fs::remove_file(path) {
        Ok(()) => {
            tracing::info!(file = %path.display(), "removed");
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io(format!("remove {}", path.display()))(e)),
    }
}

/// Removes all that `plan` names: [`release`], then the conflist from `conf_dir` and the plugins
/// from `bin_dir` (the mark is the caller's). Every step is tried. Only once no sandbox of the
/// node's runtime is left: a runtime's DEL needs the conflist and the plugins.
///
/// # Errors
/// The first step that failed (the others are logged).
pub fn remove_installed(
    plan: &DrainPlan,
    conf_dir: &Path,
    bin_dir: &Path,
) -> Result<(), DrainError> {
    let mut first = release(plan, conf_dir).err();
    let files = std::iter::once(conf_dir.join(&plan.conflist))
        .chain(plan.plugins.iter().map(|p| bin_dir.join(p)));
    for f in files {
        if let Err(e) = remove(&f) {
            tracing::warn!(error = %e, "uninstall step failed");
            first.get_or_insert(e);
        }
    }
    match first {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Removes what no DEL needs: the kubeconfig from `conf_dir`, and the egress NAT table, the
/// NetworkPolicy table and the node routes when the plan asks. Every step is tried.
///
/// # Errors
/// The first step that failed (the others are logged).
pub fn release(plan: &DrainPlan, conf_dir: &Path) -> Result<(), DrainError> {
    let mut first: Option<DrainError> = None;
    let mut keep = |r: Result<(), DrainError>| {
        if let Err(e) = r {
            tracing::warn!(error = %e, "uninstall step failed");
            first.get_or_insert(e);
        }
    };
    keep(remove(&conf_dir.join(&plan.kubeconfig)).map(drop));
    if plan.remove_egress_nat {
        let removed = remove_egress_nat();
        if removed.is_ok() {
            tracing::info!(
                table = EGRESS_NAT_TABLE,
                "egress NAT table removed (if there was one)"
            );
        }
        keep(removed.map_err(DrainError::from));
    }
    if plan.remove_network_policy {
        let removed = remove_network_policy();
        if removed.is_ok() {
            tracing::info!(
                table = NETWORK_POLICY_TABLE,
                "NetworkPolicy table removed (if there was one)"
            );
        }
        keep(removed.map_err(DrainError::from));
    }
    if plan.remove_node_routes {
        let removed = Handle::new().and_then(|h| remove_node_routes(&h));
        if let Ok(n) = &removed {
            tracing::info!(
                routes = n,
                protocol = NODE_ROUTE_PROTOCOL,
                "node routes removed"
            );
        }
        keep(removed.map(drop).map_err(DrainError::from));
    }
    match first {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// What [`release_if_idle`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// No mark in the conf dir: tern is not being uninstalled.
    NotDraining,
    /// This many attachments are left: nothing removed.
    Waiting(usize),
    /// The kubeconfig, the egress NAT table and the node routes (as planned) are gone.
    Released,
}

/// The release, when tern is draining and no attachment is left under `state_dir`: under the
/// conf dir's lock ([`lock_conf_dir`], the one tern-agent's install and uninstall hold), reads
/// the mark, counts the attachments again and, when none, [`release`]s. The conflist, the plugins
/// and the mark stay (see the module docs). An install that began meanwhile either finished (its
/// mark gone: nothing released) or waits for this to end; it never loses the kubeconfig it wrote.
///
/// # Errors
/// A mark without a valid plan, an unreadable state dir, the conf dir cannot be locked, or a
/// failed step.
pub fn release_if_idle(conf_dir: &Path, state_dir: &Path) -> Result<Release, DrainError> {
    if !conf_dir.join(MARK).exists() {
        return Ok(Release::NotDraining);
    }
    let Some(_held) =
        lock_conf_dir_if_present(conf_dir).map_err(io(format!("lock {}", conf_dir.display())))?
    else {
        return Ok(Release::NotDraining);
    };
    // The mark may have gone while this waited for the lock: an install, or the agent's finish.
    let Some(plan) = DrainPlan::read_mark(conf_dir)? else {
        return Ok(Release::NotDraining);
    };
    let left = count_attachments(state_dir)?;
    if left > 0 {
        return Ok(Release::Waiting(left));
    }
    release(&plan, conf_dir)?;
    Ok(Release::Released)
}

mod conf_lock;
mod kernel;
pub use conf_lock::{lock_conf_dir, lock_conf_dir_if_present};
pub use kernel::{remove_egress_nat, remove_network_policy, remove_node_routes};

#[cfg(test)]
mod tests;

//! The node audit: what a real node holds of tern for one pod address, read from the node itself
//! (the root netns's routes, host-local's lease directory, tern's state directory).
//!
//! Invariant: read-only. A running pod's address has all three (a host route through a tern
//! veth, a lease file named after the address, a state file naming `"<address>/`); once the
//! runtime has run DEL, none. The real-cluster tier (tests/cluster) asserts both through it.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where tern keeps a node's per-attachment files.
#[derive(Clone, Debug)]
pub struct NodeAudit {
    /// host-local's lease directory for the `tern` network: one file per leased address.
    pub lease_dir: PathBuf,
    /// tern's state directory (each attachment's JSON names its addresses as `"<ip>/<len>"`).
    pub state_dir: PathBuf,
}

impl Default for NodeAudit {
    /// The paths deploy/'s conflist gives a node: `/var/lib/cni/networks/tern`, `/run/cni/tern`.
    fn default() -> Self {
        Self {
            lease_dir: PathBuf::from("/var/lib/cni/networks/tern"),
            state_dir: PathBuf::from("/run/cni/tern"),
        }
    }
}

impl NodeAudit {
    /// The root netns's routes whose destination is `ip` itself (`ip route show`, per family).
    ///
    /// # Errors
    /// iproute2's message when `ip route show` cannot run or fails.
    pub fn host_routes(&self, ip: IpAddr) -> Result<Vec<String>, String> {
        let fam = if ip.is_ipv4() { "-4" } else { "-6" };
        let out = Command::new("ip")
            .args([fam, "route", "show"])
            .output()
            .map_err(|e| format!("ip route show: {e}"))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!("ip route show: {}: {}", out.status, err.trim()));
        }
        let head = format!("{ip} ");
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with(&head))
            .map(str::to_owned)
            .collect())
    }

    /// `ip`'s lease file, when it exists.
    pub fn lease(&self, ip: IpAddr) -> Option<PathBuf> {
        let p = self.lease_dir.join(ip.to_string());
        p.exists().then_some(p)
    }

    /// tern's state files under the state directory that name `ip` (`"<ip>/`).
    pub fn state_files(&self, ip: IpAddr) -> Vec<PathBuf> {
        let needle = format!("\"{ip}/");
        files_under(&self.state_dir)
            .into_iter()
            .filter(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains(&needle)))
            .collect()
    }

    /// What the node still holds of `ip` (a host route, a lease, state), one line each; empty
    /// when nothing is left.
    pub fn leftovers(&self, ip: IpAddr) -> Vec<String> {
        let mut left: Vec<String> = match self.host_routes(ip) {
            Ok(routes) => routes
                .into_iter()
                .map(|r| format!("host route to {ip} left: {r}"))
                .collect(),
            Err(e) => vec![e],
        };
        if let Some(p) = self.lease(ip) {
            left.push(format!("lease file {} left", p.display()));
        }
        for p in self.state_files(ip) {
            left.push(format!("tern state for {ip} left: {}", p.display()));
        }
        left
    }

    /// What a running pod's `ip` lacks of its lease and state (where [`Self::leftovers`]
    /// looks, so that check can fail), one line each; empty when both are there.
    pub fn missing(&self, ip: IpAddr) -> Vec<String> {
        let mut missing = Vec::new();
        if self.lease(ip).is_none() {
            missing.push(format!(
                "no lease file {} for a running pod",
                self.lease_dir.join(ip.to_string()).display()
            ));
        }
        if self.state_files(ip).is_empty() {
            missing.push(format!(
                "no tern state for {ip} under {}",
                self.state_dir.display()
            ));
        }
        missing
    }
}

/// tern-tuning's node-wide cache of a new netns's sysctls (`tern_tuning::baseline::CACHE_FILE`):
/// it outlives every attachment by design, so it is no attachment's leftover.
pub const TUNING_NETNS_CACHE: &str = "new-netns-sysctls.cache";

/// What attachments left under tern-tuning's `dataDir` `dir` (backups, locks): every file below it,
/// recursively, but [`TUNING_NETNS_CACHE`]; none when `dir` cannot be read.
pub fn tuning_attachment_files(dir: &Path) -> Vec<PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|p| p.file_name().is_none_or(|n| n != TUNING_NETNS_CACHE))
        .collect()
}

/// Every file below `dir`, recursively (none when it cannot be read).
pub(crate) fn files_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .flat_map(|e| {
            let p = e.path();
            if p.is_dir() {
                files_under(&p)
            } else {
                vec![p]
            }
        })
        .collect()
}

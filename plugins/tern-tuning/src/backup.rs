//! The per-attachment backup of everything ADD changed: previous sysctl values and link
//! attributes, in `<dataDir>/<containerID>_<ifname>.json`.
//!
//! Invariants: written atomically (temp file, rename) with mode 0600 in a 0700 directory,
//! *before* the first change, so a DEL after an ADD killed midway still restores; an existing
//! backup is kept on a repeated ADD so it always holds the values from before tern-tuning first
//! touched the attachment (the reference overwrites it with already-tuned values).
//! Not durable (no fsync, `tern_node::fs::replace_atomic`): the backup restores the pod netns's
//! sysctls and the pod interface's attributes, none of which survive a reboot, and the default
//! `dataDir` (`/run/cni/tuning`) is a tmpfs anyway.
//! The file name is safe: the container ID and ifname were validated by the dispatcher (no `/`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tern_cni::{code, Error};

/// Previous values of what ADD changes, and whose they are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backup {
    /// The network (netconf `name`) of the ADD that wrote it: GC of one network never touches
    /// another's backups in a shared `dataDir`. Absent in backups of older builds and of the
    /// reference plugin; GC leaves those alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// `CNI_CONTAINERID` of that ADD (the file name alone is ambiguous: both parts may hold `_`).
    #[serde(
        default,
        rename = "containerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub container_id: Option<String>,
    /// `CNI_IFNAME` of that ADD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ifname: Option<String>,
    /// `(key as written, previous value)` for every configured sysctl ADD wrote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sysctl: Vec<(String, String)>,
    /// `(key as written, value)` for every configured sysctl ADD left at the value the runtime
    /// wrote before the chain (a pod's own `securityContext.sysctls`, see `baseline`): CHECK
    /// expects that value, DEL restores nothing for it.
    #[serde(default, rename = "keptSysctl", skip_serializing_if = "Vec::is_empty")]
    pub kept_sysctl: Vec<(String, String)>,
    /// Previous MAC, `aa:bb:cc:dd:ee:ff`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// Previous MTU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The host end of the pod veth whose MTU ADD set too (see `peer`), by name.
    #[serde(
        default,
        rename = "hostIfname",
        skip_serializing_if = "Option::is_none"
    )]
    pub host_ifname: Option<String>,
    /// The previous MTU of [`Backup::host_ifname`].
    #[serde(default, rename = "hostMtu", skip_serializing_if = "Option::is_none")]
    pub host_mtu: Option<u32>,
    /// Previous promiscuous mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promisc: Option<bool>,
    /// Previous all-multicast mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allmulti: Option<bool>,
    /// Previous transmit queue length.
    #[serde(default, rename = "txQLen", skip_serializing_if = "Option::is_none")]
    pub txqlen: Option<u32>,
}

impl Backup {
    /// Whether it holds any link attribute to restore (MTU, the host end's MTU, MAC, promiscuous
    /// and all-multicast modes, transmit queue length): only then does DEL need a netlink socket
    /// in the pod netns.
    pub fn has_link_attributes(&self) -> bool {
        // Every field named, so that a new one does not compile until it is sorted here.
        let Backup {
            network: _,
            container_id: _,
            ifname: _,
            sysctl: _,
            kept_sysctl: _,
            host_ifname: _,
            mac,
            mtu,
            host_mtu,
            promisc,
            allmulti,
            txqlen,
        } = self;
        mac.is_some()
            || mtu.is_some()
            || host_mtu.is_some()
            || promisc.is_some()
            || allmulti.is_some()
            || txqlen.is_some()
    }
}

/// The backup file of one attachment.
pub fn path(data_dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    data_dir.join(format!("{container_id}_{ifname}.json"))
}

/// Writes `backup` atomically (0600), creating `data_dir` (0700) if needed.
///
/// # Errors
/// Code 104 (`STATE_IO`) naming the file.
pub fn save(file: &Path, backup: &Backup) -> Result<(), Error> {
    let state_err = |what: &str, e: &dyn std::fmt::Display| {
        Error::new(code::STATE_IO, format!("{what} {}: {e}", file.display()))
    };
    let data = serde_json::to_vec_pretty(backup).map_err(|e| state_err("encode backup", &e))?;
    let dir = file.parent().unwrap_or(Path::new("."));
    tern_node::fs::in_dir(dir, 0o700, || {
        tern_node::fs::replace_atomic(file, &data, 0o600)
    })
    .map_err(|e| state_err("save backup", &e))
}

/// Loads a backup; `Ok(None)` when there is none.
///
/// # Errors
/// Code 104 when the file exists but cannot be read or decoded.
pub fn load(file: &Path) -> Result<Option<Backup>, Error> {
    let bytes = match std::fs::read(file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::new(
                code::STATE_IO,
                format!("read backup {}: {e}", file.display()),
            ))
        }
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        Error::new(
            code::STATE_IO,
            format!("decode backup {}: {e}", file.display()),
        )
    })
}

/// Every backup in `data_dir` that decodes, with its file, after removing the temp files of
/// writers that were killed (GC's view); none when the directory is missing or unreadable.
/// Files that do not decode are left out (and so left alone): they may be another tool's.
pub fn list(data_dir: &Path) -> Vec<(PathBuf, Backup)> {
    tern_node::fs::remove_stale_temps(data_dir);
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .filter_map(|p| Some((p.clone(), load(&p).ok()??)))
        .collect()
}

/// Removes a backup, and in its directory the temp files of writers killed between create and
/// rename (an ADD killed midway): the backup's own and the node-wide new-netns cache's, which an
/// ADD killed while saving it leaves and no later verb would otherwise sweep (the cache is
/// rewritten only when stale). A live writer's temp file is left alone. A missing file is fine.
///
/// # Errors
/// Code 104 when it exists and cannot be removed.
pub fn remove(file: &Path) -> Result<(), Error> {
    // One walk of the data dir, as the backup's own sweep made before.
    if let Some(dir) = file.parent() {
        tern_node::fs::remove_stale_temps(dir);
    }
    tern_node::fs::remove_if_exists(file).map_err(|e| {
        Error::new(
            code::STATE_IO,
            format!("remove backup {}: {e}", file.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DEL skips the pod's netlink socket only for a backup without link attributes: each one,
    /// alone in the file as ADD writes it, still needs it.
    #[test]
    fn only_a_backup_without_link_attributes_skips_the_link() {
        let sysctls = r#"{"sysctl": [["net.ipv4.tcp_keepalive_time", "7200"]]}"#;
        let parsed: Backup = serde_json::from_str(sysctls).unwrap();
        assert!(!parsed.has_link_attributes());
        for field in [
            r#""mac": "02:00:00:00:00:01""#,
            r#""mtu": 1500"#,
            r#""hostIfname": "veth1", "hostMtu": 1500"#,
            r#""promisc": false"#,
            r#""allmulti": false"#,
            r#""txQLen": 1000"#,
        ] {
            let text =
                format!(r#"{{"sysctl": [["net.ipv4.tcp_keepalive_time", "7200"]], {field}}}"#);
            let parsed: Backup = serde_json::from_str(&text).unwrap();
            assert!(
                parsed.has_link_attributes(),
                "{field} was not seen as a link attribute"
            );
        }
    }

    /// A DEL after an ADD killed while it saved the new-netns cache leaves no temp file: the
    /// sweep of the backup's directory takes the cache's too (crash_sweep's "nothing left").
    #[test]
    fn remove_sweeps_a_killed_writers_temps_of_the_backup_and_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path(), "c1", "eth0");
        std::fs::write(&file, b"{}").unwrap();
        // PID 4194305 is above the kernel's pid_max (4194304): no process has it.
        let dead = [
            dir.path().join(".c1_eth0.json.tmp-4194305-0"),
            dir.path()
                .join(format!(".{}.tmp-4194305-1-0", crate::baseline::CACHE_FILE)),
        ];
        for t in &dead {
            std::fs::write(t, b"half").unwrap();
        }
        let live = dir.path().join(format!(
            ".{}.tmp-{}-0",
            crate::baseline::CACHE_FILE,
            std::process::id()
        ));
        std::fs::write(&live, b"in flight").unwrap();
        remove(&file).unwrap();
        assert!(!file.exists());
        for t in &dead {
            assert!(!t.exists(), "{} left", t.display());
        }
        assert!(live.exists(), "a live writer's temp file was removed");
    }
}

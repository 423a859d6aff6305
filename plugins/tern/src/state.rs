//! Per-attachment state: `<stateDir>/<network>/<containerID>_<ifname>.json`, written atomically
//! (0600) before the first kernel change of ADD and removed by DEL, so DEL (without prevResult) and
//! GC find every attachment, including one whose ADD was killed midway.
//!
//! Atomic but not durable ([`replace_atomic`], no fsync): the state describes a veth, and veths
//! do not survive a reboot, so a state file lost to a power loss describes nothing that still
//! exists (the default directory, `/run/cni/tern`, is a tmpfs anyway). A process crash cannot
//! lose it: the rename is done before ADD makes its first kernel change.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};
use tern_node::fs::{remove_stale_temps, remove_stale_temps_of, replace_atomic};

/// What ADD did for one attachment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentState {
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// The host-side veth name.
    pub host_veth: String,
    /// `CNI_NETNS` at ADD.
    pub netns: String,
    /// The pod addresses routed to the host veth (/32 and /128).
    pub addresses: Vec<IpNetwork>,
    /// Whether ADD was asked to masquerade (`ipMasq`): DEL and GC then remove the attachment's
    /// nftables rules even when the configuration they get says otherwise. Absent in state
    /// written by older builds: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ip_masq: bool,
}

/// The state directory of one network.
#[derive(Clone, Debug)]
pub struct StateStore {
    root: PathBuf,
    network: String,
    dir: PathBuf,
}

impl StateStore {
    /// The store for `network` under `state_dir`.
    pub fn new(state_dir: &Path, network: &str) -> StateStore {
        StateStore {
            root: state_dir.to_path_buf(),
            network: network.to_owned(),
            dir: state_dir.join(network),
        }
    }

    fn path(&self, container_id: &str, ifname: &str) -> PathBuf {
        self.dir.join(format!("{container_id}_{ifname}.json"))
    }

    /// Writes (or replaces) the state of an attachment, creating the directory (0700).
    ///
    /// # Errors
    /// I/O errors from creating the directory or writing the file.
    pub fn save(&self, state: &AttachmentState) -> io::Result<()> {
        let data = serde_json::to_vec_pretty(state).map_err(io::Error::other)?;
        let path = self.path(&state.container_id, &state.ifname);
        tern_node::fs::in_dir(&self.dir, 0o700, || replace_atomic(&path, &data, 0o600))
    }

    /// Removes an attachment's state, and the temp file of a writer killed between create and
    /// rename (an ADD killed midway); already gone is fine.
    ///
    /// # Errors
    /// I/O errors other than those that mean the file cannot exist: not found, a path component
    /// that is not a directory (`stateDir` is a file), a name too long for the file system (ADD
    /// could not have written it either).
    pub fn remove(&self, container_id: &str, ifname: &str) -> io::Result<()> {
        let path = self.path(container_id, ifname);
        remove_stale_temps_of(&path);
        match fs::remove_file(&path) {
            Ok(()) => {
                self.note_teardown();
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ENAMETOOLONG)) => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Sets the state dir's mtime to now: the time of the node's last teardown, which
    /// `tern-agent uninstall` reads ([`tern_net::drain::since_last_teardown`]) to keep the
    /// conflist while the runtime may still DEL that sandbox again. The root's, not the
    /// network dir's: every verb's lock file changes that one, a repeat DEL included. Best
    /// effort: the attachment is gone either way.
    fn note_teardown(&self) {
        let touched = fs::File::open(&self.root).and_then(|d| d.set_modified(SystemTime::now()));
        if let Err(e) = touched {
            tracing::warn!(dir = %self.root.display(), error = %e, "cannot note the teardown's time");
        }
    }

    /// The attachment's state, when this network holds a readable one.
    pub fn load(&self, container_id: &str, ifname: &str) -> Option<AttachmentState> {
        let data = fs::read(self.path(container_id, ifname)).ok()?;
        serde_json::from_slice(&data).ok()
    }

    /// Whether this network holds state for the attachment.
    pub fn exists(&self, container_id: &str, ifname: &str) -> bool {
        self.path(container_id, ifname).is_file()
    }

    /// The other network, if any, whose state claims the same (container ID, ifname) — and so the
    /// same host veth name. A buggy runtime can send one container's ID to two networks; tern
    /// then must not touch the other network's live veth.
    pub fn claimed_elsewhere(&self, container_id: &str, ifname: &str) -> Option<String> {
        let file = format!("{container_id}_{ifname}.json");
        fs::read_dir(&self.root)
            .ok()?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|net| *net != self.network && self.root.join(net).join(&file).is_file())
    }

    /// Every attachment with state in this network (unparseable files are skipped), after
    /// sweeping temp files of killed writers.
    pub fn list(&self) -> Vec<AttachmentState> {
        remove_stale_temps(&self.dir);
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
            .filter_map(|e| fs::read(e.path()).ok())
            .filter_map(|d| serde_json::from_slice(&d).ok())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_load_list_remove() {
        let root = std::env::temp_dir().join(format!("tern-state-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let store = StateStore::new(&root, "net1");
        assert!(store.list().is_empty());
        let s = AttachmentState {
            container_id: "c1".into(),
            ifname: "eth0".into(),
            host_veth: "ternec43057c07a".into(),
            netns: "/run/netns/x".into(),
            addresses: vec!["10.99.0.2/32".parse().unwrap()],
            ip_masq: false,
        };
        store.save(&s).unwrap();
        assert!(store.exists("c1", "eth0"));
        let other = StateStore::new(&root, "net2");
        assert_eq!(
            other.claimed_elsewhere("c1", "eth0").as_deref(),
            Some("net1")
        );
        assert_eq!(store.claimed_elsewhere("c1", "eth0"), None);
        assert_eq!(other.claimed_elsewhere("c2", "eth0"), None);
        // A stateDir that is a file cannot hold state: DEL's remove finds nothing to do.
        let file = root.join("a-file");
        fs::write(&file, b"x").unwrap();
        StateStore::new(&file, "net1").remove("c1", "eth0").unwrap();
        assert_eq!(store.list(), vec![s]);
        store.remove("c1", "eth0").unwrap();
        store.remove("c1", "eth0").unwrap();
        assert!(store.list().is_empty());
        fs::remove_dir_all(&root).unwrap();
    }
}

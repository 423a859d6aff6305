//! What a new network namespace holds for the configured sysctls: ADD's test for a value the
//! runtime wrote before the chain ran (a pod's own `securityContext.sysctls`), which it then
//! leaves alone (docs/decisions/0016).
//!
//! CRI-O writes a pod's sysctls when pinns creates the netns, before the chain; containerd has
//! runc write them after the chain. A key whose value in the pod netns differs from a new
//! netns's was written by the runtime, so the pod keeps it on both runtimes.
//!
//! Invariants: creating a netns costs 1–4 ms (an ADD's whole budget), so the values are cached
//! in `<dataDir>/new-netns-sysctls.cache` (not `.json`: GC lists backups by that suffix) per
//! boot (`/proc/sys/kernel/random/boot_id`), each beside the plugin netns's value when it was
//! read: a key a new netns inherits from init_net is read again once the host's value changed.
//! The cache is only a shortcut: a missing, stale or undecodable file is rebuilt, a failed save
//! is logged, never an ADD failure.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tern_cni::Error;
use tern_net::sysctl::{self, SysctlKey};

/// The cache's file name in `dataDir` (node-wide: it outlives every attachment).
pub const CACHE_FILE: &str = "new-netns-sysctls.cache";

/// The cache file in `data_dir`.
pub fn cache_path(data_dir: &Path) -> PathBuf {
    data_dir.join(CACHE_FILE)
}

/// The cache: for one boot, per key (its path under `/proc/sys`), a new netns's value.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Cache {
    #[serde(rename = "bootID")]
    boot_id: String,
    values: Vec<Entry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    /// Relative path, `net/ipv4/tcp_keepalive_time`.
    key: String,
    /// The plugin netns's (the host's) value when `new` was read; `None` if it had none.
    host: Option<String>,
    /// A new netns's value; `None` if a new netns has no such key.
    new: Option<String>,
}

/// Per key of `keys`, in order, the value a new netns has; `None` for a key that appears only
/// with an interface ([`SysctlKey::exists_at_netns_creation`]) or that a new netns lacks, which
/// ADD then always writes.
///
/// # Errors
/// Code 5 (`tern_net` errors) when no namespace can be created or a key cannot be read in it.
pub fn new_netns_values(data_dir: &Path, keys: &[SysctlKey]) -> Result<Vec<Option<String>>, Error> {
    let wanted: Vec<&SysctlKey> = keys
        .iter()
        .filter(|k| k.exists_at_netns_creation())
        .collect();
    if wanted.is_empty() {
        return Ok(vec![None; keys.len()]);
    }
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let file = cache_path(data_dir);
    let mut cache = load(&file)
        .filter(|c| c.boot_id == boot_id)
        .unwrap_or_else(|| Cache {
            boot_id,
            values: Vec::new(),
        });
    let host: Vec<Option<String>> = wanted.iter().map(|k| sysctl::read_host(k).ok()).collect();
    let cached = |key: &SysctlKey, host: &Option<String>| {
        cache
            .values
            .iter()
            .find(|e| e.key == key.relative() && e.host == *host)
            .map(|e| e.new.clone())
    };
    let missing: Vec<(SysctlKey, Option<String>)> = wanted
        .iter()
        .zip(&host)
        .filter(|(k, h)| cached(k, h).is_none())
        .map(|(k, h)| ((*k).clone(), h.clone()))
        .collect();
    if !missing.is_empty() {
        let read: Vec<SysctlKey> = missing.iter().map(|(k, _)| k.clone()).collect();
        let values = sysctl::read_fresh(&read)?;
        for ((key, host), new) in missing.into_iter().zip(values) {
            cache.values.retain(|e| e.key != key.relative());
            cache.values.push(Entry {
                key: key.relative().to_owned(),
                host,
                new,
            });
        }
        save(data_dir, &file, &cache);
    }
    Ok(keys
        .iter()
        .map(|k| {
            if !k.exists_at_netns_creation() {
                return None;
            }
            cache
                .values
                .iter()
                .find(|e| e.key == k.relative())
                .and_then(|e| e.new.clone())
        })
        .collect())
}

fn load(file: &Path) -> Option<Cache> {
    serde_json::from_slice(&std::fs::read(file).ok()?).ok()
}

fn save(data_dir: &Path, file: &Path, cache: &Cache) {
    let saved = serde_json::to_vec(cache)
        .map_err(std::io::Error::other)
        .and_then(|data| {
            tern_node::fs::in_dir(data_dir, 0o700, || {
                tern_node::fs::replace_atomic(file, &data, 0o600)
            })
        });
    if let Err(e) = saved {
        tracing::warn!(file = %file.display(), error = %e, "could not save the new-netns sysctl cache");
    }
}

/// Whether two sysctl values are the same once whitespace is collapsed (the kernel prints
/// multi-value sysctls with tabs; a netconf writes spaces).
pub fn same_value(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}

//! The reference CNI plugins deploy/'s chain runs after tern-tuning (`portmap` for a pod's
//! `hostPort`, `bandwidth` for its `kubernetes.io/{ingress,egress}-bandwidth` annotations), built
//! from containernetworking/plugins at the pinned release and shipped in tern's image beside
//! tern's own plugins, and the ledger of which of them tern placed on the node.
//!
//! Unlike tern's own plugins, these names may already be on a node: the operator's
//! `kubernetes-cni` package (or another network) often brings its own `portmap`. tern follows
//! Calico's install-cni (cni-plugin/pkg/install: `UPDATE_CNI_BINARIES`, default true, overwrites
//! a binary of the same name; `SKIP_CNI_BINARIES` leaves named ones alone) with one addition,
//! because Calico never removes what it installed and tern's uninstall does:
//! - a name absent from the node is installed and recorded in the ledger
//!   ([`LEDGER`] in the CNI bin dir: name → SHA-256 of the bytes tern wrote);
//! - a file tern installed (its bytes still hash to the ledger's entry) is replaced by the
//!   image's copy when they differ (an upgrade);
//! - a file tern did not install (absent from the ledger, or changed since tern wrote it) is
//!   replaced by the image's copy when `--update-reference-plugins` is true (the default, as
//!   Calico: an older `portmap` refuses the conflist's cniVersion 1.1.0 — Debian's 1.1.1 stops
//!   at 1.0.0 — and every pod start would fail), but is never recorded: it stays the operator's
//!   name, and uninstall leaves that file (then the pinned release, which speaks every CNI
//!   version the old one did); with false it is left as it is;
//! - uninstall removes only the ledger's files whose bytes still hash to their entry, then the
//!   ledger.
//!
//! Invariants: the ledger is written (atomically) before any binary, so a crash in between can
//! only make tern claim a file it did not get to write (absent: nothing to remove) — never leave
//! a file it wrote unclaimed by an older entry; every binary is replaced atomically (temp file in
//! the same directory, fsync, rename), so a runtime executing `portmap` during an upgrade runs the
//! old or the new file, never half of one.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use sha2::{Digest as _, Sha256};
use tern_kube::write_atomic;
use tracing::{info, warn};

/// The reference plugins `install` copies by default (`--reference-plugins`): the two deploy/'s
/// chain runs after tern-tuning.
pub const DEFAULT_REFERENCE_PLUGINS: &[&str] = &["portmap", "bandwidth"];

/// File name of the ledger in the CNI bin dir: a JSON object, reference plugin name → lowercase
/// hex SHA-256 of the bytes tern installed under that name. Hidden (a leading dot) and not
/// executable: no runtime looks up a plugin by that name.
pub const LEDGER: &str = ".tern-reference-plugins";

/// What `install` did with one reference plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// The name was absent: installed and recorded in the ledger.
    Installed,
    /// tern's earlier copy replaced by the image's (different bytes), ledger updated.
    Updated,
    /// The file already holds the image's bytes (tern's, or the operator's identical copy).
    UpToDate,
    /// The operator's file replaced by the image's copy (`--update-reference-plugins true`), not
    /// recorded: uninstall leaves it.
    ReplacedOperators,
    /// The operator's file left as it is (`--update-reference-plugins false`).
    KeptOperators,
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Reads the ledger in `bin_dir`. Absent: empty. Unreadable or not a JSON object of strings:
/// a warning and empty (tern then claims nothing it cannot prove it wrote, so uninstall removes
/// nothing of these names; the safe side).
pub fn load_ledger(bin_dir: &Path) -> BTreeMap<String, String> {
    let path = bin_dir.join(LEDGER);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            warn!(ledger = %path.display(), error = %e, "the ledger of tern's reference plugins is not a JSON object of hashes: ignored (no file of those names counts as tern's)");
            BTreeMap::new()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
        Err(e) => {
            warn!(ledger = %path.display(), error = %e, "cannot read the ledger of tern's reference plugins: ignored");
            BTreeMap::new()
        }
    }
}

/// The hash of the file at `path`, `None` when absent.
fn file_hash(path: &Path) -> anyhow::Result<Option<(String, Vec<u8>)>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some((sha256_hex(&b), b))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
    }
}

/// Installs `plugins` (name, the image's bytes) into `bin_dir` under the rules of the module
/// docs; `update_operators` is `--update-reference-plugins`. Returns what happened to each, in
/// order.
///
/// # Errors
/// A file of `bin_dir` could not be read, or the ledger or a binary could not be written (what
/// was already replaced stays replaced; the ledger was written first).
pub fn install(
    bin_dir: &Path,
    plugins: &[(String, Vec<u8>)],
    update_operators: bool,
) -> anyhow::Result<Vec<(String, Placement)>> {
    let before = load_ledger(bin_dir);
    let mut ledger = before.clone();
    let mut plan = Vec::new();
    for (name, bytes) in plugins {
        let new = sha256_hex(bytes);
        let dest = bin_dir.join(name);
        let current = file_hash(&dest)?;
        let ours = matches!((&current, before.get(name)), (Some((h, _)), Some(l)) if h == l);
        let placement = match current {
            None => Placement::Installed,
            Some((h, _)) if h == new => Placement::UpToDate,
            Some(_) if ours => Placement::Updated,
            Some(_) if update_operators => Placement::ReplacedOperators,
            Some(_) => Placement::KeptOperators,
        };
        match placement {
            Placement::Installed | Placement::Updated => {
                ledger.insert(name.clone(), new);
            }
            Placement::UpToDate if ours => {}
            // The operator's file (identical, replaced or kept) is never tern's to remove.
            _ => {
                ledger.remove(name);
            }
        }
        plan.push((name.clone(), placement, bytes));
    }
    if ledger != before {
        let text = serde_json::to_vec_pretty(&ledger).context("encode the ledger")?;
        write_atomic(&bin_dir.join(LEDGER), &text, 0o644)?;
    }
    let mut out = Vec::new();
    for (name, placement, bytes) in plan {
        let dest = bin_dir.join(&name);
        match placement {
            Placement::Installed | Placement::Updated | Placement::ReplacedOperators => {
                write_atomic(&dest, bytes, 0o755)?;
            }
            Placement::UpToDate | Placement::KeptOperators => {}
        }
        match placement {
            Placement::ReplacedOperators => {
                warn!(binary = %dest.display(), "replaced a reference plugin tern did not install with the image's (--update-reference-plugins true, as Calico's UPDATE_CNI_BINARIES); uninstall leaves it")
            }
            Placement::KeptOperators => {
                warn!(binary = %dest.display(), "kept the node's own reference plugin (--update-reference-plugins false): the chain runs it, and it must accept the conflist's cniVersion")
            }
            p => {
                info!(binary = %name, dir = %bin_dir.display(), placement = ?p, "reference plugin")
            }
        }
        out.push((name, placement));
    }
    Ok(out)
}

/// Removes the reference plugins tern installed in `bin_dir` (the ledger's entries whose file
/// still hashes to the entry), then the ledger. Returns the names removed.
///
/// # Errors
/// A file could not be read or removed (the ledger then stays, for a later run).
pub fn uninstall(bin_dir: &Path) -> anyhow::Result<Vec<String>> {
    let ledger = load_ledger(bin_dir);
    let mut removed = Vec::new();
    for (name, hash) in &ledger {
        // A ledger written by hand must not reach outside the directory.
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            warn!(entry = %name, "ledger entry is not a plain file name: ignored");
            continue;
        }
        let path = bin_dir.join(name);
        match file_hash(&path)? {
            Some((h, _)) if &h == hash => {
                std::fs::remove_file(&path)
                    .with_context(|| format!("remove {}", path.display()))?;
                info!(file = %path.display(), "removed (a reference plugin tern installed)");
                removed.push(name.clone());
            }
            Some(_) => {
                warn!(file = %path.display(), "kept: changed since tern installed it (not tern's any more)");
            }
            None => {}
        }
    }
    let path = bin_dir.join(LEDGER);
    match std::fs::remove_file(&path) {
        Ok(()) => info!(file = %path.display(), "removed"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("remove {}", path.display())),
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(dir: &Path, name: &str, body: &[u8]) {
        std::fs::write(dir.join(name), body).unwrap();
    }

    fn plugins(body: &[u8]) -> Vec<(String, Vec<u8>)> {
        DEFAULT_REFERENCE_PLUGINS
            .iter()
            .map(|n| ((*n).to_owned(), body.to_vec()))
            .collect()
    }

    #[test]
    fn absent_names_are_installed_recorded_and_removed_again() {
        let d = tempfile::tempdir().unwrap();
        let out = install(d.path(), &plugins(b"v1.10.0"), true).unwrap();
        assert!(
            out.iter().all(|(_, p)| *p == Placement::Installed),
            "{out:?}"
        );
        assert_eq!(std::fs::read(d.path().join("portmap")).unwrap(), b"v1.10.0");
        let ledger = load_ledger(d.path());
        assert_eq!(ledger["portmap"], sha256_hex(b"v1.10.0"));
        // a reinstall of the same image changes nothing
        let out = install(d.path(), &plugins(b"v1.10.0"), true).unwrap();
        assert!(
            out.iter().all(|(_, p)| *p == Placement::UpToDate),
            "{out:?}"
        );
        assert_eq!(load_ledger(d.path()), ledger);
        // an upgrade replaces tern's own copies
        let out = install(d.path(), &plugins(b"v1.11.0"), false).unwrap();
        assert!(out.iter().all(|(_, p)| *p == Placement::Updated), "{out:?}");
        assert_eq!(
            std::fs::read(d.path().join("bandwidth")).unwrap(),
            b"v1.11.0"
        );
        put(d.path(), "host-local", b"operator's");
        let mut removed = uninstall(d.path()).unwrap();
        removed.sort();
        assert_eq!(removed, ["bandwidth", "portmap"]);
        let left: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["host-local"], "only the operator's file is left");
    }

    #[test]
    fn the_operators_files_are_replaced_or_kept_but_never_removed() {
        let d = tempfile::tempdir().unwrap();
        put(d.path(), "portmap", b"debian 1.1.1");
        put(d.path(), "bandwidth", b"v1.10.0");
        // Calico's default: replaced (portmap) or already identical (bandwidth), never claimed
        let out = install(d.path(), &plugins(b"v1.10.0"), true).unwrap();
        assert_eq!(
            out,
            [
                ("portmap".to_owned(), Placement::ReplacedOperators),
                ("bandwidth".to_owned(), Placement::UpToDate)
            ]
        );
        assert_eq!(std::fs::read(d.path().join("portmap")).unwrap(), b"v1.10.0");
        assert!(load_ledger(d.path()).is_empty());
        assert_eq!(uninstall(d.path()).unwrap(), Vec::<String>::new());
        assert!(d.path().join("portmap").exists() && d.path().join("bandwidth").exists());

        // --update-reference-plugins false: the operator's file stays as it is
        put(d.path(), "portmap", b"debian 1.1.1");
        let out = install(d.path(), &plugins(b"v1.10.0"), false).unwrap();
        assert_eq!(out[0], ("portmap".to_owned(), Placement::KeptOperators));
        assert_eq!(
            std::fs::read(d.path().join("portmap")).unwrap(),
            b"debian 1.1.1"
        );
    }

    #[test]
    fn a_file_changed_after_tern_installed_it_is_the_operators() {
        let d = tempfile::tempdir().unwrap();
        install(d.path(), &plugins(b"v1.10.0"), true).unwrap();
        put(d.path(), "portmap", b"the operator's build");
        // uninstall keeps it, removes tern's bandwidth and the ledger
        assert_eq!(uninstall(d.path()).unwrap(), ["bandwidth"]);
        assert_eq!(
            std::fs::read(d.path().join("portmap")).unwrap(),
            b"the operator's build"
        );
        assert!(!d.path().join(LEDGER).exists());
        // and a reinstall does not claim it back
        install(d.path(), &plugins(b"v1.10.0"), true).unwrap();
        assert!(!load_ledger(d.path()).contains_key("portmap"));
        assert!(load_ledger(d.path()).contains_key("bandwidth"));
    }

    #[test]
    fn a_broken_or_hostile_ledger_claims_nothing() {
        let d = tempfile::tempdir().unwrap();
        put(d.path(), LEDGER, b"not json");
        put(d.path(), "portmap", b"x");
        assert!(load_ledger(d.path()).is_empty());
        assert_eq!(uninstall(d.path()).unwrap(), Vec::<String>::new());
        assert!(d.path().join("portmap").exists());
        let outside = d.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        put(&outside, "victim", b"v");
        let bin = d.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let hostile = serde_json::json!({"../outside/victim": sha256_hex(b"v")});
        put(&bin, LEDGER, hostile.to_string().as_bytes());
        assert_eq!(uninstall(&bin).unwrap(), Vec::<String>::new());
        assert!(outside.join("victim").exists());
    }
}

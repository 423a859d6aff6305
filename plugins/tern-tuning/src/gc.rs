//! GC (CNI 1.1.0): remove the backup of every attachment of this network that is not in
//! `cni.dev/valid-attachments`, restoring nothing (GC has no netns, and the pod netns of a
//! collected attachment is gone or no longer the runtime's; its sysctls died or stay with it).
//!
//! Invariants: without a list nothing is removed (CNI spec "GC": the key is optional); an empty
//! list means nothing is valid. Only backups that name this network are collected: a shared
//! `dataDir` (the default `/run/cni/tuning` is every network's) holds other networks' backups,
//! and backups of older builds or of the reference plugin, which name none and are left alone.
//! Temp files of killed writers are removed; a collected attachment's lock is taken (a verb of
//! it finishes first) and its file, which an ADD killed midway leaves, removed. Keeps going on
//! errors and reports them all.

use std::collections::HashSet;

use tern_cni::{Error, GcInput};
use tern_node::lock::AttachmentLock;

use crate::backup;
use crate::config::data_dir_for_del;

/// Runs GC for one network.
///
/// # Errors
/// Code 104 listing every backup that could not be removed.
pub fn gc(input: &GcInput) -> Result<(), Error> {
    let Some(valid) = &input.valid_attachments else {
        return Ok(());
    };
    let data_dir = match data_dir_for_del(&input.config) {
        Ok(d) => d,
        Err(msg) => {
            // ADD refuses such a netconf before writing anything: no backup can exist for it.
            tracing::warn!(problem = %msg, "GC: no backups to collect (dataDir unusable)");
            return Ok(());
        }
    };
    let valid: HashSet<(&str, &str)> = valid
        .iter()
        .map(|a| (a.container_id.as_str(), a.ifname.as_str()))
        .collect();
    let network = input.config.name.as_str();
    let mut errors: Vec<Error> = Vec::new();
    for (file, b) in backup::list(&data_dir) {
        let (Some(net), Some(cid), Some(ifname)) = (&b.network, &b.container_id, &b.ifname) else {
            continue;
        };
        if net != network || valid.contains(&(cid.as_str(), ifname.as_str())) {
            continue;
        }
        tracing::info!(container_id = %cid, ifname = %ifname, "collecting a stale backup");
        // Under the attachment's lock, as DEL: a verb of it still running finishes first, and
        // the lock file an ADD killed midway left goes with the backup (dropped: removed).
        let lock = AttachmentLock::acquire(&data_dir, cid, ifname);
        if let Err(e) = &lock {
            tracing::warn!(error = %e, "GC: collecting without the attachment lock");
        }
        if let Err(e) = backup::remove(&file) {
            errors.push(e);
        }
        drop(lock);
    }
    // Lock files of verbs killed with no DEL after them (no verb holds them).
    let keep = valid
        .iter()
        .map(|(cid, ifname)| tern_node::lock::file_name(cid, ifname))
        .collect();
    tern_node::lock::sweep(&data_dir, &keep);
    let mut errors = errors.into_iter();
    match errors.next() {
        None => Ok(()),
        Some(first) => {
            let rest: Vec<String> = errors.map(|e| e.to_string()).collect();
            Err(if rest.is_empty() {
                first
            } else {
                first.with_details(rest.join("; "))
            })
        }
    }
}

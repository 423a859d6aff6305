//! What ADD and DEL check and lock before touching an attachment.
//!
//! Before a verb touches an attachment: the backup file checked storable (so a name too long
//! fails before any sysctl is read or written), then the attachment's lock in `dataDir`, so that
//! ADD and DEL of one attachment never interleave (a DEL between ADD's backup and its writes
//! would leave the pod's sysctls changed with no backup to restore them). CHECK only reads.

use tern_cni::{AttachmentInput, Error};
use tern_node::lock::{check_storable, AttachmentLock};

use std::path::Path;

use crate::config::data_dir_for_del;

fn take<N>(dir: &Path, input: &AttachmentInput<N>) -> Result<AttachmentLock, Error> {
    AttachmentLock::acquire(dir, input.container_id.as_str(), input.ifname.as_str()).map_err(|e| {
        Error::new(
            tern_cni::code::STATE_IO,
            format!("lock attachment in {}: {e}", dir.display()),
        )
    })
}

fn backup_name<N>(input: &AttachmentInput<N>) -> String {
    format!("{}_{}.json", input.container_id, input.ifname)
}

/// ADD, once the configuration is validated and before the backup is read: the backup
/// checked storable in `data_dir`, then the lock.
///
/// # Errors
/// Code 7 when the backup cannot be stored (names too long, `dataDir` under a file); code 104
/// when the lock cannot be taken.
pub fn acquire<N>(data_dir: &Path, input: &AttachmentInput<N>) -> Result<AttachmentLock, Error> {
    check_storable(data_dir, &backup_name(input), "backup")?;
    take(data_dir, input)
}

/// DEL: the lock when it can be had; `None` when no backup could exist (see [`acquire`]), and
/// when `dataDir` does not exist: no ADD has locked or written there, and DEL creates nothing.
pub fn prepare_del<N>(input: &AttachmentInput<N>) -> Option<AttachmentLock> {
    let dir = data_dir_for_del(&input.config).ok()?;
    check_storable(&dir, &backup_name(input), "backup").ok()?;
    if !dir.is_dir() {
        return None;
    }
    take(&dir, input)
        .map_err(|e| tracing::warn!(error = %e, "DEL without the attachment lock"))
        .ok()
}

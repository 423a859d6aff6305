//! Atomic file replacement: write a temp file in the same directory, fsync it, rename it over
//! the target, fsync the directory.
//!
//! Invariant: a reader opening the target sees either the whole old content or the whole new
//! content, never a partial file; the new file has exactly the requested mode (umask does not
//! apply); on any error the temp file is removed and the target is untouched.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::KubeError;

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> KubeError + 'a {
    move |source| KubeError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// Replaces `path` with `contents` atomically, with permission bits `mode` (e.g. `0o600`).
///
/// # Errors
/// [`KubeError::Io`] naming the operation and file when any step fails (no parent directory,
/// no space, permission denied, ...). The target is then unchanged.
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<(), KubeError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.tmp.{}.{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .map_err(io("create", &tmp))?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(io("chmod", &tmp))?;
        f.write_all(contents).map_err(io("write", &tmp))?;
        f.sync_all().map_err(io("fsync", &tmp))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(io("rename", path))?;
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io("fsync", &dir))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_with_mode_and_replaces() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("kc");
        write_atomic(&p, b"one", 0o600).unwrap();
        write_atomic(&p, b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            1,
            "no temp file left"
        );
    }

    #[test]
    fn failure_leaves_target_and_no_temp() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("sub");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("x"), "keep").unwrap();
        // Renaming a file over a non-empty directory fails.
        let e = write_atomic(&target, b"new", 0o600).unwrap_err();
        assert!(e.to_string().contains("rename"), "{e}");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        assert!(write_atomic(Path::new("/nonexistent-dir/x"), b"x", 0o600).is_err());
    }
}

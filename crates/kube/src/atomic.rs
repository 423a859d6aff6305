//! Atomic file replacement: write a temp file in the same directory, fsync it, rename it over
//! the target, fsync the directory.
//!
//! Invariant: a reader opening the target sees either the whole old content or the whole new
//! content, never a partial file; the new file has exactly the requested mode (umask does not
//! apply); on any error the temp file is removed and the target is untouched.

use std::path::Path;

use crate::error::KubeError;

/// Replaces `path` with `contents` atomically, with permission bits `mode` (e.g. `0o600`), through
/// the project's one implementation, [`tern_node::fs::write_atomic`].
///
/// # Errors
/// [`KubeError::Io`] naming the file when any step fails (no parent directory, no space,
/// permission denied, ...). The target is then unchanged.
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<(), KubeError> {
    tern_node::fs::write_atomic(path, contents, mode).map_err(|source| KubeError::Io {
        op: "replace",
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

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
        assert!(e.to_string().contains("replace /"), "{e}");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        assert!(write_atomic(Path::new("/nonexistent-dir/x"), b"x", 0o600).is_err());
    }
}

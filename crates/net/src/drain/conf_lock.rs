//! The CNI conf dir's lock ([`lock_conf_dir`]), taken by every writer of tern's conflist and the
//! drain mark: tern-agent's install, uninstall and pod-range rewrite, and tern's last DEL of a drain.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

/// An exclusive `flock(2)` on the CNI conf dir itself, released on drop. Held by every writer of
/// the conflist and the uninstall mark in tern-agent: install from its first write on the host
/// (plugins, kubeconfig, conflist, the mark's removal), uninstall from its mark to its finish, and
/// the running agent's pod-range rewrite, so a rewrite that found no mark cannot land after
/// uninstall drained the conflist (it would undo the drain), and an install and an uninstall run
/// one after the other, never interleaved. The directory's own descriptor is locked: no lock file
/// for libcni to see or for uninstall to leave behind. Nothing may take it while holding it (a
/// second descriptor of the same process waits as another process would).
///
/// # Errors
/// The directory cannot be opened (`NotFound` when it is absent) or locked.
pub fn lock_conf_dir(dir: &Path) -> std::io::Result<Flock<File>> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let fd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY)
        .open(dir)?;
    Flock::lock(fd, FlockArg::LockExclusive)
        .map_err(|(_, errno)| std::io::Error::from_raw_os_error(errno as i32))
}

/// [`lock_conf_dir`], or `None` when the directory is absent (nothing in it to guard).
///
/// # Errors
/// The directory cannot be opened for another reason, or locked.
pub fn lock_conf_dir_if_present(dir: &Path) -> std::io::Result<Option<Flock<File>>> {
    match lock_conf_dir(dir) {
        Ok(held) => Ok(Some(held)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

//! The CNI conf dir's lock: one exclusive `flock(2)` on the directory itself, taken by every
//! writer of tern's conflist and the uninstall mark in it ([`lock_conf_dir`]). A leaf module:
//! `install` and `uninstall` both take it (and `install` names the mark `uninstall` defines).

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

/// An exclusive `flock(2)` on the CNI conf dir itself, released on drop. Held by every writer of
/// the conflist and the uninstall mark: install from its first write on the host (plugins,
/// kubeconfig, conflist, the mark's removal; [`crate::install`]), uninstall from its mark to its
/// finish ([`crate::uninstall`]) and the running agent's pod-range rewrite
/// ([`crate::node_cidrs`]), so a rewrite that found no mark cannot land after uninstall drained
/// the conflist (it would undo the drain), and an install and an uninstall run one after the
/// other, never interleaved. The directory's own descriptor is locked: no lock file for libcni
/// to see or for uninstall to leave behind. Nothing may take it while holding it (a second
/// descriptor of the same process waits as another process would).
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

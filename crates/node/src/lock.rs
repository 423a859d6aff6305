//! Per-attachment locks and per-attachment file names.
//!
//! Per-attachment locks and what a per-attachment file name may be: a plugin serialises the
//! verbs of one attachment (container ID + ifname) with an `flock` on
//! `<dir>/<containerID>_<ifname>.lock`, so an ADD and a DEL of the same attachment never
//! interleave, while different attachments never wait for each other.
//!
//! Invariant: no lock file outlives the verb that took it. The holder removes it before
//! releasing; a waiter that then gets the lock on the removed file sees that the path no longer
//! names its file (device and inode differ, or it is gone) and starts again on a fresh one. So a
//! SIGKILLed holder leaves at most one unlocked file, which the next verb of that attachment
//! (DEL at the latest) takes and removes.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{fcntl, FcntlArg, FdFlag, Flock, FlockArg};

/// The longest file name Linux file systems take (`NAME_MAX`).
pub const NAME_MAX: usize = 255;
/// The longest path the kernel takes, its NUL excluded (`PATH_MAX` − 1).
pub const PATH_MAX: usize = 4095;
/// The most an atomic write adds to a file's name for its temp file ([`crate::fs::temp_name`]):
/// `.` + `.tmp-` + a PID (at most 10 digits) + `-` + a start time and `-` + a counter (at most
/// 20 digits each).
pub const TEMP_NAME_OVERHEAD: usize = 1 + 5 + 10 + 1 + 20 + 1 + 20;

/// Why a per-attachment file cannot be stored ([`check_storable`]); a plugin answers each with
/// CNI code 7 (invalid network config: `tern_cni::Error`'s `From` impl), since the names come
/// from the netconf and the runtime's parameters.
#[derive(Debug, thiserror::Error)]
pub enum NotStorable {
    /// The file name plus its temp suffix is over [`NAME_MAX`].
    #[error(
        "{what} {name:?} cannot be stored: the file name would be {bytes} bytes with its temp \
         suffix, over the {NAME_MAX} a file system takes"
    )]
    NameTooLong {
        /// What the file is for ("attachment state", "backup").
        what: String,
        /// The file name.
        name: String,
        /// Its length with the temp suffix (bytes).
        bytes: usize,
    },
    /// The whole path plus the temp suffix is over [`PATH_MAX`].
    #[error("{what} {} cannot be stored: the path is over {PATH_MAX} bytes", path.display())]
    PathTooLong {
        /// What the file is for.
        what: String,
        /// The file's path.
        path: PathBuf,
    },
    /// A component of the directory is over [`NAME_MAX`].
    #[error("{what} directory {} has a {bytes}-byte component, over {NAME_MAX}", dir.display())]
    ComponentTooLong {
        /// What the file is for.
        what: String,
        /// The directory.
        dir: PathBuf,
        /// The longest component's length (bytes).
        bytes: usize,
    },
    /// An existing part of the directory is not a directory.
    #[error(
        "{what} directory {} cannot be created: {} exists and is not a directory",
        dir.display(),
        part.display()
    )]
    NotADirectory {
        /// What the file is for.
        what: String,
        /// The directory.
        dir: PathBuf,
        /// The part of it that exists and is something else.
        part: PathBuf,
    },
}

/// Checks, before anything is written, that `dir/<name>` can be stored by an atomic write (its
/// temp name included) and that no existing part of `dir` is something other than a directory:
/// so that a plugin finds this out before its first side effect, not after IPAM ran.
///
/// # Errors
/// [`NotStorable`] naming the path and the limit; `what` says what the file is for.
pub fn check_storable(dir: &Path, name: &str, what: &str) -> Result<(), NotStorable> {
    let longest = name.len() + TEMP_NAME_OVERHEAD;
    let path = dir.join(name);
    if longest > NAME_MAX {
        return Err(NotStorable::NameTooLong {
            what: what.to_owned(),
            name: name.to_owned(),
            bytes: longest,
        });
    }
    if path.as_os_str().len() + TEMP_NAME_OVERHEAD > PATH_MAX {
        return Err(NotStorable::PathTooLong {
            what: what.to_owned(),
            path,
        });
    }
    for part in dir.ancestors() {
        if let Some(bad) = part.components().next_back().and_then(|c| {
            let n = c.as_os_str().len();
            (n > NAME_MAX).then_some(n)
        }) {
            return Err(NotStorable::ComponentTooLong {
                what: what.to_owned(),
                dir: dir.to_owned(),
                bytes: bad,
            });
        }
        match std::fs::metadata(part) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                return Err(NotStorable::NotADirectory {
                    what: what.to_owned(),
                    dir: dir.to_owned(),
                    part: part.to_owned(),
                })
            }
            Err(_) => {}
        }
    }
    Ok(())
}

/// The exclusive lock of one attachment; released (and its file removed) on drop.
#[derive(Debug)]
pub struct AttachmentLock {
    path: PathBuf,
    lock: Option<Flock<File>>,
}

impl AttachmentLock {
    /// Takes the lock of `(container_id, ifname)` in `dir` (created 0700 when missing), waiting
    /// for a holder to finish.
    ///
    /// # Errors
    /// The I/O error of creating the directory or the file, or of `flock`.
    pub fn acquire(dir: &Path, container_id: &str, ifname: &str) -> io::Result<AttachmentLock> {
        let path = dir.join(file_name(container_id, ifname));
        loop {
            // The directory is made only when missing (the first verb of a network).
            let file = crate::fs::in_dir(dir, 0o700, || {
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .mode(0o600)
                    .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
                    .open(&path)
            })?;
            let lock = Flock::lock(file, FlockArg::LockExclusive)
                .map_err(|(_, errno)| io::Error::from_raw_os_error(errno as i32))?;
            let held = lock.metadata()?;
            match std::fs::symlink_metadata(&path) {
                Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {
                    // Inherited by the verb's exec'd children (its IPAM): the attachment stays
                    // locked while any of them runs, so the orphaned IPAM of a plugin SIGKILLed
                    // mid-ADD (a runtime's timeout kills only the plugin) finishes before the
                    // DEL that follows can release; else it took its lease after that DEL.
                    fcntl(&*lock, FcntlArg::F_SETFD(FdFlag::empty())).map_err(io::Error::from)?;
                    crate::phase::mark("lock");
                    return Ok(AttachmentLock {
                        path,
                        lock: Some(lock),
                    });
                }
                // The holder before us removed it (or replaced it): lock the current one.
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The lock file name of an attachment.
pub fn file_name(container_id: &str, ifname: &str) -> String {
    format!("{container_id}_{ifname}.lock")
}

/// GC's part: removes every lock file in `dir` that no verb holds and that is not in `keep`
/// (file names, see [`file_name`]) — what a verb killed with SIGKILL leaves when no DEL follows.
/// A held lock is a verb in flight and is left alone; a file taken meanwhile by a new verb is
/// safe too (it re-checks the inode, see the module doc). Returns how many were removed.
pub fn sweep(dir: &Path, keep: &std::collections::HashSet<String>) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".lock") || keep.contains(&name) {
            continue;
        }
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC | nix::libc::O_NONBLOCK)
            .open(e.path())
        else {
            continue;
        };
        let Ok(lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) else {
            continue; // held: a verb in flight
        };
        let same = match (lock.metadata(), std::fs::symlink_metadata(e.path())) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        };
        if same && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
        drop(lock);
    }
    removed
}

impl Drop for AttachmentLock {
    fn drop(&mut self) {
        // Removed while still held: see the module doc for why a waiter is never fooled.
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(path = %self.path.display(), error = %e, "remove attachment lock");
            }
        }
        drop(self.lock.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tern-lock-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn one_attachment_is_serialised_others_are_not_and_no_file_is_left() {
        let d = dir("ser");
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|s| {
            for _ in 0..8 {
                let (d, inside, most) = (&d, inside.clone(), most.clone());
                s.spawn(move || {
                    for _ in 0..50 {
                        let _l = AttachmentLock::acquire(d, "c1", "eth0").unwrap();
                        let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(most.load(Ordering::SeqCst), 1, "two holders at once");
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            0,
            "a lock file was left"
        );
        // Another attachment does not wait for a held one.
        let _held = AttachmentLock::acquire(&d, "c1", "eth0").unwrap();
        let t0 = Instant::now();
        drop(AttachmentLock::acquire(&d, "c2", "eth0").unwrap());
        assert!(t0.elapsed() < Duration::from_secs(1));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn sweep_removes_what_no_verb_holds_and_keeps_the_rest() {
        let d = dir("sweep");
        std::fs::create_dir_all(&d).unwrap();
        // A killed verb's leftover, a valid attachment's leftover, a held one, another file.
        std::fs::write(d.join(file_name("dead", "eth0")), b"").unwrap();
        std::fs::write(d.join(file_name("valid", "eth0")), b"").unwrap();
        std::fs::write(d.join("x_eth0.json"), b"{}").unwrap();
        let held = AttachmentLock::acquire(&d, "busy", "eth0").unwrap();
        let keep = [file_name("valid", "eth0")].into_iter().collect();
        assert_eq!(sweep(&d, &keep), 1);
        let mut left: Vec<String> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["busy_eth0.lock", "valid_eth0.lock", "x_eth0.json"]);
        drop(held);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn storable_names_and_directories() {
        let d = dir("store");
        std::fs::create_dir_all(&d).unwrap();
        check_storable(&d, &format!("{}_eth0.json", "a".repeat(64)), "state").unwrap();
        let longest = "a".repeat(NAME_MAX - TEMP_NAME_OVERHEAD);
        assert!(crate::fs::temp_name(&longest).len() <= NAME_MAX);
        check_storable(&d, &longest, "state").unwrap();
        let e = check_storable(&d, &format!("{}_eth0.json", "a".repeat(250)), "state").unwrap_err();
        assert!(
            matches!(e, NotStorable::NameTooLong { bytes, .. } if bytes > NAME_MAX),
            "{e}"
        );
        let long_dir = d.join("b".repeat(256));
        let e = check_storable(&long_dir, "x.json", "state").unwrap_err();
        assert!(
            matches!(e, NotStorable::ComponentTooLong { bytes: 256, .. }),
            "{e}"
        );
        let file = d.join("a-file");
        std::fs::write(&file, b"x").unwrap();
        let e = check_storable(&file.join("net"), "x.json", "state").unwrap_err();
        assert!(
            matches!(e, NotStorable::NotADirectory { ref part, .. } if *part == file),
            "{e}"
        );
        let deep = d.join("x/".repeat(2100));
        let e = check_storable(&deep, "x.json", "state").unwrap_err();
        assert!(matches!(e, NotStorable::PathTooLong { .. }), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}

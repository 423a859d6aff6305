//! Files written with no name (`O_TMPFILE`) and linked into place: whole or absent, and nothing
//! left by a writer killed before the link (the module docs of [`super`]).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, AT_FDCWD};
use nix::unistd::linkat;

/// How [`Unnamed::create`] makes a file: its mode, whether it is synced before the link, and what
/// runs between the write and the link (tern-ipam marks a phase there).
pub struct Unnamed<'a> {
    /// The file mode, exactly (the umask is undone).
    pub mode: u32,
    /// `fsync` of the file before the link (the directory's is the caller's).
    pub durable: bool,
    /// Called once the data is written, before the link.
    pub written: &'a dyn Fn(),
}

/// What [`Unnamed::make`] did.
pub(super) enum Made {
    /// Written and linked into place.
    Linked,
    /// Written, not linked: the name exists. The file, to place otherwise.
    Exists(File),
    /// Nothing created: no `O_TMPFILE` here, or a link refused for another reason.
    Unsupported,
}

impl Unnamed<'_> {
    /// Creates `name` (relative to `dir_fd`, or a whole path with `AT_FDCWD`) holding `data`:
    /// a file with no name (`O_TMPFILE` in `dir`), written, then linked into place, which never
    /// replaces: `Ok(false)` when `name` exists. Whole or absent, as through a temp file, and a
    /// writer killed before the link leaves nothing at all. `None` when this filesystem or
    /// kernel cannot (no `O_TMPFILE`; a link refused for another reason than `EEXIST`): nothing
    /// was created, and the caller writes through a temp file.
    ///
    /// # Errors
    /// The write's or the `fsync`'s I/O error (nothing created).
    pub fn create(
        &self,
        dir: &Path,
        dir_fd: BorrowedFd<'_>,
        name: &Path,
        data: &[u8],
    ) -> Option<io::Result<bool>> {
        match self.make(dir, dir_fd, name, data) {
            Ok(Made::Linked) => Some(Ok(true)),
            Ok(Made::Exists(_)) => Some(Ok(false)),
            Ok(Made::Unsupported) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// [`Unnamed::create`], keeping the written file when `name` exists.
    pub(super) fn make(
        &self,
        dir: &Path,
        dir_fd: BorrowedFd<'_>,
        name: &Path,
        data: &[u8],
    ) -> io::Result<Made> {
        let Ok(mut file) = OpenOptions::new()
            .write(true)
            .mode(self.mode)
            .custom_flags(nix::libc::O_TMPFILE)
            .open(dir)
        else {
            return Ok(Made::Unsupported);
        };
        // The umask may have narrowed the mode; the caller asked for exactly this one.
        file.set_permissions(fs::Permissions::from_mode(self.mode))?;
        file.write_all(data)?;
        if self.durable {
            file.sync_all()?;
        }
        (self.written)();
        Ok(match link_fd(&file, dir_fd, name) {
            Ok(()) => Made::Linked,
            Err(Errno::EEXIST) => Made::Exists(file),
            Err(_) => Made::Unsupported,
        })
    }
}

/// Links the open `file` (one with no name: `O_TMPFILE`) as `name` relative to `dir_fd`; never
/// replaces (`EEXIST`). `AT_EMPTY_PATH` needs CAP_DAC_READ_SEARCH (root has it);
/// `/proc/self/fd` does not.
pub(super) fn link_fd(file: &File, dir_fd: BorrowedFd<'_>, name: &Path) -> nix::Result<()> {
    match linkat(file, "", dir_fd, name, AtFlags::AT_EMPTY_PATH) {
        Err(Errno::ENOENT) | Err(Errno::EPERM) => linkat(
            AT_FDCWD,
            format!("/proc/self/fd/{}", file.as_raw_fd()).as_str(),
            dir_fd,
            name,
            AtFlags::AT_SYMLINK_FOLLOW,
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{replace_atomic, write_atomic};

    /// A new file is created with no name and linked into place: exactly the asked mode (0o666:
    /// the umask narrows it unless it is set after the create), no temp name on the way (the
    /// directory's watcher sees one name appear), and a second [`Unnamed::create`] of the same
    /// name refuses to replace it. A replace links the written file under a temp name and
    /// renames it over the old one: no named temp file is written to.
    #[test]
    fn a_new_file_is_linked_into_place_without_a_temp_name() {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        use std::os::fd::AsFd;
        let dir = std::env::temp_dir().join(format!("tern-fs-new-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let watch = Inotify::init(InitFlags::IN_NONBLOCK).unwrap();
        let (created, modified) = (
            AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO,
            AddWatchFlags::IN_MODIFY,
        );
        watch.add_watch(&dir, created | modified).unwrap();
        // The names that appeared since the last call (created, linked or renamed to), after
        // checking that no named temp file was written to (an unnamed file's writes carry the
        // kernel's `#<inode>` name). Events are queued by the syscalls themselves.
        let names = || -> Vec<String> {
            let events = watch.read_events().unwrap_or_default(); // EAGAIN: none
            let name = |e: &nix::sys::inotify::InotifyEvent| {
                e.name.as_ref().map(|n| n.to_string_lossy().into_owned())
            };
            for e in events.iter().filter(|e| e.mask.intersects(modified)) {
                let n = name(e).unwrap_or_default();
                assert!(!n.contains(".tmp-"), "a named temp file was written: {n}");
            }
            events
                .iter()
                .filter(|e| e.mask.intersects(created))
                .filter_map(name)
                .collect()
        };
        let p = dir.join("backup.json");
        let calls = std::cell::Cell::new(0);
        let unnamed = Unnamed {
            mode: 0o666,
            durable: true,
            written: &|| calls.set(calls.get() + 1),
        };
        let handle = File::open(&dir).unwrap();
        let created = unnamed.create(&dir, handle.as_fd(), Path::new("backup.json"), b"one");
        // Every filesystem std::env::temp_dir() is on here (tmpfs, ext4) has O_TMPFILE.
        assert!(matches!(created, Some(Ok(true))), "{created:?}");
        assert_eq!(calls.get(), 1);
        assert_eq!(fs::read(&p).unwrap(), b"one");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o666
        );
        let again = unnamed.create(&dir, AT_FDCWD, &p, b"two");
        assert!(matches!(again, Some(Ok(false))), "{again:?}");
        assert_eq!(fs::read(&p).unwrap(), b"one", "replaced by a link");
        assert_eq!(names(), ["backup.json"]);

        let q = dir.join("state.json");
        replace_atomic(&q, b"new", 0o600).unwrap();
        assert_eq!(fs::read(&q).unwrap(), b"new");
        assert_eq!(names(), ["state.json"], "a new file took a temp name");
        write_atomic(&q, b"newer", 0o640).unwrap();
        assert_eq!(fs::read(&q).unwrap(), b"newer");
        assert_eq!(
            fs::metadata(&q).unwrap().permissions().mode() & 0o777,
            0o640
        );
        let replaced = names();
        assert_eq!(replaced.len(), 2, "{replaced:?}");
        assert!(replaced[0].starts_with(".state.json.tmp-"), "{replaced:?}");
        assert_eq!(replaced[1], "state.json", "{replaced:?}");
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            2,
            "a temp file was left"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}

//! Files that must never be seen half-written: plugin state, backups, leases, kubeconfigs.
//!
//! Invariant: a reader sees either the old content or the new, never a mix or a truncated file,
//! also when the writer is killed at any point (temp file in the same directory, rename).
//!
//! A file is written with no name (`O_TMPFILE`, [`Unnamed`]) and linked into place when it does
//! not exist yet: a writer killed before the link leaves nothing, and no temp name is made (whose
//! writer's start time costs a read of `/proc/self/stat`, 17 µs in a new process). When it exists,
//! the same written file is linked under a temp name and renamed over it; a filesystem without
//! `O_TMPFILE` takes a temp file and the rename.
//!
//! Two strengths: [`write_atomic`] is also *durable* (fsync of the file before the rename and of
//! the directory after it), for what must survive a power loss (backups of host settings,
//! kubeconfigs). [`replace_atomic`] is atomic only, for state whose subject does not survive a
//! reboot anyway (tern's per-attachment state describes a veth; a crash of the kernel takes the
//! veth with it): it costs no disk flush, which on ext4 is most of the cost of a write.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use nix::fcntl::AT_FDCWD;

mod temps;
mod unnamed;

pub use temps::{remove_if_stale_temp, remove_stale_temps, remove_stale_temps_of, temp_name};
pub use unnamed::Unnamed;
use unnamed::{link_fd, Made};

/// Replaces `path` with `data` atomically and durably, the file mode being `mode` (e.g.
/// `0o600`): a file with no name written and fsynced, linked to `path` when it is new, else to a
/// temp name renamed over it (a temp file where there is no `O_TMPFILE`), then an fsync of the
/// directory. The directory must exist. A leftover temp file (`.<name>.tmp-<pid>-<start>-<n>`,
/// see [`temp_name`]) can only remain if the process is killed between its link and the rename;
/// [`remove_stale_temps`] sweeps them.
///
/// # Errors
/// The underlying I/O error; the temp file is removed on every error path.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    write_via_temp(path, data, mode, true)
}

/// Replaces `path` with `data` atomically but *not durably*: like [`write_atomic`] without the
/// two fsyncs. A reader (and a process started after a crash of the writer) sees the old content
/// or the new, never a mix; after a power loss or kernel crash the file may hold the old content,
/// or be missing. Use it only for state that a reboot makes meaningless anyway — tern's
/// per-attachment state, which describes a veth (veths do not survive a reboot). On the ext4
/// disks measured, the fsyncs were ≈1.8 ms of a ≈4 ms ADD.
///
/// # Errors
/// The underlying I/O error; the temp file is removed on every error path.
pub fn replace_atomic(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    write_via_temp(path, data, mode, false)
}

fn write_via_temp(path: &Path, data: &[u8], mode: u32, durable: bool) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let unnamed = Unnamed {
        mode,
        durable,
        written: &|| {},
    };
    let tmp = match unnamed.make(dir, AT_FDCWD, path, data)? {
        Made::Linked => None,
        // The file exists: the written one goes over it under a temp name.
        Made::Exists(file) => {
            let tmp = dir.join(temp_name(&name.to_string_lossy()));
            match link_fd(&file, AT_FDCWD, &tmp) {
                Ok(()) => Some(tmp),
                Err(_) => return write_through_temp(dir, name, path, data, mode, durable),
            }
        }
        Made::Unsupported => return write_through_temp(dir, name, path, data, mode, durable),
    };
    if let Some(tmp) = tmp {
        if let Err(e) = fs::rename(&tmp, path) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    }
    if durable {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// [`write_via_temp`] where there is no `O_TMPFILE`: a named temp file, written, renamed.
fn write_through_temp(
    dir: &Path,
    name: &OsStr,
    path: &Path,
    data: &[u8],
    mode: u32,
    durable: bool,
) -> io::Result<()> {
    let tmp = dir.join(temp_name(&name.to_string_lossy()));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        // The umask may have narrowed the mode; the caller asked for exactly this one.
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.write_all(data)?;
        if durable {
            f.sync_all()?;
        }
        fs::rename(&tmp, path)?;
        if durable {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Runs `op` on a file in `dir`; when it fails with `NotFound`, creates `dir` (and its missing
/// parents, mode `mode`) and runs it once more. Once the layout exists (every verb after a
/// node's first) a write or lock costs no `mkdir` or `stat` of its directory.
///
/// # Errors
/// `op`'s error, or the error of creating `dir`.
pub fn in_dir<T>(dir: &Path, mode: u32, mut op: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    match op() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(dir)?;
            op()
        }
        other => other,
    }
}

/// Reads a file of at most `buf.len()` bytes into `buf` (open, reads until end of file, close:
/// no `stat` for a size hint, no allocation), for the small files read on a verb's hot path
/// (leases, `/proc/<pid>/stat`). Opened `O_NONBLOCK`, which changes nothing for a regular file:
/// a FIFO found where such a file should be reads as what is in it (empty without a writer)
/// instead of blocking open(2) until a writer comes, which would hang the verb for good.
///
/// # Errors
/// The I/O error (`WouldBlock` for a FIFO with a writer but no data); `InvalidData` when the
/// file is longer than `buf`.
pub fn read_small<'b>(path: &Path, buf: &'b mut [u8]) -> io::Result<&'b [u8]> {
    read_whole(open_nonblocking(path)?, &path.display(), buf)
}

/// [`read_small`] of `name` in the directory open as `dir` (`openat`: one path component to
/// resolve instead of the whole path, for reading every file of one directory).
///
/// # Errors
/// As [`read_small`].
pub fn read_small_at<'b>(dir: &File, name: &str, buf: &'b mut [u8]) -> io::Result<&'b [u8]> {
    use nix::fcntl::{openat, OFlag};
    let fd = openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(io::Error::from)?;
    read_whole(File::from(fd), &name, buf)
}

/// Reads `f` (named `what` in errors) to its end into `buf`.
fn read_whole<'b>(
    mut f: File,
    what: &dyn std::fmt::Display,
    buf: &'b mut [u8],
) -> io::Result<&'b [u8]> {
    use std::io::Read;
    let mut len = 0;
    loop {
        if len == buf.len() {
            // Full: only end of file on the next read makes it whole.
            let mut probe = [0u8; 1];
            return match f.read(&mut probe)? {
                0 => Ok(&buf[..len]),
                _ => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{what} is longer than {} bytes", buf.len()),
                )),
            };
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => return Ok(&buf[..len]),
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Opens `path` for reading with `O_NONBLOCK`: a FIFO does not wait for a writer (see
/// [`read_small`]).
///
/// # Errors
/// The I/O error of open(2).
pub fn open_nonblocking(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
}

/// Removes `path`, treating "already gone" as success.
///
/// # Errors
/// Any error but `NotFound`.
pub fn remove_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_content_with_the_asked_mode_and_leaves_no_temp() {
        let dir = std::env::temp_dir().join(format!("tern-fs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("state.json");
        write_atomic(&p, b"one", 0o600).unwrap();
        write_atomic(&p, b"two", 0o600).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        replace_atomic(&p, b"three", 0o640).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"three");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1, "no temp file left");
        assert!(replace_atomic(&dir.join("missing/x"), b"x", 0o600).is_err());
        write_atomic(&p, b"two", 0o600).unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1, "no temp file left");
        assert!(write_atomic(&dir.join("missing/x"), b"x", 0o600).is_err());
        // 4194305 is above the kernel's largest pid_max: that writer cannot be running.
        fs::write(dir.join(".state.json.tmp-4194305-1"), b"half").unwrap();
        let live = dir.join(format!(".state.json.tmp-{}-99", std::process::id()));
        fs::write(&live, b"being written").unwrap();
        remove_stale_temps(&dir);
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            2,
            "only the dead writer's temp goes"
        );
        assert!(live.exists(), "a live writer's temp file was removed");
        fs::remove_file(&live).unwrap();
        remove_if_exists(&p).unwrap();
        remove_if_exists(&p).unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A FIFO read by [`read_small`] (a lease or cursor of that type, by hand or by a tool) gives
    /// what is in it without waiting for a writer: open(2) of a FIFO for reading blocks until one
    /// comes, and tern-ipam's ADD, DEL and GC hung in it for good, holding the network's lock.
    #[test]
    fn read_small_does_not_wait_for_a_fifo_writer() {
        let dir = std::env::temp_dir().join(format!("tern-fs-fifo-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("10.0.0.2");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let p = fifo.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            tx.send(
                read_small(&p, &mut buf)
                    .map(<[u8]>::len)
                    .map_err(|e| e.kind()),
            )
            .unwrap();
        });
        let read = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("read_small waited for a FIFO's writer");
        assert_eq!(read, Ok(0), "a FIFO nobody writes reads as empty");
        fs::remove_dir_all(&dir).unwrap();
    }
}

//! Files that must never be seen half-written: plugin state, backups, leases, kubeconfigs.
//!
//! Invariant: a reader sees either the old content or the new, never a mix or a truncated file,
//! also when the writer is killed at any point (temp file in the same directory, rename).
//!
//! Two strengths: [`write_atomic`] is also *durable* (fsync of the file before the rename and of
//! the directory after it), for what must survive a power loss (backups of host settings,
//! kubeconfigs). [`replace_atomic`] is atomic only, for state whose subject does not survive a
//! reboot anyway (tern's per-attachment state describes a veth; a crash of the kernel takes the
//! veth with it): it costs no disk flush, which on ext4 is most of the cost of a write.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Replaces `path` with `data` atomically and durably, the file mode being `mode` (e.g.
/// `0o600`): temp file, fsync, rename, fsync of the directory. The directory must exist. A
/// leftover temp file (`.<name>.tmp-<pid>-<start>-<n>`, see [`temp_name`]) can only remain if the
/// process is killed between create and rename; [`remove_stale_temps`] sweeps them.
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

/// A fresh temp file name for a write of `name` in the same directory by this process:
/// `.<name>.tmp-<pid>-<start>-<n>`, `<start>` being this process's start time (`/proc/self/stat`
/// field 22, clock ticks since boot) and `<n>` a per-process counter. The start time makes the
/// writer identifiable for good: with pid alone a sweep would take a killed writer's temp for a
/// live one's whenever its pid has been reused (`pid_max` is 32768 on many nodes), and the temp
/// would outlive every DEL and GC.
pub fn temp_name(name: &str) -> String {
    format!(
        ".{name}.tmp-{}-{}-{}",
        std::process::id(),
        own_start_time(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// This process's start time in clock ticks since boot (0 when `/proc` cannot tell: such a temp
/// is then judged by its pid alone, as an old-style name is).
fn own_start_time() -> u64 {
    static START: OnceLock<u64> = OnceLock::new();
    *START.get_or_init(|| proc_start_time("self").map_or(0, |(_, start)| start))
}

/// `(state, start time)` of `/proc/<pid>/stat` (proc(5) fields 3 and 22; the comm, field 2, may
/// hold spaces and parentheses, so fields are counted from the last `)`).
fn proc_start_time(pid: &str) -> Option<(char, u64)> {
    // Under 1.2 kB: 52 numeric fields and a comm of at most 64 bytes.
    let mut buf = [0u8; 2048];
    let stat = read_small(&Path::new("/proc").join(pid).join("stat"), &mut buf).ok()?;
    let stat = std::str::from_utf8(stat).ok()?;
    let mut rest = stat.get(stat.rfind(')')? + 1..)?.split_ascii_whitespace();
    let state = rest.next()?.chars().next()?;
    // Field 3 is the first after the comm, so field 22 is 19 further on.
    let start = rest.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Whether the writer of a temp file (its name's pid and start time) may still rename it: the
/// pid runs, is not a zombie (a killed writer not yet reaped can write nothing more), and, when
/// the name carries a start time, started then (else the pid was reused).
fn writer_alive(pid: u32, start: Option<u64>) -> bool {
    match proc_start_time(&pid.to_string()) {
        None => false,
        Some(('Z' | 'X', _)) => false,
        Some((_, actual)) => start.is_none_or(|s| s == 0 || s == actual),
    }
}

/// Removes temp files left in `dir` by [`write_atomic`] calls of killed processes: those whose
/// writer (pid and start time, in the name) no longer runs. A live writer's temp file is left
/// alone, so a sweep never breaks a concurrent write. Best effort: errors are ignored.
pub fn remove_stale_temps(dir: &Path) {
    sweep_temps(dir, None);
}

/// Removes the temp files of `path` left by [`write_atomic`] calls of killed processes (same
/// rule as [`remove_stale_temps`]), e.g. when the owner of `path` deletes it: a writer killed
/// between create and rename must not leave its half of the file behind. Best effort.
pub fn remove_stale_temps_of(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    sweep_temps(dir, Some(&format!(".{}.tmp-", name.to_string_lossy())));
}

/// The writer of a temp file name: `(pid, Some(start))` from `.<name>.tmp-<pid>-<start>-<n>`,
/// `(pid, None)` from the older `.<name>.tmp-<pid>-<n>`.
fn temp_writer(name: &str) -> Option<(u32, Option<u64>)> {
    let (_, tail) = name.rsplit_once(".tmp-")?;
    let fields: Vec<&str> = tail.split('-').collect();
    let pid = fields.first()?.parse().ok()?;
    match fields.len() {
        3 => Some((pid, Some(fields[1].parse().ok()?))),
        _ => Some((pid, None)),
    }
}

fn sweep_temps(dir: &Path, prefix: Option<&str>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if prefix.is_none_or(|p| name.starts_with(p)) {
            remove_if_stale_temp(dir, &name);
        }
    }
}

/// Removes `dir/name` when `name` is a temp file of [`write_atomic`]'s form whose writer no
/// longer runs (the rule of [`remove_stale_temps`]), for a caller that lists `dir` itself and
/// sweeps in the same walk. Returns whether `name` has a temp file's form (removed or not).
/// Best effort: errors are ignored.
pub fn remove_if_stale_temp(dir: &Path, name: &str) -> bool {
    if !(name.starts_with('.') && name.contains(".tmp-")) {
        return false;
    }
    let alive = temp_writer(name).is_some_and(|(pid, start)| writer_alive(pid, start));
    if !alive {
        let _ = fs::remove_file(dir.join(name));
    }
    true
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

    #[test]
    fn stale_temps_of_one_file() {
        let dir = std::env::temp_dir().join(format!("tern-fs-of-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let dead = |name: &str| dir.join(format!(".{name}.tmp-4194305-7"));
        fs::write(dead("a_eth0.json"), b"half").unwrap();
        fs::write(dead("b_eth0.json"), b"half").unwrap();
        remove_stale_temps_of(&dir.join("a_eth0.json"));
        assert!(
            !dead("a_eth0.json").exists(),
            "the file's stale temp was kept"
        );
        assert!(
            dead("b_eth0.json").exists(),
            "another file's temp was removed"
        );
        assert_eq!(temp_writer(".x.json.tmp-123-4"), Some((123, None)));
        assert_eq!(temp_writer(".x.json.tmp-123-99-4"), Some((123, Some(99))));
        assert_eq!(temp_writer("x.json"), None);
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

    /// A killed writer whose pid was reused, or that is a zombie not yet reaped, is dead: its
    /// temp file goes. (By pid alone both were taken for live writers and the temp outlived
    /// every DEL and GC.)
    #[test]
    fn reused_pid_and_zombie_writers_are_dead() {
        let dir = std::env::temp_dir().join(format!("tern-fs-reuse-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let me = std::process::id();
        let (_, my_start) = proc_start_time("self").unwrap();
        assert_eq!(own_start_time(), my_start);
        let mine = temp_name("a.json");
        assert!(
            mine.starts_with(&format!(".a.json.tmp-{me}-{my_start}-")),
            "{mine}"
        );
        // Our pid with another start time: a dead writer whose pid we now hold.
        let reused = dir.join(format!(".a.json.tmp-{me}-{}-0", my_start + 1));
        let live = dir.join(&mine);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let zpid = child.id();
        // Not reaped yet: a zombie once it has exited.
        while proc_start_time(&zpid.to_string()).is_some_and(|(st, _)| st != 'Z') {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let (_, zstart) = proc_start_time(&zpid.to_string()).unwrap();
        let zombie = dir.join(format!(".a.json.tmp-{zpid}-{zstart}-0"));
        for p in [&reused, &live, &zombie] {
            fs::write(p, b"half").unwrap();
        }
        remove_stale_temps_of(&dir.join("a.json"));
        child.wait().unwrap();
        assert!(!reused.exists(), "a temp of a reused pid was kept");
        assert!(!zombie.exists(), "a zombie writer's temp was kept");
        assert!(live.exists(), "a live writer's temp was removed");
        fs::remove_dir_all(&dir).unwrap();
    }
}

//! The lease store, in host-local's on-disk format so a node can switch between host-local and
//! tern-ipam in either direction (containernetworking/plugins, `host-local/backend/disk`):
//!
//! - the directory `<dataDir>/<network>` (mode 0755);
//! - `lock`: an empty file; every operation holds an exclusive `flock(2)` on it, the same lock
//!   host-local takes, so the two plugins exclude each other;
//! - one file per leased address, named by the address (`10.1.2.3`, `2001:db8::5`), mode 0600,
//!   holding `<containerID>\r\n<ifname>` with no trailing newline; files written by old host-local
//!   versions hold only the container ID ("legacy") and are honoured;
//! - `last_reserved_ip.<rangeSetIndex>`: the last address handed out from that range set.
//!
//! Invariants: every method runs with the lock held (a [`Store`] *is* the held lock; dropping it
//! unlocks). A lease file is either absent or complete: it is written as a file with no name
//! (`O_TMPFILE`) and linked into place, which refuses to replace, so a crash leaves nothing; where
//! the filesystem has no `O_TMPFILE`, it is written to a temp file and renamed into place with
//! `RENAME_NOREPLACE` (or linked), so a crash leaves at most a stale temp file, which the next
//! locked operation removes. The lock is an
//! `flock`, which the kernel drops when its holder dies, so a killed plugin never blocks the next.
//!
//! Durability: none is paid for (no fsync of a lease, the cursor or the directory; host-local does
//! none either). Only a power loss or a kernel crash can lose what the page cache holds, and after
//! one no pod of this boot survives: every lease then names a dead attachment, whatever its
//! content. A lost rename means "no lease"; a lost unlink, or a lease left empty or torn, is held
//! by no valid attachment, so the runtime's GC releases it (an empty file reads as a legacy lease
//! of container ID "", which is never valid). A process crash loses nothing: the rename is atomic
//! and the page cache outlives the process. This keeps tern's ADD free of fsync (it was ≈0.5 ms
//! of an idle ADD and 5 ms p50 with other builds writing to the same ext4 journal).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::config::StoreLocation;
use crate::error::IpamError;

mod lease;
mod write;

pub use lease::{Lease, Owner, LINE_BREAK};

/// The lock file's name inside the network directory.
pub const LOCK_FILE: &str = "lock";
/// Prefix of the per-range-set round-robin cursor files.
pub const LAST_RESERVED_PREFIX: &str = "last_reserved_ip.";

/// The lease size read into one reused buffer (4 KiB); a longer file is read by [`read_long`].
/// A lease is `<containerID>\r\n<ifname>`: ifnames are at most 15 bytes, runtimes' container
/// IDs 64.
const LEASE_MAX_BYTES: usize = 4096;

/// The most of a lease file read (1 MiB): past it the file is skipped as unreadable. Without a
/// bound a lease that never ends (a symlink to `/dev/zero`) was read until memory ran out.
const LEASE_READ_LIMIT: u64 = 1 << 20;

/// Reads a lease longer than [`LEASE_MAX_BYTES`], up to [`LEASE_READ_LIMIT`].
fn read_long(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    tern_node::fs::open_nonblocking(path)?
        .take(LEASE_READ_LIMIT + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > LEASE_READ_LIMIT {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("longer than {LEASE_READ_LIMIT} bytes"),
        ));
    }
    Ok(bytes)
}

/// Opens the network directory, `O_DIRECTORY`: anything else there fails at once with
/// `ENOTDIR` (a FIFO opened plainly would block until a writer came).
fn open_dir(dir: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY)
        .open(dir)
}

/// The network directory with its lock held.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    dir_file: File,
    _lock: Flock<File>,
}

impl Store {
    /// Creates `<dataDir>/<network>` if needed (mode 0755) and takes the lock, waiting for it.
    ///
    /// # Errors
    /// [`IpamError::Store`] naming the directory or lock file and the OS error.
    pub fn open(loc: &StoreLocation) -> Result<Store, IpamError> {
        let dir = loc.data_dir.join(&loc.name);
        // Made only when missing (the first ADD of a network), not on every ADD.
        let dir_file = match open_dir(&dir) {
            Ok(f) => f,
            Err(_) => {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(&dir)
                    .map_err(|e| IpamError::store("create directory", &dir, e))?;
                open_dir(&dir).map_err(|e| IpamError::store("open directory", &dir, e))?
            }
        };
        Store::lock_in(dir, dir_file)
    }

    /// Like [`Store::open`], but `None` when the network directory does not exist (DEL and GC
    /// have nothing to do then and must not create it).
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_existing(loc: &StoreLocation) -> Result<Option<Store>, IpamError> {
        let dir = loc.data_dir.join(&loc.name);
        match fs::metadata(&dir) {
            Ok(m) if m.is_dir() => Store::lock(dir).map(Some),
            Ok(_) => Err(IpamError::store(
                "open directory",
                &dir,
                io::Error::from_raw_os_error(Errno::ENOTDIR as i32),
            )),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(IpamError::store("open directory", &dir, e)),
        }
    }

    fn lock(dir: PathBuf) -> Result<Store, IpamError> {
        let dir_file = open_dir(&dir).map_err(|e| IpamError::store("open directory", &dir, e))?;
        Store::lock_in(dir, dir_file)
    }

    fn lock_in(dir: PathBuf, dir_file: File) -> Result<Store, IpamError> {
        let lock_path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| IpamError::store("open lock file", &lock_path, e))?;
        let lock = loop {
            match Flock::lock(file, FlockArg::LockExclusive) {
                Ok(l) => break l,
                Err((f, Errno::EINTR)) => file = f,
                Err((_, errno)) => {
                    return Err(IpamError::store(
                        "lock",
                        &lock_path,
                        io::Error::from_raw_os_error(errno as i32),
                    ))
                }
            }
        };
        tern_node::phase::mark("lease-lock");
        Ok(Store {
            dir,
            dir_file,
            _lock: lock,
        })
    }

    /// The network directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every lease, ordered by file name (host-local walks the directory in that order). Files
    /// whose name is not an address (`lock`, `last_reserved_ip.*`, temp files) are not leases;
    /// unreadable files are skipped, as host-local does; bytes that are not UTF-8 are read as
    /// U+FFFD (an owner of no valid attachment).
    ///
    /// # Errors
    /// [`IpamError::Store`] when the directory cannot be listed.
    pub fn leases(&self) -> Result<Vec<Lease>, IpamError> {
        self.scan(false)
    }

    /// [`Store::leases`], and the temp files of tern-ipam processes killed mid-write removed (the
    /// rule of `tern_node::fs::remove_stale_temps`), in one walk of the directory (ADD and GC do
    /// both; a second listing was ≈4 syscalls more per ADD).
    ///
    /// # Errors
    /// As [`Store::leases`].
    pub fn leases_swept(&self) -> Result<Vec<Lease>, IpamError> {
        self.scan(true)
    }

    fn scan(&self, sweep: bool) -> Result<Vec<Lease>, IpamError> {
        let entries =
            fs::read_dir(&self.dir).map_err(|e| IpamError::store("list", &self.dir, e))?;
        let mut names: Vec<(String, IpAddr)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                if sweep && tern_node::fs::remove_if_stale_temp(&self.dir, &name) {
                    return None;
                }
                let ip = name.parse::<IpAddr>().ok()?;
                Some((name, ip))
            })
            .collect();
        names.sort();
        let mut leases = Vec::with_capacity(names.len());
        let mut buf = vec![0u8; LEASE_MAX_BYTES];
        for (file_name, ip) in names {
            let path = self.dir.join(&file_name);
            // Bytes that are not UTF-8 are kept as U+FFFD: such an owner equals no container ID
            // or ifname (both ASCII), as in host-local's byte comparison, so GC releases the
            // lease instead of keeping a file it cannot read as text for good.
            let content = match tern_node::fs::read_small_at(&self.dir_file, &file_name, &mut buf) {
                Ok(bytes) => Ok(String::from_utf8_lossy(bytes).into_owned()),
                // Longer than any lease tern-ipam or host-local writes: read it all the same.
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    read_long(&path).map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                }
                Err(e) => Err(e),
            };
            match content {
                Ok(content) => leases.push(Lease {
                    ip,
                    file_name,
                    owner: Owner::parse(&content),
                }),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "unreadable lease skipped")
                }
            }
        }
        Ok(leases)
    }

    /// Reserves `ip` for (`id`, `ifname`) from range set `range_set`: `Ok(false)` when the address
    /// is already leased. On success also records `ip` in `last_reserved_ip.<range_set>`.
    ///
    /// # Errors
    /// [`IpamError::Store`] when the lease cannot be written; nothing is left behind then.
    pub fn reserve(
        &self,
        ip: IpAddr,
        id: &str,
        ifname: &str,
        range_set: usize,
    ) -> Result<bool, IpamError> {
        let name = ip.to_string();
        let content = format!("{}{LINE_BREAK}{ifname}", id.trim());
        let placed = match self.create_unnamed(&name, content.as_bytes()) {
            Some(placed) => placed,
            None => self.create_through_temp(&name, content.as_bytes()),
        };
        match placed {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(e) => return Err(e),
        }
        tern_node::phase::mark("lease-rename");
        let last = format!("{LAST_RESERVED_PREFIX}{range_set}");
        if let Err(e) = self.replace_unsynced(&last, name.as_bytes()) {
            // The lease stands; losing the round-robin cursor only restarts the scan.
            tracing::warn!(file = %last, error = %e, "cannot record last reserved address");
        }
        tern_node::phase::mark("cursor-write");
        Ok(true)
    }

    /// The address recorded in `last_reserved_ip.<range_set>`, if readable.
    pub fn last_reserved_ip(&self, range_set: usize) -> Option<IpAddr> {
        let p = self.dir.join(format!("{LAST_RESERVED_PREFIX}{range_set}"));
        // An address is at most 45 bytes; anything longer is no cursor.
        let mut buf = [0u8; 64];
        let text = tern_node::fs::read_small(&p, &mut buf).ok()?;
        std::str::from_utf8(text).ok()?.trim().parse().ok()
    }

    /// Removes the lease file of `lease`; already gone counts as success.
    ///
    /// # Errors
    /// [`IpamError::Store`] for any other failure.
    pub fn remove(&self, lease_file: &str) -> Result<(), IpamError> {
        let p = self.dir.join(lease_file);
        tern_node::fs::remove_if_exists(&p).map_err(|e| IpamError::store("remove", &p, e))
    }

    /// The leases of (`id`, `ifname`); when there are none, the legacy leases of `id`
    /// (host-local's `FindByID` / `ReleaseByID` order).
    ///
    /// # Errors
    /// As [`Store::leases`].
    pub fn leases_of(&self, id: &str, ifname: &str) -> Result<Vec<Lease>, IpamError> {
        let all = self.leases()?;
        let exact: Vec<Lease> = all
            .iter()
            .filter(|l| l.owner.is_attachment(id, ifname))
            .cloned()
            .collect();
        if !exact.is_empty() {
            return Ok(exact);
        }
        Ok(all
            .into_iter()
            .filter(|l| l.owner.is_legacy_of(id))
            .collect())
    }
}

#[cfg(test)]
mod tests;

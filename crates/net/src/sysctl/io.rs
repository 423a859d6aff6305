//! Reading and writing sysctl files, in a network namespace or in the caller's own.
//!
//! Invariants: files are opened `O_NOFOLLOW | O_CLOEXEC` and never with `O_CREAT`; values are
//! written verbatim at offset 0 (`pwrite`, so `kernel.sysctl_writes_strict` never sees a
//! non-zero position); a read value has one trailing newline removed.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

use nix::errno::Errno;

use super::key::{SysctlKey, SysctlValue};
use crate::error::{Error, Result};
use crate::netns::NetNs;

fn errno_of(e: &std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

fn open(key: &SysctlKey, write: bool) -> Result<File> {
    let path = key.path();
    OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| match errno_of(&e) {
            Errno::ENOENT => Error::SysctlMissing {
                key: key.raw().to_string(),
                path: path.clone(),
            },
            errno => Error::SysctlRead {
                key: key.raw().to_string(),
                path: path.clone(),
                errno,
            },
        })
}

fn read_file(key: &SysctlKey, file: &mut File) -> Result<String> {
    let mut s = String::new();
    file.read_to_string(&mut s).map_err(|e| Error::SysctlRead {
        key: key.raw().to_string(),
        path: key.path(),
        errno: errno_of(&e),
    })?;
    if s.ends_with('\n') {
        s.pop();
    }
    Ok(s)
}

fn write_file(file: &File, value: &str) -> std::result::Result<(), Errno> {
    let n = file
        .write_at(value.as_bytes(), 0)
        .map_err(|e| errno_of(&e))?;
    if n != value.len() {
        return Err(Errno::EIO);
    }
    Ok(())
}

/// Reads `key` back through `file` and writes `previous` when it differs: the repair after a
/// write that failed part-way.
fn restore_if_changed(
    key: &SysctlKey,
    file: &File,
    previous: &str,
) -> std::result::Result<(), Errno> {
    let mut now = String::new();
    let mut reader = file;
    std::io::Seek::seek(&mut reader, std::io::SeekFrom::Start(0)).map_err(|e| errno_of(&e))?;
    reader.read_to_string(&mut now).map_err(|e| errno_of(&e))?;
    if now.strip_suffix('\n').unwrap_or(&now) == previous {
        return Ok(());
    }
    tracing::warn!(key = key.raw(), now = %now.trim_end(), previous, "failed write changed the value: restoring it");
    write_file(file, previous)
}

fn read_here(keys: &[SysctlKey]) -> Result<Vec<String>> {
    keys.iter()
        .map(|k| {
            let mut f = open(k, false)?;
            read_file(k, &mut f)
        })
        .collect()
}

/// Writes every value in order, having first opened every file and read its current value
/// (so a missing key fails before anything is written). On a failed write, the failed key is read
/// back and restored if the write changed it anyway, then the earlier ones are restored in
/// reverse order.
fn write_here(items: &[(SysctlKey, SysctlValue)]) -> Result<Vec<(SysctlKey, String)>> {
    write_opened(open_all(items)?)
}

/// Every item's file opened for writing, with the value it holds now.
type Opened<'a> = Vec<(&'a SysctlKey, &'a SysctlValue, File, String)>;

fn open_all(items: &[(SysctlKey, SysctlValue)]) -> Result<Opened<'_>> {
    let mut opened = Vec::with_capacity(items.len());
    for (key, value) in items {
        let mut f = open(key, true)?;
        let previous = read_file(key, &mut f)?;
        opened.push((key, value, f, previous));
    }
    Ok(opened)
}

/// The writes of [`write_here`], on files [`open_all`] opened.
fn write_opened(opened: Opened<'_>) -> Result<Vec<(SysctlKey, String)>> {
    for (i, (key, value, file, previous)) in opened.iter().enumerate() {
        if let Err(errno) = write_file(file, value.as_str()) {
            let mut rollback_failures = Vec::new();
            // A failed write may still have changed the value: the kernel stores what it parsed
            // before the character it refused (a multi-value sysctl keeps its first fields).
            if let Err(e) = restore_if_changed(key, file, previous) {
                rollback_failures.push((key.raw().to_string(), e));
            }
            for (k, _, f, prev) in opened[..i].iter().rev() {
                if let Err(e) = write_file(f, prev) {
                    rollback_failures.push((k.raw().to_string(), e));
                }
            }
            return Err(Error::SysctlWrite {
                key: key.raw().to_string(),
                value: value.as_str().to_string(),
                path: key.path(),
                errno,
                rollback_failures,
            });
        }
        tracing::debug!(key = key.raw(), value = value.as_str(), "sysctl written");
    }
    Ok(opened
        .into_iter()
        .map(|(k, _, _, prev)| (k.clone(), prev))
        .collect())
}

/// Reads `keys` inside `netns`, in order, each with one trailing newline removed (multi-value
/// sysctls keep the kernel's tabs).
///
/// # Errors
/// [`Error::SysctlMissing`] when a key does not exist in the namespace; [`Error::SysctlRead`];
/// [`Error::Setns`] when the namespace cannot be entered.
pub fn read(netns: &NetNs, keys: &[SysctlKey]) -> Result<Vec<String>> {
    let r = netns.run_in(|| read_here(keys));
    tern_node::phase::mark("sysctl-read(netns)");
    r?
}

/// Writes every `(key, value)` inside `netns` on one thread, in order, and returns the previous
/// values (for backup and restore). All files are opened and read before the first write; if a
/// write fails, the failed key (read back: the kernel may have stored part of the value) and the
/// writes before it are restored and nothing stays changed.
///
/// # Errors
/// [`Error::SysctlMissing`] (nothing written) when a key does not exist in the namespace, e.g. a
/// host-only key such as `net.core.netdev_max_backlog`; [`Error::SysctlWrite`] naming key, value
/// and errno (EINVAL: the kernel rejected the value) after rolling back; [`Error::Setns`].
pub fn write_all(
    netns: &NetNs,
    items: &[(SysctlKey, SysctlValue)],
) -> Result<Vec<(SysctlKey, String)>> {
    let r = netns.run_in(|| write_here(items));
    tern_node::phase::mark("sysctl-write(netns)");
    r?
}

/// [`write_all`] with a step between reading and writing, all on one thread inside `netns` (one
/// namespace entry, where [`read`] then [`write_all`] take two): every file is opened and its
/// current value read, `before` gets those values in `items`' order and returns, per item,
/// whether to write it (tern-tuning saves its backup there, before the first write, and leaves
/// alone a value the runtime set; it runs inside `netns`, which changes nothing for files outside
/// `/proc/sys/net`), then the chosen values are written as [`write_all`] writes them. Returns the
/// previous values of the items written.
///
/// # Errors
/// As [`write_all`], with nothing written when a file cannot be opened or read; `Ok(Err(e))`
/// when `before` fails (nothing written).
pub fn write_all_after<E: Send>(
    netns: &NetNs,
    items: &[(SysctlKey, SysctlValue)],
    before: impl FnOnce(Vec<String>) -> std::result::Result<Vec<bool>, E> + Send,
) -> Result<std::result::Result<Vec<(SysctlKey, String)>, E>> {
    let r = netns.run_in(|| -> Result<std::result::Result<_, E>> {
        let opened = open_all(items)?;
        let chosen = match before(opened.iter().map(|o| o.3.clone()).collect()) {
            Ok(chosen) => chosen,
            Err(e) => return Ok(Err(e)),
        };
        let opened = opened
            .into_iter()
            .zip(chosen.into_iter().chain(std::iter::repeat(true)))
            .filter_map(|(o, write)| write.then_some(o))
            .collect();
        write_opened(opened).map(Ok)
    });
    tern_node::phase::mark("sysctl-read+write(netns)");
    r?
}

/// Reads `keys` in a new, empty network namespace ([`crate::netns::run_in_new`]): the values a
/// netns has when it is created — the kernel's defaults, or init_net's for what a new netns
/// inherits (IPv4 `conf/all` and `conf/default` with `net.core.devconf_inherit_init_net` 0).
/// `None` for a key a new netns does not have (an interface's, or a module's not loaded).
///
/// # Errors
/// [`Error::Setns`] when no namespace can be created (EPERM without CAP_SYS_ADMIN);
/// [`Error::SysctlRead`] for a key that exists but cannot be read.
pub fn read_fresh(keys: &[SysctlKey]) -> Result<Vec<Option<String>>> {
    let r = crate::netns::run_in_new(|| {
        keys.iter()
            .map(|k| match read_here(std::slice::from_ref(k)) {
                Ok(mut v) => Ok(v.pop()),
                Err(Error::SysctlMissing { .. }) => Ok(None),
                Err(e) => Err(e),
            })
            .collect::<Result<Vec<_>>>()
    });
    tern_node::phase::mark("sysctl-read(new netns)");
    r?
}

/// Writes every `(key, value)` inside `netns` on one thread, each independently (best effort, for
/// restoring backups on DEL): a failure does not stop the others. Returns the failures; a key
/// whose file no longer exists (its interface is gone) is skipped, not a failure.
///
/// # Errors
/// [`Error::Setns`] when the namespace cannot be entered; per-key failures are in the `Vec`.
pub fn restore(netns: &NetNs, items: &[(SysctlKey, SysctlValue)]) -> Result<Vec<Error>> {
    netns.run_in(|| {
        items
            .iter()
            .filter_map(|item| match write_here(std::slice::from_ref(item)) {
                Ok(_) | Err(Error::SysctlMissing { .. }) => None,
                Err(e) => Some(e),
            })
            .collect()
    })
}

/// Reads one sysctl in the calling thread's network namespace (host side of the main plugin).
///
/// # Errors
/// As [`read`].
pub fn read_host(key: &SysctlKey) -> Result<String> {
    let v = read_here(std::slice::from_ref(key));
    tern_node::phase::mark("sysctl-read");
    Ok(v?.pop().unwrap_or_default())
}

/// Writes one sysctl in the calling thread's network namespace and returns its previous value
/// (e.g. `net.ipv4.conf.IFNAME.proxy_arp` on the host veth, `net.ipv4.ip_forward`).
///
/// # Errors
/// As [`write_all`].
pub fn write_host(key: &SysctlKey, value: &SysctlValue) -> Result<String> {
    let prev = write_here(&[(key.clone(), value.clone())]);
    tern_node::phase::mark("sysctl-write");
    Ok(prev?.pop().map(|(_, v)| v).unwrap_or_default())
}

/// Writes one sysctl in the calling thread's network namespace unless it already holds `value`
/// (compared after trimming the kernel's trailing newline); returns whether it wrote. Saves a
/// write per call where the value is nearly always set already (`net.ipv4.ip_forward` on a node).
///
/// # Errors
/// As [`read_host`] and [`write_host`].
pub fn ensure_host(key: &SysctlKey, value: &SysctlValue) -> Result<bool> {
    if read_host(key)?.trim() == value.as_str() {
        return Ok(false);
    }
    write_host(key, value)?;
    Ok(true)
}

//! The network-namespace seam: the only code in tern that calls `setns` or `unshare`.
//!
//! Threading model (after the reference plugins' `pkg/ns/README.md`, without its pitfalls), one
//! of two per process:
//! - **A fresh thread per entry** (the default: tern-agent, most tests): code that must run inside
//!   a namespace runs on a *fresh* scoped thread that enters the namespace, runs one closure and
//!   ends. The thread never switches back and never serves other work, so no thread of the
//!   process is ever left in the wrong namespace, whatever the closure does (including
//!   panicking).
//! - **The calling thread** ([`enter_on_calling_thread`], which tern's and tern-tuning's `main`
//!   call: a plugin process lives for one verb): the calling thread enters, runs the closure (a
//!   panic is caught), and switches back to the namespace it had before its first entry, held
//!   open from then on. Before its first entry the thread switches to that namespace once, a
//!   no-op that checks it may come back (setns(2) needs CAP_SYS_ADMIN over the namespace's user
//!   namespace); a thread that may not keeps the fresh thread per entry. A switch back that
//!   fails after all aborts the process, so no later step runs in the wrong namespace. In a new
//!   process a thread costs more than the work (its stack, the wake-up on the other CPU): 48–68
//!   µs against 22 µs for an entry, a netlink socket and the way back (docs/BENCHMARKS.md, "the
//!   plugins enter namespaces on the calling thread"). An entry inside an entry returns to the
//!   namespace it was entered from.
//!
//! The calling thread's namespace is read from `/proc/thread-self/ns/net`, never `/proc/self`
//! (which names the main thread's).
//!
//! Prefer opening a netlink socket inside once ([`crate::netlink::Handle::in_netns`]) and
//! driving it from the calling thread; enter a namespace otherwise only for `/proc/sys/net`,
//! which resolves against the namespace of the thread that opens the file.
#![allow(unsafe_code)] // one ioctl(NS_GET_NSTYPE), see `ns_type`

use std::cell::{Cell, OnceCell};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::sys::stat::fstat;
use nix::sys::statfs::{fstatfs, NSFS_MAGIC};

use crate::error::{Error, Result};

/// Where the calling thread's network namespace is visible (proc(5), `/proc/thread-self`).
pub const THREAD_SELF_NETNS: &str = "/proc/thread-self/ns/net";

/// Whether this process enters namespaces on the calling thread ([`enter_on_calling_thread`]).
static ON_CALLING_THREAD: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The thread's network namespace before its first entry on the calling-thread path, where
    /// every entry returns (opened once: the seam alone switches namespaces); `None` when the
    /// thread may not switch back to it (its entries take a fresh thread).
    static HOME: OnceCell<Option<File>> = const { OnceCell::new() };
    /// How many entries of the calling-thread path the thread is inside.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// `NS_GET_NSTYPE` from linux/nsfs.h: `_IO(0xb7, 0x3)` (kernel ≥ 4.11).
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// An open network namespace: a file descriptor on an nsfs inode, plus the path it was opened
/// from (for messages).
///
/// Holding the descriptor keeps the namespace alive even if its bind mount is removed.
#[derive(Debug)]
pub struct NetNs {
    file: File,
    path: PathBuf,
}

impl NetNs {
    /// Opens the network namespace at `path` (e.g. `/run/netns/x`, `/proc/<pid>/ns/net`) and
    /// checks that it is one: the file lives on nsfs (`fstatfs` = `NSFS_MAGIC`) and its namespace
    /// type is `CLONE_NEWNET` (`ioctl(NS_GET_NSTYPE)`, see ioctl_ns(2)).
    ///
    /// # Errors
    /// [`Error::NetnsNotFound`] when the path does not exist (DEL treats it as gone);
    /// [`Error::NotANetns`] when it is not a network namespace (an unmounted bind-mount target,
    /// a mount namespace...); [`Error::NetnsIo`] for other failures.
    pub fn open(path: impl AsRef<Path>) -> Result<NetNs> {
        let path = path.as_ref().to_path_buf();
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NetnsNotFound { path })
            }
            Err(e) => {
                return Err(Error::NetnsIo {
                    op: "open",
                    path,
                    errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
                })
            }
        };
        let fs = fstatfs(&file).map_err(|errno| Error::NetnsIo {
            op: "fstatfs",
            path: path.clone(),
            errno,
        })?;
        if fs.filesystem_type() != NSFS_MAGIC {
            return Err(Error::NotANetns {
                path,
                reason: format!("file system type {:#x}, not nsfs", fs.filesystem_type().0),
            });
        }
        let ty = ns_type(file.as_fd()).map_err(|errno| Error::NetnsIo {
            op: "ioctl(NS_GET_NSTYPE)",
            path: path.clone(),
            errno,
        })?;
        if ty != libc::CLONE_NEWNET {
            return Err(Error::NotANetns {
                path,
                reason: format!("namespace type {ty:#x}, not CLONE_NEWNET"),
            });
        }
        Ok(NetNs { file, path })
    }

    /// Opens the calling thread's network namespace (`/proc/thread-self/ns/net`).
    ///
    /// # Errors
    /// As [`NetNs::open`]; fails only if /proc is not mounted.
    pub fn current() -> Result<NetNs> {
        NetNs::open(THREAD_SELF_NETNS)
    }

    /// The path this namespace was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True when this is the calling thread's network namespace (same device and inode as
    /// `/proc/thread-self/ns/net`). Used to refuse `CNI_NETNS` equal to the plugin's own netns
    /// (CNI error code 8, `ErrInvalidNetNS` in the reference library).
    ///
    /// # Errors
    /// [`Error::NetnsIo`] when either file cannot be `fstat`ed.
    pub fn is_current(&self) -> Result<bool> {
        let current = NetNs::current()?;
        self.same_as(&current)
    }

    /// True when both handles name the same namespace (same `st_dev` and `st_ino`).
    ///
    /// # Errors
    /// [`Error::NetnsIo`] when either file cannot be `fstat`ed.
    pub fn same_as(&self, other: &NetNs) -> Result<bool> {
        let a = self.stat()?;
        let b = other.stat()?;
        Ok(a == b)
    }

    fn stat(&self) -> Result<(u64, u64)> {
        let st = fstat(&self.file).map_err(|errno| Error::NetnsIo {
            op: "fstat",
            path: self.path.clone(),
            errno,
        })?;
        #[allow(clippy::unnecessary_cast)] // st_dev/st_ino widths differ between targets
        Ok((st.st_dev as u64, st.st_ino as u64))
    }

    /// Runs `f` inside this network namespace and returns its value: on a fresh thread that
    /// ends when `f` returns, or on the calling thread, which then switches back, after
    /// [`enter_on_calling_thread`] (the module docs). Either way no thread is left in the wrong
    /// namespace, and a panic in `f` is resumed on the calling thread.
    ///
    /// Use it for work that resolves against the calling thread's namespace: opening files under
    /// `/proc/sys/net`, or opening a netlink socket (then drive the socket from anywhere).
    ///
    /// # Errors
    /// [`Error::Setns`] when the thread cannot enter the namespace (EPERM without
    /// CAP_SYS_ADMIN); [`Error::Thread`] when no thread can be spawned; [`Error::NetnsIo`] when,
    /// for an entry inside an entry on the calling thread, the namespace to come back to cannot
    /// be opened. Errors of `f` are in `T`.
    pub fn run_in<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        entered(&self.path, f, || {
            // The only setns into a target in tern (clippy.toml disallows it elsewhere): this
            // thread ends after `f`, or comes back, see the module docs.
            #[allow(clippy::disallowed_methods)]
            nix::sched::setns(&self.file, CloneFlags::CLONE_NEWNET)
        })
    }
}

/// Runs `f` inside a new, empty network namespace of its own (`unshare(CLONE_NEWNET)`), on a
/// fresh thread or on the calling thread as [`NetNs::run_in`] does; the kernel frees the
/// namespace when `f` is done (nothing holds it then): what a netns holds at
/// creation (tern-tuning reads the sysctls a runtime may have changed before the chain against
/// it). Creating the namespace costs about 1–4 ms (median 3.9 ms on the 2-core test VM under load).
///
/// # Errors
/// [`Error::Setns`] (path `unshare(CLONE_NEWNET)`) when the thread cannot get a namespace (EPERM
/// without CAP_SYS_ADMIN); [`Error::Thread`]. Errors of `f` are in `T`.
pub fn run_in_new<T: Send>(f: impl FnOnce() -> T + Send) -> Result<T> {
    entered(Path::new("unshare(CLONE_NEWNET)"), f, || {
        // The seam's one unshare (clippy.toml disallows it elsewhere), as in `run_in`.
        #[allow(clippy::disallowed_methods)]
        nix::sched::unshare(CloneFlags::CLONE_NEWNET)
    })
}

/// Makes this process enter namespaces on the calling thread from now on (the module docs):
/// for a process that lives for one CNI verb, as `tern_cni::plugin_main` is. A long-lived
/// process (tern-agent) keeps the fresh thread per entry.
pub fn enter_on_calling_thread() {
    ON_CALLING_THREAD.store(true, Ordering::Relaxed);
}

/// Runs `enter` then `f` by the process's model (the module docs); `what` names the namespace in
/// errors.
fn entered<T: Send>(
    what: &Path,
    f: impl FnOnce() -> T + Send,
    enter: impl FnOnce() -> nix::Result<()> + Send,
) -> Result<T> {
    if ON_CALLING_THREAD.load(Ordering::Relaxed) {
        if let Some(home) = home() {
            return on_calling_thread(what, f, enter, home);
        }
    }
    on_own_thread(what, f, enter)
}

/// The calling thread's [`HOME`] when it may switch back to it: on the first call the namespace
/// is opened and entered once (no change; the same permission checks as the way back).
fn home() -> Option<RawFd> {
    HOME.with(|home| {
        home.get_or_init(|| {
            let file = File::open(THREAD_SELF_NETNS).ok()?;
            // The probe: a switch to the namespace the thread is in.
            #[allow(clippy::disallowed_methods)]
            nix::sched::setns(&file, CloneFlags::CLONE_NEWNET).ok()?;
            Some(file)
        })
        .as_ref()
        .map(AsRawFd::as_raw_fd)
    })
}

/// Runs `enter` then `f` on the calling thread, then switches back: to `home`, the thread's
/// namespace from before its first entry ([`HOME`]), or for an entry inside an entry to the
/// namespace it was entered from (opened then). A panic in `f` is resumed after the switch back.
/// A switch back that fails aborts the process: nothing may run in the wrong namespace.
fn on_calling_thread<T>(
    what: &Path,
    f: impl FnOnce() -> T,
    enter: impl FnOnce() -> nix::Result<()>,
    home: RawFd,
) -> Result<T> {
    let depth = DEPTH.get();
    let outer = match depth {
        0 => None,
        _ => Some(File::open(THREAD_SELF_NETNS).map_err(|e| Error::NetnsIo {
            op: "open",
            path: PathBuf::from(THREAD_SELF_NETNS),
            errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        })?),
    };
    let back = outer.as_ref().map_or(home, AsRawFd::as_raw_fd);
    enter().map_err(|errno| Error::Setns {
        path: what.to_path_buf(),
        errno,
    })?;
    DEPTH.set(depth + 1);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    // SAFETY: `back` is `outer`'s descriptor, open until this function returns, or HOME's,
    // open for the thread's life (a thread-local never replaced).
    let back = unsafe { BorrowedFd::borrow_raw(back) };
    #[allow(clippy::disallowed_methods)] // the way back, see the module docs
    if let Err(errno) = nix::sched::setns(back, CloneFlags::CLONE_NEWNET) {
        // Not eprintln!: it panics when stderr fails (EPIPE, EIO), and a panic would unwind in
        // here.
        let _ = writeln!(
            std::io::stderr(),
            "tern: cannot return from {} to the thread's network namespace: {errno}; aborting",
            what.display()
        );
        std::process::abort();
    }
    DEPTH.set(depth);
    match r {
        Ok(v) => Ok(v),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Runs `enter` then `f` on a fresh scoped thread that ends after them (the module docs' model);
/// `what` names the namespace in errors.
fn on_own_thread<T: Send>(
    what: &Path,
    f: impl FnOnce() -> T + Send,
    enter: impl FnOnce() -> nix::Result<()> + Send,
) -> Result<T> {
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("tern-netns".into())
            .spawn_scoped(scope, || -> Result<T> {
                enter().map_err(|errno| Error::Setns {
                    path: what.to_path_buf(),
                    errno,
                })?;
                Ok(f())
            })
            .map_err(|source| Error::Thread {
                path: what.to_path_buf(),
                source,
            })?;
        match handle.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

impl AsFd for NetNs {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// The namespace type (`CLONE_NEW*`) of an nsfs file descriptor, from `ioctl(NS_GET_NSTYPE)`.
fn ns_type(fd: BorrowedFd<'_>) -> std::result::Result<i32, Errno> {
    // SAFETY: NS_GET_NSTYPE takes no argument and only reads the descriptor, which is valid for
    // the duration of the call because it is borrowed.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), NS_GET_NSTYPE as _) };
    Errno::result(ret)
}

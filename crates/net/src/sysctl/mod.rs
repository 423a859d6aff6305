//! Network-namespace sysctls: validated keys and values ([`SysctlKey`], [`SysctlValue`]), the
//! allowlist ([`Allowlist`]), and reading/writing them inside a namespace ([`read`],
//! [`write_all`]) or in the caller's own ([`read_host`], [`write_host`], [`ensure_host`]).
//!
//! Invariants:
//! - A [`SysctlKey`] always maps to a normalised path strictly under `/proc/sys/net/`: no empty,
//!   `.` or `..` segment exists after `IFNAME` substitution, so no spelling can leave the tree.
//! - Files are opened with `O_NOFOLLOW` and never created (no `O_CREAT`): a key that does not
//!   exist in the namespace is an error, never a new file.
//! - `/proc/sys/net` resolves against the network namespace of the thread that *opens* the file,
//!   so namespace reads and writes happen on a thread inside it ([`crate::netns::NetNs::run_in`]).

mod allowlist;
mod io;
mod key;

pub use allowlist::{Allowlist, DEFAULT_ALLOWLIST, DEFAULT_ALLOWLIST_PATH};
pub use io::{
    ensure_host, read, read_fresh, read_host, restore, write_all, write_all_after, write_host,
};
pub use key::{SysctlKey, SysctlValue, MAX_KEY_LEN, MAX_VALUE_LEN, SYSCTL_ROOT};

//! The crate's error type: every failure names the operation, the object and (for system calls)
//! the errno, so callers match on [`Error::errno`] rather than on message text.
//!
//! Mapping to CNI error codes lives in one place, [`Error::cni_code`]; plugins may refine it (for
//! example a plugin-specific code for `EEXIST` on a link) by matching on the variant first.

use std::path::PathBuf;

use nix::errno::Errno;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

use tern_cni::code;

/// Every error of `tern-net`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The netns path does not exist. DEL treats this as "already gone" ([`Error::is_netns_gone`]).
    #[error("network namespace {path} does not exist")]
    NetnsNotFound {
        /// The path that was opened.
        path: PathBuf,
    },
    /// The path exists but is not a network namespace (not nsfs, or another namespace type).
    #[error("{path} is not a network namespace ({reason})")]
    NotANetns {
        /// The path that was opened.
        path: PathBuf,
        /// What was found instead.
        reason: String,
    },
    /// A system call on a namespace file failed (open, fstat, fstatfs, ioctl).
    #[error("{op} network namespace {path}: {errno}")]
    NetnsIo {
        /// The operation, e.g. "open".
        op: &'static str,
        /// The namespace path.
        path: PathBuf,
        /// The errno.
        errno: Errno,
    },
    /// `setns(CLONE_NEWNET)` failed in the worker thread.
    #[error("enter network namespace {path}: {errno}")]
    Setns {
        /// The namespace path.
        path: PathBuf,
        /// The errno (EPERM: needs CAP_SYS_ADMIN; EINVAL: not a network namespace).
        errno: Errno,
    },
    /// The worker thread could not be spawned.
    #[error("spawn a thread for network namespace {path}: {source}")]
    Thread {
        /// The namespace path.
        path: PathBuf,
        /// The spawn error.
        source: std::io::Error,
    },
    /// A netlink request was answered with an error (or the socket failed with an errno).
    #[error("{op}: {}{}", Errno::from_raw(*errno), advice.map(|a| format!(" ({a})")).unwrap_or_default())]
    Netlink {
        /// What was asked, with its object, e.g. `create veth tern0 (peer eth0)`.
        op: String,
        /// The positive errno.
        errno: i32,
        /// Advice for the operator when the errno has a well-known cause here.
        advice: Option<&'static str>,
    },
    /// The kernel answered something this crate could not decode or did not expect.
    #[error("{op}: unexpected netlink answer: {reason}")]
    NetlinkProtocol {
        /// What was asked.
        op: String,
        /// What went wrong.
        reason: String,
    },
    /// A sysctl key breaks the key rules (see [`crate::sysctl::SysctlKey::parse`]).
    #[error("invalid sysctl key {key:?}: {reason}")]
    InvalidSysctlKey {
        /// The key as written.
        key: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// A sysctl value breaks the value rules (see [`crate::sysctl::SysctlValue::parse`]).
    #[error("invalid value {value:?} for sysctl {key}: {reason}")]
    InvalidSysctlValue {
        /// The key the value is for.
        key: String,
        /// The value as written.
        value: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The key is not matched by the allowlist.
    #[error("sysctl {key} is not allowed by {allowlist}; allowed: {patterns}")]
    SysctlNotAllowed {
        /// The key as written.
        key: String,
        /// Where the allowlist came from (its file, or "the built-in default").
        allowlist: String,
        /// The allowlist's patterns, comma-separated.
        patterns: String,
    },
    /// The allowlist file could not be used; nothing is allowed (fail closed).
    #[error("sysctl allowlist {path}: {reason}")]
    Allowlist {
        /// The allowlist path.
        path: PathBuf,
        /// Why it is unusable (a directory, unreadable, an invalid regex on line N).
        reason: String,
    },
    /// A sysctl does not exist in the target network namespace (host-only key, or a module or
    /// interface that is not there). Nothing is created under /proc/sys.
    #[error("sysctl {key} does not exist in this network namespace ({path}); it may be host-only or its interface may be missing")]
    SysctlMissing {
        /// The key as written.
        key: String,
        /// The file it maps to.
        path: PathBuf,
    },
    /// Reading or opening a sysctl failed.
    #[error("read sysctl {key} ({path}): {errno}")]
    SysctlRead {
        /// The key as written.
        key: String,
        /// The file it maps to.
        path: PathBuf,
        /// The errno.
        errno: Errno,
    },
    /// Writing a sysctl failed (the kernel rejected the value, usually EINVAL). Earlier writes of
    /// the same batch were rolled back; `rollback_failures` lists any that could not be.
    #[error(
        "write sysctl {key}={value:?} ({path}): {errno}{}",
        rollback_note(rollback_failures)
    )]
    SysctlWrite {
        /// The key as written.
        key: String,
        /// The value that was rejected.
        value: String,
        /// The file it maps to.
        path: PathBuf,
        /// The errno.
        errno: Errno,
        /// Keys whose rollback failed, with their errno (empty when rollback succeeded).
        rollback_failures: Vec<(String, Errno)>,
    },
}

fn rollback_note(failures: &[(String, Errno)]) -> String {
    if failures.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = failures.iter().map(|(k, e)| format!("{k}: {e}")).collect();
        format!(
            "; rolling back earlier writes failed too: {}",
            list.join(", ")
        )
    }
}

impl Error {
    /// The errno behind this error, when there is one (positive, e.g. `libc::EEXIST`).
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Netlink { errno, .. } => Some(*errno),
            Error::NetnsIo { errno, .. }
            | Error::Setns { errno, .. }
            | Error::SysctlRead { errno, .. }
            | Error::SysctlWrite { errno, .. } => Some(*errno as i32),
            Error::NetnsNotFound { .. } | Error::SysctlMissing { .. } => Some(libc::ENOENT),
            _ => None,
        }
    }

    /// True when the network namespace path does not exist: DEL treats that as "already gone"
    /// (CNI spec, section 2 "DEL": plugins must succeed when resources are already missing).
    pub fn is_netns_gone(&self) -> bool {
        matches!(self, Error::NetnsNotFound { .. })
    }

    /// True when the path no longer names a network namespace: it does not exist
    /// ([`Error::NetnsNotFound`]), or it is not one ([`Error::NotANetns`]: typically the plain
    /// file a removed bind mount leaves, `umount /run/netns/x`, case-27). DEL treats both as
    /// "nothing left inside to undo" and still releases what lives outside the netns; ADD and
    /// CHECK refuse both (code 8).
    pub fn is_netns_unusable(&self) -> bool {
        matches!(self, Error::NetnsNotFound { .. } | Error::NotANetns { .. })
    }

    /// True when the error is a rejected configuration (key, value, allowlist), i.e. the user
    /// must fix the network configuration.
    pub fn is_invalid_config(&self) -> bool {
        matches!(
            self,
            Error::InvalidSysctlKey { .. }
                | Error::InvalidSysctlValue { .. }
                | Error::SysctlNotAllowed { .. }
                | Error::Allowlist { .. }
                | Error::SysctlMissing { .. }
        )
    }

    /// The CNI error code this error maps to by default (CNI spec, section 5; tern's own codes
    /// from `tern_cni::code`):
    ///
    /// | error | code |
    /// |---|---|
    /// | invalid sysctl key or value, not allowed, unusable allowlist, key missing in the netns | 7 |
    /// | a kernel-rejected sysctl write (earlier writes rolled back) | 103 `SYSCTL_WRITE` |
    /// | netlink EAGAIN / EBUSY | 11 |
    /// | other netlink errors | 101 `NETLINK` |
    /// | netns not found or not a netns ([`Error::is_netns_unusable`]) | 8 `INVALID_NETNS` |
    /// | a system call on a netns file, setns failure, sysctl read failure | 5 |
    ///
    /// 8 is the reference library's `ErrInvalidNetNS` (`pkg/types`), the code tern's dispatcher
    /// gives a `CNI_NETNS` that is the plugin's own; this is the one place a plugin's bad netns
    /// gets it (ADD and CHECK refuse it; DEL and GC check [`Error::is_netns_unusable`] first and
    /// treat it as gone). Plugins give `EEXIST` on a link `INTERFACE_EXISTS` (100) by matching on
    /// [`Error::errno`] before calling this.
    pub fn cni_code(&self) -> u32 {
        match self {
            e if e.is_netns_unusable() => code::INVALID_NETNS,
            e if e.is_invalid_config() => code::INVALID_NETWORK_CONFIG,
            Error::SysctlWrite { .. } => code::SYSCTL_WRITE,
            Error::Netlink { errno, .. } if *errno == libc::EAGAIN || *errno == libc::EBUSY => {
                code::TRY_AGAIN_LATER
            }
            Error::Netlink { .. } | Error::NetlinkProtocol { .. } => code::NETLINK,
            _ => code::IO_FAILURE,
        }
    }

    /// This error as a CNI error result with [`Error::cni_code`] and the message.
    pub fn to_cni(&self) -> tern_cni::Error {
        tern_cni::Error::new(self.cni_code(), self.to_string())
    }
}

impl From<Error> for tern_cni::Error {
    fn from(e: Error) -> tern_cni::Error {
        e.to_cni()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_netns_is_code_8() {
        let missing = Error::NetnsNotFound {
            path: "/run/netns/gone".into(),
        };
        let plain = Error::NotANetns {
            path: "/run/netns/file".into(),
            reason: "not nsfs".into(),
        };
        assert_eq!(missing.cni_code(), code::INVALID_NETNS);
        assert_eq!(tern_cni::Error::from(plain).code, code::INVALID_NETNS);
    }
}

//! tern-ipam's errors and their single mapping to CNI error codes ([`IpamError::to_cni`]).
//!
//! Messages keep host-local's wording where users and tests match on it (allocation and range
//! validation texts, CONVENTIONS of `containernetworking/plugins/plugins/ipam/host-local`).

use std::io;
use std::path::PathBuf;

use tern_cni::{code, Error};

/// Everything tern-ipam can fail with.
#[derive(Debug, thiserror::Error)]
pub enum IpamError {
    /// The `ipam` section is invalid (host-local's messages, e.g. `no IP ranges specified`).
    #[error("{0}")]
    Config(String),
    /// A field has the wrong JSON type.
    #[error("failed to load netconf: {0}")]
    Decode(String),
    /// `CNI_ARGS` carries something unusable (e.g. `invalid IP address x` in `IP=`).
    #[error("{0}")]
    Args(String),
    /// `resolvConf` could not be read.
    #[error("read resolvConf {path}: {source}")]
    ResolvConf {
        /// The configured path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// An address could not be allocated; the message is host-local's, already prefixed with
    /// `failed to allocate for range <i>: ` or `failed to allocate all requested IPs:`.
    #[error("{0}")]
    Alloc(String),
    /// CHECK found no reservation for the attachment.
    #[error("{0}")]
    NotReserved(String),
    /// The store (the network's directory under `dataDir`) could not be used.
    #[error("{op} {path}: {source}")]
    Store {
        /// What was being done (`create`, `lock`, `read`, `remove`...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// usePodCidr: the node's podCIDRs are not known (API unreachable or refusing, none assigned
    /// yet, or not cached for a verb that must not call the API).
    #[error("{0}")]
    PodCidr(String),
    /// usePodCidr: `tern-lookup`, which reads the node, failed; its CNI code is kept (7 when it
    /// is not in `CNI_PATH`, 5/6 when it cannot run or answers nonsense, 11 when the API cannot
    /// answer or it was killed at its deadline).
    #[error("{msg}")]
    Lookup {
        /// The helper's (or the delegation's) CNI code.
        code: u32,
        /// The message, naming the node.
        msg: String,
    },
    /// STATUS: the plugin cannot serve ADD now.
    #[error("{0}")]
    NotAvailable(String),
    /// GC or DEL: some leases could not be released; every message, joined by `; `.
    #[error("{}", .0.join("; "))]
    Teardown(Vec<String>),
}

impl IpamError {
    /// A store error for `op` on `path`.
    pub fn store(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> IpamError {
        IpamError::Store {
            op,
            path: path.into(),
            source,
        }
    }

    /// The CNI error for this failure. Codes: 4 bad `CNI_ARGS`; 5 unreadable `resolvConf`; 6 wrong
    /// JSON types; 7 invalid configuration; 11 the node's podCIDRs are not known yet (usePodCidr);
    /// `tern-lookup`'s own code when it failed to read the node;
    /// 50 STATUS not available; 102 no address could be
    /// allocated, or CHECK found none; 104 the data directory could not be used.
    pub fn to_cni(&self) -> Error {
        let c = match self {
            IpamError::Config(_) => code::INVALID_NETWORK_CONFIG,
            IpamError::Decode(_) => code::DECODE_FAILURE,
            IpamError::Args(_) => code::INVALID_ENVIRONMENT,
            IpamError::ResolvConf { .. } => code::IO_FAILURE,
            IpamError::Alloc(_) | IpamError::NotReserved(_) => code::IPAM_NO_ADDRESS,
            IpamError::Store { .. } | IpamError::Teardown(_) => code::STATE_IO,
            IpamError::NotAvailable(_) => code::NOT_AVAILABLE,
            IpamError::PodCidr(_) => code::TRY_AGAIN_LATER,
            IpamError::Lookup { code, .. } => *code,
        };
        Error::new(c, self.to_string())
    }
}

impl From<IpamError> for Error {
    fn from(e: IpamError) -> Error {
        e.to_cni()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_has_its_code() {
        let io = || io::Error::from_raw_os_error(libc_eacces());
        let cases: Vec<(IpamError, u32)> = vec![
            (IpamError::Config("no IP ranges specified".into()), 7),
            (IpamError::Decode("x".into()), 6),
            (IpamError::Args("invalid IP address x".into()), 4),
            (
                IpamError::ResolvConf {
                    path: "/r".into(),
                    source: io(),
                },
                5,
            ),
            (IpamError::Alloc("failed".into()), 102),
            (IpamError::NotReserved("none".into()), 102),
            (IpamError::store("lock", "/d/lock", io()), 104),
            (IpamError::NotAvailable("ro".into()), 50),
            (IpamError::PodCidr("no podCIDRs".into()), 11),
            (IpamError::Teardown(vec!["a".into(), "b".into()]), 104),
        ];
        for (e, c) in cases {
            let cni = e.to_cni();
            assert_eq!(cni.code, c, "{e}");
            assert_eq!(cni.msg, e.to_string());
        }
        assert_eq!(
            IpamError::Teardown(vec!["a".into(), "b".into()]).to_string(),
            "a; b"
        );
    }

    fn libc_eacces() -> i32 {
        13
    }
}

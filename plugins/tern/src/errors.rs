//! The one place where tern's failures get their CNI codes (README, "Error codes").

use tern_cni::{code, Error};

/// Maps a `tern-net` error to a CNI error: netlink failures are 101 (the message names the
/// operation and errno), a missing or invalid netns is 8, sysctl rejections keep the crate's
/// mapping (7), and anything else falls back to the crate's code (never 999).
pub fn from_net(e: tern_net::Error) -> Error {
    let msg = e.to_string();
    let code = match &e {
        tern_net::Error::Netlink { .. } => code::NETLINK,
        tern_net::Error::NetnsNotFound { .. } | tern_net::Error::NotANetns { .. } => {
            code::INVALID_NETNS
        }
        other => match other.cni_code() {
            999 => code::NETLINK,
            c => c,
        },
    };
    Error::new(code, msg)
}

/// A state-file failure (code 104), naming what was being done.
pub fn state_io(what: &str, e: std::io::Error) -> Error {
    Error::new(code::STATE_IO, format!("{what}: {e}"))
}

//! The one place where tern's failures get their CNI codes (README, "Error codes").

use tern_cni::{code, Error};

/// Maps a `tern-net` error to a CNI error: the crate's mapping (netlink 101, sysctl 7/103), except
/// that an ADD or CHECK netns that is missing or not a netns is 8 (invalid `CNI_NETNS`).
pub fn from_net(e: tern_net::Error) -> Error {
    if e.is_netns_unusable() {
        Error::new(code::INVALID_NETNS, e.to_string())
    } else {
        e.to_cni()
    }
}

/// A state-file failure (code 104), naming what was being done.
pub fn state_io(what: &str, e: std::io::Error) -> Error {
    Error::new(code::STATE_IO, format!("{what}: {e}"))
}

//! tern's own CNI codes beside the shared mappings (README, "Error codes"): a `tern-net` error
//! gets its code from `tern_net::Error::cni_code` through `From` (a bad netns 8, as in every
//! plugin), an IPAM error keeps its own; here what only tern has.

use tern_cni::{code, Error};

/// A state-file failure (code 104), naming what was being done.
pub fn state_io(what: &str, e: std::io::Error) -> Error {
    Error::new(code::STATE_IO, format!("{what}: {e}"))
}

//! The IPAM delegate of every verb (ADD, DEL, CHECK, STATUS, GC), chosen in one place.
//!
//! `ipam.type` `tern-ipam` runs in-process: tern links the `tern_ipam` library, the code the
//! `tern-ipam` binary runs, and calls it through the same dispatcher with the same environment
//! and stdin, so the on-disk effects and the results are the binary's — without the exec (≈2 ms
//! per call on the machines measured; docs/decisions/0010). ADD with tern's own netconf skips even the
//! dispatcher (`Delegate::add_for`: tern's parsed input in, the result as the printed one would
//! read back). The plugin must still be in `CNI_PATH`, so a
//! node without it fails as it would with exec. Every other type is exec'd as the spec says.

use tern_cni::Delegate;

/// The IPAM type tern runs in-process.
pub const BUILTIN_IPAM: &str = "tern-ipam";

/// `d`, run in-process when it names [`BUILTIN_IPAM`].
pub fn delegate(d: Delegate<'_>) -> Delegate<'_> {
    if d.plugin_type == BUILTIN_IPAM {
        d.builtin(&tern_ipam::TernIpam)
    } else {
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tern_ipam_is_built_in() {
        let path = "/opt/cni/bin";
        assert!(delegate(Delegate::without_attachment("tern-ipam", path))
            .builtin
            .is_some());
        assert!(delegate(Delegate::without_attachment("host-local", path))
            .builtin
            .is_none());
    }
}

//! `tern-ipam`: the IPAM plugin binary; all logic lives in the `tern_ipam` library.

fn main() {
    tern_cni::plugin_main(&tern_ipam::TernIpam)
}

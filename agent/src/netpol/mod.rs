//! `tern-agent run --network-policy`: NetworkPolicy enforced in the kernel by one nftables table,
//! `inet tern_netpol`, on the forward path of this node's pods.
//!
//! The compiler is its own crate, `tern-netpol` (`crates/netpol`: the model, address sets, the
//! compiler and the table, no I/O). Here is what runs it: the controller (`controller.rs`: the
//! threads), its watch-layer subscribers (`watch.rs`), the syncer (`sync.rs`: compile, then one nft
//! transaction), pod admission for tern's ADD (`admit.rs`), the denied-flow log (`denied.rs`, its thread `report.rs`) and the metrics
//! (`metrics.rs`); the
//! flags and settings (`config.rs`) and the store they share (`store.rs`) are below them all.

pub mod admit;
pub mod config;
pub mod controller;
pub mod denied;
mod events;
pub mod metrics;
mod report;
pub mod store;
mod sync;
mod watch;

pub use admit::PodAdmission;
pub use config::{NetpolArgs, NetpolConfig};
pub use controller::NetpolController;
pub use store::NetpolStats;
pub use sync::elements::batch as element_batch;
pub use sync::elements::ops as table_batch;

// The table the compiler renders is the one a draining uninstall's finish removes
// (`tern_net::drain`, run by `tern-agent uninstall` and tern's DEL; tern-net does not depend on
// the compiler, nor the compiler on it): checked when the agent is built.
const _: () = {
    use tern_net::drain::{NETWORK_POLICY_FAMILY, NETWORK_POLICY_TABLE};

    const fn same(a: &str, b: &str) -> bool {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let mut i = 0;
        while i < a.len() {
            if a[i] != b[i] {
                return false;
            }
            i += 1;
        }
        true
    }
    assert!(same(tern_netpol::FAMILY, NETWORK_POLICY_FAMILY));
    assert!(same(tern_netpol::TABLE, NETWORK_POLICY_TABLE));
};

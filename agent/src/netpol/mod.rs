//! `tern-agent run --network-policy`: NetworkPolicy enforced in the kernel by one nftables table,
//! `inet tern_netpol`, on the forward path of this node's pods.
//!
//! Files: what the compiler reads (`model.rs`: Pods, Namespaces, NetworkPolicies from their
//! API JSON, label selectors), address sets with `except` cut out (`addrs.rs`), the compiler
//! (`compile.rs`: per local pod, what it may receive and send), the table and the script that
//! replaces it in one transaction (`ruleset.rs`). All four are pure. The controller
//! (`controller.rs`: the threads), its watchers (`watch.rs`), the syncer (`sync.rs`), pod
//! admission for tern's ADD (`admit.rs`) and the metrics (`metrics.rs`) run them in the agent;
//! the flags and settings (`config.rs`) and the store they share (`store.rs`) are below them all.

pub mod addrs;
pub mod admit;
pub mod compile;
pub mod config;
pub mod controller;
pub mod metrics;
pub mod model;
pub mod ruleset;
pub mod store;
mod sync;
mod watch;

pub use admit::PodAdmission;
pub use compile::{compile, Plan, World};
pub use config::{NetpolArgs, NetpolConfig};
pub use controller::NetpolController;
pub use ruleset::{FAMILY, TABLE};
pub use store::NetpolStats;

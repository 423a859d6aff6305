//! The NetworkPolicy compiler: what the Kubernetes API says a node's pods may receive and send,
//! as one nftables table, `inet tern_netpol` (tern-agent's `--network-policy` applies it).
//!
//! model → plan → ruleset: Pods, Namespaces, NetworkPolicies, ClusterNetworkPolicies
//! (`policy.networking.k8s.io/v1alpha2`: an Admin tier before NetworkPolicy, a Baseline tier
//! after it) and Nodes from their API JSON, and label selectors ([`model`]); address sets
//! with `except` cut out ([`addrs`]); per isolated pod of the node, what it may receive and
//! send ([`compile`]: a [`Plan`] of a [`World`]); the table of a
//! plan, the script that replaces it in one transaction and the one that changes only its
//! elements ([`ruleset`]). Beside them, [`trace`]: why one pod or address can or cannot reach a
//! pod, from the same model and by the same rules as the compiler.
//!
//! Invariant: no I/O. Nothing here runs a process, opens a socket or a file, reads a clock or
//! logs: every function is a function of its arguments. Applying a script, watching the API and
//! the node's state stay in tern-agent (`agent/src/netpol/`).

pub mod addrs;
pub mod compile;
pub mod engine;
pub mod model;
pub mod ruleset;
pub mod sets;
pub mod trace;

pub use compile::{compile, Plan, World};
pub use engine::{AsPod, Engine};
pub use ruleset::{FAMILY, TABLE};

//! Node-side plumbing that tern's plugins and tern-agent share, none of it the CNI protocol:
//! the plugin binaries' heap ([`alloc`]),
//! files a reader never sees half-written ([`fs`]), per-attachment locks and what a
//! per-attachment file name may be ([`lock`]), the plugins' log lines and `logFile` rotation
//! ([`logging`]), per-phase timing marks for `tern-bench --breakdown` ([`phase`]), and the
//! verb report's wire format, sent by the plugins and parsed by the agent ([`report`]), and the
//! version stamp every binary reports and `cargo xtask image --version` rewrites ([`version`]).
//!
//! What belongs here: code that runs on the node, on its files, sockets and clock, and that more
//! than one of the plugins, tern-net, tern-kube and the agent use. What does not: anything the
//! CNI specification defines (environment, netconf, versions, results, error codes, the
//! dispatcher: `tern-cni`, which builds on this crate), Linux networking (`tern-net`) and the
//! Kubernetes API (`tern-kube`). This crate depends on none of them; its errors are its own, and
//! each plugin maps them to CNI codes.

pub mod alloc;
pub mod fs;
pub mod lock;
pub mod logging;
pub mod phase;
pub mod report;
pub mod version;

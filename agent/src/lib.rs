//! tern-agent as a library: the node agent (`run`) and the installer (`install`, `uninstall`), exposed so the
//! tests can drive them in-process with a movable wall clock.
//!
//! Invariant: nothing here logs, returns or exposes a token except by writing the kubeconfig.

pub mod args;
pub mod cli;
pub mod clock;
pub mod config;
pub mod conflist;
pub mod egress;
pub mod install;
pub mod kubeconfig;
pub mod logging;
pub mod mint;
pub mod netpol;
pub mod node_cidrs;
pub mod plan;
mod prom;
pub mod routes;
pub mod run;
pub mod schedule;
pub mod status;
mod stop_signal;
pub mod trace;
pub mod uninstall;
mod watch;

pub use clock::{OffsetClock, SystemClock, WallClock};
pub use config::RunConfig;
pub use run::{Agent, Snapshot};

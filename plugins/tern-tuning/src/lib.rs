//! tern-tuning: the allowlisted meta plugin for network-namespace sysctls and link attributes,
//! a drop-in for the reference `tuning` plugin (same fields), safer: whole-key allowlist with a
//! built-in default, keys confined to `/proc/sys/net/`, validation before any write, rollback,
//! and restore of everything (sysctls included) on DEL.
//!
//! Modules: [`config`] (netconf, precedence, validation), [`add`], [`del`], [`check`],
//! [`status`], [`gc`] (CNI 1.1.0), [`backup`] (the per-attachment backup file), [`baseline`] (a new netns's sysctls: what the
//! runtime wrote before the chain), [`lock`] (checks
//! and the lock before a verb), [`peer`] (the host end of a pod veth, whose MTU follows the pod
//! end's), [`validate`] (`tern-tuning validate FILE`).

pub mod add;
pub mod backup;
pub mod baseline;
pub mod check;
pub mod config;
pub mod del;
pub mod gc;
pub mod lock;
pub mod peer;
pub mod status;
pub mod validate;

use std::path::PathBuf;

use tern_cni::{AddInput, CheckInput, CniResult, DelInput, Error, GcInput, Plugin, StatusInput};
use tern_net::sysctl::DEFAULT_ALLOWLIST_PATH;

/// The plugin; the allowlist path is a field so tests can point it at a temporary file (the
/// binary always uses [`DEFAULT_ALLOWLIST_PATH`]; a netconf cannot choose it).
#[derive(Debug, Clone)]
pub struct TuningPlugin {
    /// Where the allowlist is read from.
    pub allowlist_path: PathBuf,
}

impl Default for TuningPlugin {
    fn default() -> Self {
        TuningPlugin {
            allowlist_path: PathBuf::from(DEFAULT_ALLOWLIST_PATH),
        }
    }
}

impl Plugin for TuningPlugin {
    fn about(&self) -> String {
        format!(
            "tern-tuning {}: allowlisted network-namespace sysctls and link attributes (CNI meta plugin)",
            tern_node::version::version()
        )
    }

    fn report_as(&self) -> Option<&'static str> {
        Some("tern-tuning")
    }

    fn add(&self, input: &AddInput) -> Result<CniResult, Error> {
        add::add(self, input)
    }

    fn del(&self, input: &DelInput) -> Result<(), Error> {
        let _lock = lock::prepare_del(input);
        del::del(self, input)
    }

    fn check(&self, input: &CheckInput) -> Result<(), Error> {
        check::check(self, input)
    }

    fn status(&self, input: &StatusInput) -> Result<(), Error> {
        status::status(self, input)
    }

    fn gc(&self, input: &GcInput) -> Result<(), Error> {
        gc::gc(input)
    }
}

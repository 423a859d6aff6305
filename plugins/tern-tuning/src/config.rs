//! The tuning netconf: its types, parsed, validated and defaulted in submodules.
//!
//! The tuning netconf: the reference tuning plugin's fields and precedence
//! (cni-peer-behaviors.md §2.1), parsed into a [`TuningConf`] ([`parse`]), then validated into a
//! [`Plan`] ([`validate`]) before anything is changed; defaults and bounds in [`defaults`].
//!
//! Invariants: duplicated keys anywhere in the raw JSON are refused by the dispatcher (serde would
//! keep the last one silently); every sysctl key and value is validated and checked against the
//! allowlist before a [`Plan`] exists, so ADD cannot write anything that was not validated.

pub mod defaults;
pub mod parse;
pub mod validate;

use std::path::PathBuf;

use tern_net::sysctl::{SysctlKey, SysctlValue};

pub use defaults::{DEFAULT_DATA_DIR, MAX_MTU, MIN_MTU};
pub use parse::{data_dir_for_del, reject_duplicate_keys};
pub use validate::parse_mac;

/// The tuning keys, in their reference spelling (matched case-insensitively, as Go does).
pub const TUNING_KEYS: &[&str] = &[
    "sysctl", "mac", "mtu", "promisc", "allmulti", "txQLen", "dataDir",
];

/// `CNI_ARGS` keys tern-tuning understands (the reference's `MAC`).
pub const CNI_ARGS_KEYS: &[&str] = &["MAC"];

/// What the configuration asks for, after precedence is applied, not yet validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TuningConf {
    /// Sysctls in configuration order: top-level `sysctl`, then `args.cni.sysctl` overriding
    /// the same keys and appending new ones.
    pub sysctl: Vec<(String, String)>,
    /// MAC as written; last wins: `mac` < `CNI_ARGS` `MAC` < `runtimeConfig.mac` < `args.cni.mac`.
    pub mac: Option<String>,
    /// MTU; `None` (absent or 0) leaves it untouched.
    pub mtu: Option<u32>,
    /// Promiscuous mode; `None` leaves it untouched. `true` turns it on; `false` turns it off
    /// (the reference ignores `false` on ADD but enforces it on CHECK; tern does both).
    pub promisc: Option<bool>,
    /// All-multicast mode; `None` leaves it untouched.
    pub allmulti: Option<bool>,
    /// Transmit queue length; `None` leaves it untouched, 0 is applied.
    pub txqlen: Option<u32>,
    /// Where backups live.
    pub data_dir: PathBuf,
}

impl TuningConf {
    /// True when any link attribute is configured.
    pub fn has_link_attributes(&self) -> bool {
        self.mac.is_some()
            || self.mtu.is_some()
            || self.promisc.is_some()
            || self.allmulti.is_some()
            || self.txqlen.is_some()
    }
}

/// A validated configuration: what ADD applies and CHECK verifies.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Sysctls, keys with `IFNAME` substituted.
    pub sysctls: Vec<(SysctlKey, SysctlValue)>,
    /// The MAC as bytes.
    pub mac: Option<[u8; 6]>,
    /// See [`TuningConf`].
    pub mtu: Option<u32>,
    /// See [`TuningConf`].
    pub promisc: Option<bool>,
    /// See [`TuningConf`].
    pub allmulti: Option<bool>,
    /// See [`TuningConf`].
    pub txqlen: Option<u32>,
}

impl Plan {
    /// Whether applying or checking the plan needs `CNI_IFNAME` in the netns: for a link
    /// attribute, or a sysctl key with `IFNAME` (the interface's own `conf/<ifname>` entries exist
    /// only with it). A plan of plain sysctls works on the netns alone, as the reference's does.
    pub fn needs_link(&self) -> bool {
        self.mac.is_some()
            || self.mtu.is_some()
            || self.promisc.is_some()
            || self.allmulti.is_some()
            || self.txqlen.is_some()
            || self.sysctls.iter().any(|(k, _)| k.uses_ifname())
    }
}

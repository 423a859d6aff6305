//! The tuning netconf's defaults and bounds: the backup directory and the MTU range.

/// Backup directory when `dataDir` is absent (the reference's default).
pub const DEFAULT_DATA_DIR: &str = "/run/cni/tuning";

/// The lowest MTU an Ethernet-like link accepts (the kernel's `ETH_MIN_MTU`; IPv4 needs 68).
pub const MIN_MTU: u32 = 68;

/// The highest MTU an Ethernet-like link accepts (the kernel's `ETH_MAX_MTU`, veth's maximum).
pub const MAX_MTU: u32 = 65535;

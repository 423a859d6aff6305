//! CHECK: the attachment holds a lease (host-local's `FindByID`), and, beyond host-local, every
//! address of `prevResult` that lies in this config's ranges is leased to it.

use std::path::Path;

use tern_cni::CheckInput;

use crate::config::{IpamConfig, StoreLocation};
use crate::error::IpamError;
use crate::podcidr::{self, Fetch};
use crate::store::Store;

/// Runs CHECK for `input`.
///
/// # Errors
/// [`IpamError::NotReserved`]: `tern-ipam: Failed to find address added by container <id>`
/// (host-local's text) or `tern-ipam: address <ip> of prevResult is not leased to container
/// <id> ifname <if>`; config and store errors.
pub fn check(input: &CheckInput) -> Result<(), IpamError> {
    let loc = StoreLocation::load(&input.config)?;
    let cfg = IpamConfig::load_with(&input.config, &input.args, &mut || {
        podcidr::resolve(&input.config, &loc, Fetch::CacheOnly, &input.cni_path)
    })?;
    let id = input.container_id.as_str();
    let ifname = input.ifname.as_str();
    let not_found = || {
        IpamError::NotReserved(format!(
            "tern-ipam: Failed to find address added by container {id}"
        ))
    };
    let dir = loc.data_dir.join(&loc.name);
    if !Path::new(&dir).is_dir() {
        return Err(not_found());
    }
    let store = Store::open(&loc)?;
    let mine = store.leases_of(id, ifname)?;
    if mine.is_empty() {
        return Err(not_found());
    }
    if let Some(prev) = &input.config.prev_result {
        for c in &prev.ips {
            let ip = c.address.ip();
            let ours = cfg.ranges.iter().any(|s| s.contains(ip));
            if ours && !mine.iter().any(|l| l.ip == ip) {
                return Err(IpamError::NotReserved(format!(
                    "tern-ipam: address {ip} of prevResult is not leased to container {id} ifname {ifname}"
                )));
            }
        }
    }
    Ok(())
}

//! DEL: releases every lease of the attachment (host-local's `ReleaseByID`: the exact
//! (containerID, ifname) leases, else the legacy ID-only ones). `last_reserved_ip.*` is untouched.
//!
//! Invariant: idempotent. A missing network directory, or no lease, is success; the ranges are
//! not validated, so a DEL still works if the config's ranges became invalid. DEL never strands a
//! sandbox: it reads only the network name and `ipam.dataDir`, and when those cannot locate a
//! store (no `ipam` object, `dataDir` not a string: ADD refuses such a config before reserving
//! anything) it logs why and succeeds.

use tern_cni::DelInput;

use crate::config::StoreLocation;
use crate::error::IpamError;
use crate::store::Store;

/// Runs DEL for `input`.
///
/// # Errors
/// Store errors; [`IpamError::Teardown`] listing the leases that could not be removed (the others
/// are removed anyway).
pub fn del(input: &DelInput) -> Result<(), IpamError> {
    let loc = match StoreLocation::load(&input.config) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "DEL: no lease store to look in; nothing to release");
            return Ok(());
        }
    };
    let Some(store) = Store::open_existing(&loc)? else {
        return Ok(());
    };
    let leases = store.leases_of(input.container_id.as_str(), input.ifname.as_str())?;
    if leases.is_empty() {
        return Ok(());
    }
    let errors: Vec<String> = leases
        .iter()
        .filter_map(|l| store.remove(&l.file_name).err().map(|e| e.to_string()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(IpamError::Teardown(errors))
    }
}

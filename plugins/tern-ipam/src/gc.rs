//! GC (CNI 1.1.0): releases every lease whose attachment is not in `cni.dev/valid-attachments`
//! (the design of containernetworking/plugins#1047 / PR #1289).
//!
//! Invariants: without a list nothing is removed (the runtime did not say what is valid); an
//! empty list means nothing is valid. `lock`, `last_reserved_ip.*` and any file not named by an
//! address are kept. A legacy lease (container ID only) stays while any valid attachment has that
//! container ID, so GC right after an upgrade from old host-local does not free live addresses.
//! Errors are collected and every other lease is still processed.

use std::collections::HashSet;

use tern_cni::GcInput;

use crate::config::StoreLocation;
use crate::error::IpamError;
use crate::store::{Owner, Store};

/// Runs GC for `input`; returns the addresses released, in file-name order.
///
/// # Errors
/// `IPAM config missing 'ipam' key`; store errors; [`IpamError::Teardown`] listing every lease
/// that could not be removed.
pub fn gc(input: &GcInput) -> Result<Vec<String>, IpamError> {
    let Some(valid) = &input.valid_attachments else {
        return Ok(Vec::new());
    };
    let loc = StoreLocation::load(&input.config)?;
    let Some(store) = Store::open_existing(&loc)? else {
        return Ok(Vec::new());
    };
    let attachments: HashSet<(&str, &str)> = valid
        .iter()
        .map(|a| (a.container_id.trim(), a.ifname.as_str()))
        .collect();
    let ids: HashSet<&str> = valid.iter().map(|a| a.container_id.trim()).collect();
    let mut released = Vec::new();
    let mut errors = Vec::new();
    for lease in store.leases_swept()? {
        let keep = match &lease.owner {
            Owner::Attachment { id, ifname } => {
                attachments.contains(&(id.as_str(), ifname.as_str()))
            }
            Owner::Legacy { id } => ids.contains(id.as_str()),
        };
        if keep {
            continue;
        }
        match store.remove(&lease.file_name) {
            Ok(()) => released.push(lease.file_name),
            Err(e) => errors.push(e.to_string()),
        }
    }
    if !released.is_empty() {
        tracing::info!(released = ?released, "gc released leases");
    }
    if errors.is_empty() {
        Ok(released)
    } else {
        Err(IpamError::Teardown(errors))
    }
}

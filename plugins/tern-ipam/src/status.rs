//! STATUS (CNI 1.1.0): ready when the config is valid, the network directory can be created,
//! locked and written, and at least one address is free in every range set. Otherwise code 50.
//! With `usePodCidr` and nothing cached yet, only the directory is checked (no API call).

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;

use tern_cni::StatusInput;

use crate::config::{IpamConfig, StoreLocation};
use crate::error::IpamError;
use crate::podcidr::{self, Fetch};
use crate::store::Store;

/// Runs STATUS for `input`.
///
/// # Errors
/// Config errors keep their codes; [`IpamError::NotAvailable`] (code 50) naming the directory and
/// the OS error, or the exhausted range set.
pub fn status(input: &StatusInput) -> Result<(), IpamError> {
    let loc = StoreLocation::load(&input.config)?;
    let cfg = match IpamConfig::load_with(&input.config, &tern_cni::CniArgs::default(), &mut || {
        podcidr::resolve(&input.config, &loc, Fetch::CacheOnly, &input.cni_path)
    }) {
        Ok(c) => Some(c),
        // usePodCidr before the first ADD: STATUS must not call the API, and a node that says
        // "not ready" until a pod is scheduled would never get one. The directory is checked.
        Err(IpamError::PodCidr(m)) => {
            tracing::debug!(reason = %m, "ranges unknown; checking the data directory only");
            None
        }
        Err(e) => return Err(e),
    };
    let unavailable =
        |e: IpamError| IpamError::NotAvailable(format!("data directory unusable: {e}"));
    let store = Store::open(&loc).map_err(unavailable)?;
    let probe = store
        .dir()
        .join(format!(".tern-status.tmp-{}", std::process::id()));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&probe)
        .and_then(|f| f.sync_all());
    let _ = std::fs::remove_file(&probe);
    written
        .map_err(|e: io::Error| IpamError::store("create", &probe, e))
        .map_err(unavailable)?;
    let leases = store.leases().map_err(unavailable)?;
    for set in cfg.iter().flat_map(|c| &c.ranges) {
        let capacity: u128 = set
            .0
            .iter()
            .map(|r| r.capacity())
            .fold(0, u128::saturating_add);
        let used = leases.iter().filter(|l| set.contains(l.ip)).count() as u128;
        if used >= capacity {
            return Err(IpamError::NotAvailable(format!(
                "no IP addresses available in range set: {set}"
            )));
        }
    }
    Ok(())
}

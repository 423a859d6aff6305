//! ADD: one address per range set, as host-local's `cmdAdd`, all under one hold of the lock.
//!
//! Invariant: a failed ADD leaves no lease it created (it removes exactly the addresses it
//! reserved; host-local instead releases every lease of the attachment).

use std::net::IpAddr;

use tern_cni::{AddInput, CniResult, Dns};

use crate::allocator;
use crate::config::{IpamConfig, StoreLocation};
use crate::dns::read_resolv_conf;
use crate::error::IpamError;
use crate::podcidr::{self, Fetch};
use crate::store::Store;

/// Runs ADD for `input`: returns the IPAM result (addresses with their gateways, the configured
/// routes, DNS from `resolvConf`).
///
/// # Errors
/// Config errors (code 7/6/4), usePodCidr errors (code 11), allocation errors prefixed `failed to allocate for range <i>: `,
/// `failed to allocate all requested IPs: <ip> …`, store errors.
pub fn add(input: &AddInput) -> Result<CniResult, IpamError> {
    let loc = StoreLocation::load(&input.config)?;
    let cfg = IpamConfig::load_with(&input.config, &input.args, &mut || {
        podcidr::resolve(&input.config, &loc, Fetch::Allowed, &input.cni_path)
    })?;
    let dns = match &cfg.resolv_conf {
        Some(p) => read_resolv_conf(p)?,
        None => Dns::default(),
    };
    let store = Store::open(&cfg.location())?;
    let leases = store.leases_swept()?;
    tern_node::phase::mark("lease-scan");
    let id = input.container_id.as_str();
    let ifname = input.ifname.as_str();

    let mut requested: Vec<IpAddr> = cfg.requested.clone();
    let mut ips = Vec::with_capacity(cfg.ranges.len());
    let undo = |ips: &[tern_cni::IpConfig]| {
        for c in ips {
            if let Err(e) = store.remove(&c.address.ip().to_string()) {
                tracing::error!(error = %e, "cannot release address after failed ADD");
            }
        }
    };
    for (idx, set) in cfg.ranges.iter().enumerate() {
        let req = requested
            .iter()
            .position(|ip| set.contains(*ip))
            .map(|i| requested.remove(i));
        match allocator::get(&store, &leases, set, idx, id, ifname, req) {
            Ok(c) => ips.push(c),
            Err(e) => {
                undo(&ips);
                return Err(match e {
                    IpamError::Alloc(m) => {
                        IpamError::Alloc(format!("failed to allocate for range {idx}: {m}"))
                    }
                    other => other,
                });
            }
        }
    }
    if !requested.is_empty() {
        undo(&ips);
        let list: Vec<String> = requested.iter().map(ToString::to_string).collect();
        return Err(IpamError::Alloc(format!(
            "failed to allocate all requested IPs: {}",
            list.join(" ")
        )));
    }
    tracing::debug!(ips = ?ips.iter().map(|c| c.address.to_string()).collect::<Vec<_>>(), "allocated");
    Ok(CniResult {
        interfaces: Vec::new(),
        ips,
        routes: cfg.routes,
        dns,
    })
}

//! The NetworkPolicy controller's threads: three watch-layer reflectors (`watch.rs`, on
//! `tern-watch`) keep Pods, Namespaces and NetworkPolicies (with `--cluster-network-policy`,
//! two more: ClusterNetworkPolicies and Nodes) in the
//! [`Store`](super::store::Store); one syncer (`sync.rs`) compiles and
//! replaces the table when the store changed, and restores it when someone else changed it;
//! admissions (`admit.rs`, from tern's ADD over the agent channel) add a new pod's addresses
//! before the API server has them and wait on [`Store::applied`](super::store::Store::applied).
//! With `--network-policy-log-denied`, one more thread (`report.rs`, over `denied.rs`) reads the denied packets the
//! table logs and names them from the store. What they share is in `store.rs`, the settings in
//! `config.rs`.
//!
//! Invariants: nothing is applied before every kind watched has been listed once (a restarted
//! agent leaves the previous table in force until it knows the whole cluster: no gap, no
//! opening); stopping the agent leaves the table (isolated pods stay isolated while the agent
//! or the API server is down).

use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context as _;
use tern_net::nft::Nft;

use super::admit::PodAdmission;
use super::config::NetpolConfig;
use super::store::{Kind, NetpolStats, Shared};
use crate::mint::ControllerSettings;

/// The running controller.
pub struct NetpolController {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl NetpolController {
    /// Finds the nft tool and starts the watchers and the syncer.
    ///
    /// # Errors
    /// The nft tool is missing (the agent then refuses to start), or a thread cannot start.
    pub fn start(run: ControllerSettings, cfg: NetpolConfig) -> anyhow::Result<NetpolController> {
        let nft = Nft::find().context("--network-policy")?;
        let shared = Arc::new(Shared::new(run, cfg));
        let mut threads = Vec::new();
        for kind in Kind::watched(shared.cfg.cluster) {
            let s = Arc::clone(&shared);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("netpol-{}", kind.label()))
                    .spawn(move || super::watch::run(&s, kind))?,
            );
        }
        let s = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("netpol-events".into())
                .spawn(move || super::events::run(&s))?,
        );
        let (s, list_nft) = (Arc::clone(&shared), nft.clone());
        threads.push(
            std::thread::Builder::new()
                .name("netpol-drift".into())
                .spawn(move || super::sync::drift::run(&s, &list_nft))?,
        );
        if let Some(log) = shared.cfg.log_denied {
            let s = Arc::clone(&shared);
            threads.push(
                std::thread::Builder::new()
                    .name("netpol-denied".into())
                    .spawn(move || super::report::run(&s, log.group))?,
            );
        }
        // The syncer last: `stop` joins it.
        let s = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("netpol-sync".into())
                .spawn(move || super::sync::run(&s, &nft, true))?,
        );
        Ok(NetpolController { shared, threads })
    }

    /// A handle for the metrics endpoint.
    pub fn stats_source(&self) -> Arc<dyn Fn() -> NetpolStats + Send + Sync> {
        let s = Arc::clone(&self.shared);
        Arc::new(move || s.stats().clone())
    }

    /// The handle the agent channel admits pods through (`admitPod`).
    pub fn admission(&self) -> PodAdmission {
        PodAdmission::new(Arc::clone(&self.shared))
    }

    /// Stops the threads; the table stays. A watcher blocked on an open watch is not waited
    /// for (it ends at its next event or deadline); a waiting admission answers `failed`.
    pub fn stop(self) {
        self.shared.stop.stop();
        {
            let _g = self.shared.store();
            self.shared.notify();
        }
        if let Some(sync) = self.threads.into_iter().last() {
            let _ = sync.join();
        }
    }
}

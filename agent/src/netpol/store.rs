//! What the NetworkPolicy controller's threads share: the [`Store`] the watch-layer subscribers
//! (`watch.rs`) keep Pods, Namespaces, NetworkPolicies (ClusterNetworkPolicies and Nodes with
//! `--cluster-network-policy`) in, the addresses admissions (`admit.rs`) add before the API
//! server has them, how far the syncer (`sync.rs`) applied it, and the [`NetpolStats`] they count
//! in; all behind [`Shared`], which the controller (`controller.rs`) makes and hands to each thread.
//!
//! Invariant: all of it lives behind [`Shared`]'s mutexes; [`Store::generation`] only grows, and
//! [`Store::applied`] never passes it; it moves when, and only when, something the compiler reads
//! may have changed (an object, a first list, an admission): an event that changes nothing it
//! reads costs no compile.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tern_netpol::model::{Pod, Tier};
use tern_netpol::ruleset::LogDenied;
use tern_netpol::Engine;
use tern_watch::PodObject;

use super::config::NetpolConfig;
use crate::mint::ControllerSettings;
pub use kind::Kind;

/// What the watchers know: every Pod (admitted addresses in place of what the API shows),
/// Namespace and NetworkPolicy, in the incremental compiler that keeps the table's parts; with
/// what the controller needs beside.
#[derive(Debug)]
pub struct Store {
    /// The incremental compiler, holding the objects (keyed `namespace/name`, `name` for
    /// Namespaces); its Pods are the watch layer's objects, shared (admitted ones aside).
    pub engine: Engine<PodObject>,
    /// NetworkPolicies that could not be read whole, by `namespace/name`: what became of them
    /// and why (logged once per change of this entry).
    pub unreadable: BTreeMap<String, (Unreadable, String)>,
    /// ClusterNetworkPolicies that could not be read whole, by name: what became of them and why.
    pub unreadable_cluster: BTreeMap<String, (Unreadable, String)>,
    /// The tier of each ClusterNetworkPolicy the engine holds, by name (the metrics' count).
    pub cluster_tiers: BTreeMap<String, Tier>,
    /// The Nodes the engine holds, by name (what a relist of Nodes compares with).
    pub nodes: BTreeSet<String>,
    /// Which kinds have been listed at least once (a kind not watched counts as listed).
    pub listed: [bool; 5],
    /// Bumped when something the compiler reads changed (an object inserted, removed or read
    /// differently, a kind's first list, admitted addresses); a write that changes only what it
    /// does not read (a Pod's conditions, a resourceVersion) leaves it.
    pub generation: u64,
    /// Addresses tern's ADD gave pods whose API object does not show them yet, by
    /// `namespace/name`: they replace the pod's `status.podIPs` until the API shows the same.
    pub admitted: BTreeMap<String, AdmittedPod>,
    /// The highest [`Store::generation`] the kernel table is known to reflect (set by the syncer
    /// after an apply, or when a change left the table as it was).
    pub applied: u64,
    /// Admissions waiting for [`Store::applied`]: the syncer does not wait for its tick then.
    pub waiting: usize,
}

/// What became of a NetworkPolicy or ClusterNetworkPolicy that could not be read whole (the
/// `reason` label of `tern_agent_network_policy_unreadable_policies` and
/// `tern_agent_cluster_network_policy_unreadable_policies`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unreadable {
    /// Its rules (or policyTypes) cannot be read but its podSelector can: the pods it selects
    /// are isolated in the directions it names and allowed nothing.
    Rules,
    /// Its podSelector (or namespace) cannot be read: it isolates nothing. For a
    /// ClusterNetworkPolicy, its `spec.subject`: it applies to no pod.
    PodSelector,
}

impl Unreadable {
    /// Every reason.
    pub const ALL: [Unreadable; 2] = [Unreadable::Rules, Unreadable::PodSelector];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Unreadable::Rules => "rules",
            Unreadable::PodSelector => "pod_selector",
        }
    }
}

/// A pod's addresses as tern's ADD reported them (`admitPod` on the agent channel).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmittedPod {
    /// `metadata.uid` of the pod they belong to (empty: the runtime did not say).
    pub uid: String,
    /// The addresses.
    pub ips: Vec<IpAddr>,
    /// The addresses the API object shows meanwhile (what the pod gets back when the
    /// admission fails).
    pub api_ips: Vec<IpAddr>,
}

impl AdmittedPod {
    /// Whether the API's `pod` makes these addresses unneeded: it is another pod now (its UID
    /// changed) or it shows the same addresses.
    fn settled_by(&self, pod: &Pod) -> bool {
        let (mut api, mut ours) = (pod.ips.clone(), self.ips.clone());
        api.sort();
        ours.sort();
        (!self.uid.is_empty() && pod.uid != self.uid) || api == ours
    }
}

/// `pod` with `ips` in place of its addresses (a copy: admitted addresses are the store's own).
fn with_ips(pod: &PodObject, ips: &[IpAddr]) -> PodObject {
    let mut p = pod.clone();
    p.pod.ips = ips.to_vec();
    p
}

impl Store {
    /// An empty store for the node `node`, its table logging denied connections as `log` says;
    /// `cluster`: ClusterNetworkPolicies and Nodes are watched too (else listed, and empty).
    pub fn new(node: &str, log: Option<LogDenied>, cluster: bool) -> Store {
        let mut listed = [false; 5];
        for k in Kind::ALL.into_iter().filter(|k| k.is_cluster() && !cluster) {
            listed[k.index()] = true;
        }
        Store {
            engine: Engine::new(node).logging(log),
            unreadable: BTreeMap::new(),
            unreadable_cluster: BTreeMap::new(),
            cluster_tiers: BTreeMap::new(),
            nodes: BTreeSet::new(),
            listed,
            generation: 0,
            admitted: BTreeMap::new(),
            applied: 0,
            waiting: 0,
        }
    }

    /// Whether every kind has been listed.
    pub fn synced(&self) -> bool {
        self.listed.iter().all(|l| *l)
    }

    /// Sets the pod `key` as the API shows it (`None`: deleted), with its admitted addresses in
    /// place while they are needed ([`AdmittedPod`]); true when that changed what the compiler
    /// reads. Does not touch the generation.
    pub fn put_pod(&mut self, key: &str, api: Option<&Arc<PodObject>>) -> bool {
        self.put_pod_shared(&Arc::from(key), api)
    }

    /// [`Store::put_pod`] with the watch layer's own key (the engine shares its allocation).
    pub fn put_pod_shared(&mut self, key: &Arc<str>, api: Option<&Arc<PodObject>>) -> bool {
        let seen = match (api, self.admitted.get_mut(&**key)) {
            (Some(p), Some(a)) if !a.settled_by(&p.pod) => {
                a.api_ips.clone_from(&p.pod.ips);
                Some(Arc::new(with_ips(p, &a.ips)))
            }
            (p, a) => {
                if a.is_some() {
                    self.admitted.remove(&**key);
                }
                p.cloned()
            }
        };
        self.engine.set_pod_shared(key, seen)
    }

    /// Puts `ips`, admitted by tern's ADD, in place of the addresses the API shows for the pod
    /// `key` until the API shows the same; true when a policy isolates the pod with them. A pod
    /// the store does not hold is left alone (false).
    pub fn admit(&mut self, key: &str, ips: &[IpAddr]) -> bool {
        let Some(pod) = self.engine.pod(key).cloned() else {
            return false;
        };
        let api_ips = match self.admitted.get(key) {
            Some(a) => a.api_ips.clone(),
            None => pod.pod.ips.clone(),
        };
        let seen = with_ips(&pod, ips);
        let isolated = self.engine.isolates(&seen.pod);
        let a = AdmittedPod {
            uid: pod.pod.uid.clone(),
            ips: ips.to_vec(),
            api_ips: api_ips.clone(),
        };
        if a.settled_by(&with_ips(&pod, &api_ips).pod) {
            self.admitted.remove(key);
        } else {
            self.admitted.insert(key.to_owned(), a);
        }
        self.engine.set_pod(key, Some(Arc::new(seen)));
        isolated
    }

    /// Takes back the admitted `ips` of the pod `key` (its ADD failed and releases them): the
    /// pod has the API's addresses again; true when it held them.
    pub fn withdraw(&mut self, key: &str, ips: &[IpAddr]) -> bool {
        if self.admitted.get(key).is_none_or(|a| a.ips != ips) {
            return false;
        }
        let Some(a) = self.admitted.remove(key) else {
            return false;
        };
        if let Some(pod) = self.engine.pod(key).cloned() {
            self.engine
                .set_pod(key, Some(Arc::new(with_ips(&pod, &a.api_ips))));
        }
        true
    }

    /// Whether `kind` has been listed.
    pub fn is_listed(&self, kind: Kind) -> bool {
        self.listed[kind.index()]
    }

    /// Marks `kind` listed (a first list changes what may be rendered).
    pub fn mark_listed(&mut self, kind: Kind) {
        self.listed[kind.index()] = true;
        self.generation += 1;
    }

    /// How many NetworkPolicies (`cluster`: ClusterNetworkPolicies) could not be read whole,
    /// by [`Unreadable`] (every reason present).
    pub fn unreadable_counts(&self, cluster: bool) -> BTreeMap<&'static str, u64> {
        let map = if cluster {
            &self.unreadable_cluster
        } else {
            &self.unreadable
        };
        Unreadable::ALL
            .iter()
            .map(|r| {
                let n = map.values().filter(|(u, _)| u == r).count();
                (r.label(), n as u64)
            })
            .collect()
    }

    /// The ClusterNetworkPolicies held, by tier (every tier present).
    pub fn cluster_tier_counts(&self) -> BTreeMap<&'static str, u64> {
        [Tier::Admin, Tier::Baseline]
            .iter()
            .map(|t| {
                let n = self.cluster_tiers.values().filter(|x| *x == t).count();
                (t.as_str(), n as u64)
            })
            .collect()
    }
}

/// Counters and gauges of the controller (what `/metrics` renders).
#[derive(Debug, Clone, Default)]
pub struct NetpolStats {
    /// Whether the table has been applied after a full sync.
    pub synced: bool,
    /// Tables applied (replaces and updates).
    pub applies: u64,
    /// Of [`NetpolStats::applies`], those that changed only what a compile touched (not a replace).
    pub updates: u64,
    /// Tables the kernel refused.
    pub apply_errors: u64,
    /// Of [`NetpolStats::updates`], those written over netlink (a `ruleset::TablePlan`) rather
    /// than through an exec of nft.
    pub netlink_updates: u64,
    /// Updates the kernel refused over netlink (the nft script of the same update
    /// followed).
    pub netlink_errors: u64,
    /// Tables restored after someone else changed them.
    pub restores: u64,
    /// Objects that did not parse (whole), by kind.
    pub decode_errors: BTreeMap<&'static str, u64>,
    /// Watch events and listed objects that changed nothing the compiler reads, by kind.
    pub events_unchanged: BTreeMap<&'static str, u64>,
    /// NetworkPolicies in the store that could not be read whole, by [`Unreadable`] label.
    pub unreadable_policies: BTreeMap<&'static str, u64>,
    /// `--cluster-network-policy` is on (the ClusterNetworkPolicy metrics are rendered).
    pub cluster: bool,
    /// ClusterNetworkPolicies held, by tier (`Admin`, `Baseline`).
    pub cluster_policies: BTreeMap<&'static str, u64>,
    /// ClusterNetworkPolicies applying to at least one pod of this node.
    pub cluster_policies_in_force: u64,
    /// ClusterNetworkPolicies that could not be read whole, by [`Unreadable`] label.
    pub unreadable_cluster_policies: BTreeMap<&'static str, u64>,
    /// Compiles: runs of the incremental compiler over what changed since the last.
    pub compiles: u64,
    /// Local pods whose chains those compiles made again.
    pub pods_compiled: u64,
    /// Peer and endpoint sets whose contents they gathered again.
    pub sets_compiled: u64,
    /// API errors by cause.
    pub api_errors: BTreeMap<&'static str, u64>,
    /// Duration of the last sync (compile + nft), seconds.
    pub last_sync_seconds: f64,
    /// Sum of every sync's duration, seconds, and their count (a summary).
    pub sync_seconds_sum: f64,
    /// Syncs made.
    pub syncs: u64,
    /// The table's size after the last apply.
    pub size: tern_netpol::ruleset::Size,
    /// Policies selecting at least one pod of this node.
    pub policies: u64,
    /// Denied flows by (namespace, policy, direction) (`--network-policy-log-denied`).
    pub denied: super::denied::DeniedCounts,
    /// What the denied-flow reader saw: packets, retries folded, foreign, overflows.
    pub denied_reader: super::denied::ReaderStats,
}

pub(crate) struct Shared {
    pub(crate) run: ControllerSettings,
    pub(crate) cfg: NetpolConfig,
    pub(crate) store: Mutex<Store>,
    /// Signalled (with `store` held) whenever the store or [`Store::applied`] changed, and on
    /// stop: what admissions and the syncer's sleep wait on.
    pub(crate) changed: Condvar,
    pub(crate) stats: Mutex<NetpolStats>,
    pub(crate) stop: crate::stop_signal::StopSignal,
    /// Between the syncer and the drift check (`sync::drift`).
    pub(crate) drift: super::sync::drift::state::DriftState,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    pub(crate) fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    pub(crate) fn stats(&self) -> MutexGuard<'_, NetpolStats> {
        lock(&self.stats)
    }

    /// Wakes every admission waiting on the store (call with the store's guard held or just
    /// after dropping it).
    pub(crate) fn notify(&self) {
        self.changed.notify_all();
    }

    /// A fresh controller state (no threads) for `cfg`.
    pub(crate) fn new(run: ControllerSettings, cfg: NetpolConfig) -> Shared {
        let store = Mutex::new(Store::new(&cfg.node_name, cfg.log_denied, cfg.cluster));
        let stats = NetpolStats {
            cluster: cfg.cluster,
            ..NetpolStats::default()
        };
        Shared {
            run,
            cfg,
            store,
            changed: Condvar::new(),
            stats: Mutex::new(stats),
            stop: crate::stop_signal::StopSignal::default(),
            drift: super::sync::drift::state::DriftState::default(),
        }
    }
}

mod kind;

//! The incremental compiler (pure): the table of one node kept up to date one change at a
//! time, with work in proportion to what the change touches.
//!
//! Each `set_*` call takes one object as it is now (`None`: gone) and marks what it can change:
//! - a Pod: the sets whose definition selects it before or after (their members), and when it is
//!   a local pod (this node, with addresses) its own chains and map entries and the policies of
//!   its namespace that select it (a policy comes into force with its first local pod);
//! - a Namespace: the members, in that namespace, of the sets with a namespaceSelector;
//! - a NetworkPolicy: the local pods of its namespace it selects before or after, and the sets
//!   its rules define (registered while it is in force, counted by reference);
//! - a ClusterNetworkPolicy: the local pods its subject selects before or after (a pod or
//!   namespace change marks the pod when which ones apply to it changed), and its sets, as a
//!   NetworkPolicy's (`engine/cluster.rs`);
//! - a Node: the sets whose `nodes` peers select it before or after.
//!
//! [`Engine::flush`] recomputes only what was marked and returns the script of element, chain
//! and set changes that brings the kernel's table along (`ruleset::Journal`).
//!
//! Invariant: after every flush, [`Engine::table`] equals the table a full
//! `ruleset::render(&compile(..))` of the same objects gives (`engine/tests.rs` holds it over
//! thousands of random changes); an object set to what it already is changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use crate::compile::selects;
use crate::model::{ClusterPolicy, Labels, NodeInfo, Pod, Policy};
use crate::ruleset::{Journal, LogDenied, Size, Table, TablePlan};
use crate::sets::{namespace_labels, SetDef, SetId};

/// A set in force: its definition, how many rules of policies in force define it, and its
/// member pods.
#[derive(Debug)]
struct SetState {
    def: SetDef,
    refs: usize,
    members: Members,
    /// Its member changes since the last flush, for a set patched in place (`engine/patch.rs`);
    /// `None`: gathered whole at the next flush.
    edits: Option<Vec<Edit>>,
}

/// A local pod's place in the table: its addresses and, per verdict map
/// (`ruleset::VerdictMap`), its chains (the one its map entries jump to first, then the tier
/// chains it jumps to).
#[derive(Debug, Default)]
struct Placed {
    ips: Vec<IpAddr>,
    chains: [Vec<String>; 3],
}

/// What one [`Engine::flush`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flush {
    /// The script (one nft transaction) that brings the kernel's table from the last flush's to
    /// this one's; empty when the table did not change.
    pub script: String,
    /// The same update as the netlink writer's parts (`ruleset::TablePlan`: sets and chains
    /// made and removed, rules, element moves), when everything it touches is encodable;
    /// `None` when not, or when nothing changed; element moves only when
    /// [`TablePlan::elements_only`].
    pub plan: Option<TablePlan>,
    /// Local pods whose chains were compiled again.
    pub pods: usize,
    /// Sets whose contents were gathered again.
    pub sets: usize,
}

/// What the engine keeps of a pod: the compiler's [`Pod`], or a wider object that holds one
/// (the agent's watch layer keeps more of a Pod; the engine then shares that one copy). Two
/// objects with the same [`AsPod::as_pod`] are the same to the engine.
pub trait AsPod {
    /// The compiler's view of the pod.
    fn as_pod(&self) -> &Pod;
}

impl AsPod for Pod {
    fn as_pod(&self) -> &Pod {
        self
    }
}

/// The incremental compiler of one node, keeping pods as `P`.
#[derive(Debug)]
pub struct Engine<P = Pod> {
    node: String,
    /// Pods by key, with the id sets know them by; the key's allocation is the caller's when it
    /// hands one ([`Engine::set_pod_shared`]: the watch layer's store keeps the same).
    pods: BTreeMap<Arc<str>, (u32, Arc<P>)>,
    /// Pods by id (`None`: a free id).
    by_id: Vec<Option<Arc<P>>>,
    free_ids: Vec<u32>,
    /// Pods by namespace, as ids (4 bytes a pod, where a key would be its own allocation).
    pods_by_ns: BTreeMap<String, BTreeSet<u32>>,
    local_by_ns: BTreeMap<String, BTreeSet<String>>,
    namespaces: BTreeMap<String, Labels>,
    policies: BTreeMap<String, Arc<Policy>>,
    policies_by_ns: BTreeMap<String, BTreeSet<String>>,
    /// Policies in force: the local pods each selects.
    in_force: BTreeMap<String, BTreeSet<String>>,
    /// ClusterNetworkPolicies by name.
    cluster: BTreeMap<String, Arc<ClusterPolicy>>,
    /// ClusterNetworkPolicies in force: the local pods each applies to.
    cluster_in_force: BTreeMap<String, BTreeSet<String>>,
    /// Nodes by name (for `nodes` peers).
    nodes: BTreeMap<String, NodeInfo>,
    sets: BTreeMap<SetId, SetState>,
    placed: BTreeMap<String, Placed>,
    /// Per verdict map: an address → the local pods holding it, with their chains (the map
    /// keys it once, for the first pod in `namespace/name` order).
    holders: [BTreeMap<IpAddr, BTreeMap<String, String>>; 3],
    chain_users: BTreeMap<String, usize>,
    dirty_sets: BTreeSet<SetId>,
    dirty_pods: BTreeSet<String>,
    table: Table,
    journal: Journal,
    /// Every pod's addresses, as (address, pod id): who holds an address without a scan, for a
    /// set patched in place (`patch.rs`) and a logged packet's ends (`lookup.rs`); about 8 MiB
    /// at 150,000 Pods.
    by_ip: BTreeSet<(IpAddr, u32)>,
}

fn index(map: &mut BTreeMap<String, BTreeSet<String>>, group: &str, key: &str, on: bool) {
    if on {
        map.entry(group.to_owned())
            .or_default()
            .insert(key.to_owned());
    } else if let Some(keys) = map.get_mut(group) {
        keys.remove(key);
        if keys.is_empty() {
            map.remove(group);
        }
    }
}

impl<P: AsPod> Engine<P> {
    /// An engine for the node `node` (`spec.nodeName` of its pods), knowing nothing yet.
    pub fn new(node: &str) -> Engine<P> {
        Engine {
            node: node.to_owned(),
            pods: BTreeMap::new(),
            by_id: Vec::new(),
            free_ids: Vec::new(),
            pods_by_ns: BTreeMap::new(),
            local_by_ns: BTreeMap::new(),
            namespaces: BTreeMap::new(),
            policies: BTreeMap::new(),
            policies_by_ns: BTreeMap::new(),
            in_force: BTreeMap::new(),
            cluster: BTreeMap::new(),
            cluster_in_force: BTreeMap::new(),
            nodes: BTreeMap::new(),
            sets: BTreeMap::new(),
            placed: BTreeMap::new(),
            holders: [BTreeMap::new(), BTreeMap::new(), BTreeMap::new()],
            chain_users: BTreeMap::new(),
            dirty_sets: BTreeSet::new(),
            dirty_pods: BTreeSet::new(),
            table: Table::default(),
            journal: Journal::default(),
            by_ip: BTreeSet::new(),
        }
    }

    /// This engine with denied connections logged as `log` says (`None`: not logged); called
    /// before any object is set (the table's chains follow it from the first flush).
    #[must_use]
    pub fn logging(mut self, log: Option<LogDenied>) -> Engine<P> {
        self.table.log = log;
        self
    }

    fn is_local(&self, pod: &Pod) -> bool {
        pod.node == self.node && !pod.ips.is_empty()
    }

    /// The pod `namespace/name`, as last set.
    pub fn pod(&self, key: &str) -> Option<&Arc<P>> {
        self.pods.get(key).map(|(_, p)| p)
    }

    /// Every pod's key.
    pub fn pod_keys(&self) -> impl Iterator<Item = &str> {
        self.pods.keys().map(|k| &**k)
    }

    /// The pods of `ns`, with their ids.
    fn pods_of(&self, ns: &str) -> impl Iterator<Item = (u32, &Arc<P>)> {
        let ids = self.pods_by_ns.get(ns).into_iter().flatten();
        ids.filter_map(|id| Some((*id, self.by_id.get(*id as usize)?.as_ref()?)))
    }

    /// The NetworkPolicy `namespace/name`, as last set.
    pub fn policy(&self, key: &str) -> Option<&Arc<Policy>> {
        self.policies.get(key)
    }

    /// Every namespace's name.
    pub fn namespace_names(&self) -> impl Iterator<Item = &String> {
        self.namespaces.keys()
    }

    /// Every NetworkPolicy's key.
    pub fn policy_keys(&self) -> impl Iterator<Item = &String> {
        self.policies.keys()
    }

    /// Whether a policy of `pod`'s namespace isolates it (in either direction), a
    /// ClusterNetworkPolicy with rules applies to it, or a Deny or Pass rule of one in force
    /// here names it as a peer: its table entries (its chains, its address in those rules'
    /// sets) must be in the kernel before it starts (the admission).
    pub fn isolates(&self, pod: &Pod) -> bool {
        self.policies_by_ns
            .get(pod.namespace.as_str())
            .into_iter()
            .flatten()
            .any(|k| self.policies.get(k).is_some_and(|p| p.isolates(pod)))
            || self.cluster_isolates(pod)
    }

    /// The table as of the last flush.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The table's size as of the last flush.
    pub fn size(&self) -> Size {
        let isolated = self
            .placed
            .values()
            .filter(|p| p.chains.iter().any(|c| !c.is_empty()));
        self.table.size(isolated.count())
    }

    /// Policies in force on this node (selecting at least one of its pods).
    pub fn policies_in_force(&self) -> usize {
        self.in_force.len()
    }

    /// Sets the pod `key` (`namespace/name`) to `pod` (`None`: deleted); true when that changed
    /// it.
    pub fn set_pod(&mut self, key: &str, pod: Option<Arc<P>>) -> bool {
        self.put_pod(key, || Arc::from(key), pod)
    }

    /// [`Engine::set_pod`], keeping `key`'s own allocation (shared with the caller's store) when
    /// the pod is new.
    pub fn set_pod_shared(&mut self, key: &Arc<str>, pod: Option<Arc<P>>) -> bool {
        self.put_pod(key, || Arc::clone(key), pod)
    }

    fn put_pod(&mut self, key: &str, own: impl FnOnce() -> Arc<str>, pod: Option<Arc<P>>) -> bool {
        let (id, old) = match self.pods.get(key) {
            Some((id, p)) => (*id, Some(Arc::clone(p))),
            None => (
                self.free_ids
                    .last()
                    .copied()
                    .unwrap_or(self.by_id.len() as u32),
                None,
            ),
        };
        if old.as_deref().map(AsPod::as_pod) == pod.as_deref().map(AsPod::as_pod) {
            // Nothing the compiler reads: keep the newest object (the caller's one copy).
            if let Some(p) = pod {
                self.by_id[id as usize] = Some(Arc::clone(&p));
                if let Some(entry) = self.pods.get_mut(key) {
                    entry.1 = p;
                }
            }
            return false;
        }
        let ns = match (&old, &pod) {
            (Some(p), _) | (None, Some(p)) => p.as_pod().namespace.clone(),
            (None, None) => return false,
        };
        match &pod {
            Some(p) => {
                if old.is_none() && self.free_ids.pop().is_none() {
                    self.by_id.push(None);
                }
                self.by_id[id as usize] = Some(Arc::clone(p));
                match self.pods.get_mut(key) {
                    Some(entry) => entry.1 = Arc::clone(p),
                    None => {
                        self.pods.insert(own(), (id, Arc::clone(p)));
                    }
                }
            }
            None => {
                self.pods.remove(key);
            }
        }
        let in_ns = self.pods_by_ns.entry(ns.to_string()).or_default();
        if pod.is_some() {
            in_ns.insert(id);
        } else {
            in_ns.remove(&id);
            if in_ns.is_empty() {
                self.pods_by_ns.remove(ns.as_str());
            }
        }
        self.index_ips(id, old.as_deref(), pod.as_deref());
        let labels = namespace_labels(&self.namespaces, &ns);
        let moved = match (&old, &pod) {
            (Some(o), Some(n)) => o.as_pod().ips != n.as_pod().ips,
            _ => false,
        };
        self.mark_sets(id, old.as_deref(), pod.as_deref(), &labels, moved);
        if pod.is_none() {
            self.by_id[id as usize] = None;
            self.free_ids.push(id);
        }
        let was_local = old.as_deref().is_some_and(|p| self.is_local(p.as_pod()));
        let is_local = pod.as_deref().is_some_and(|p| self.is_local(p.as_pod()));
        index(&mut self.local_by_ns, &ns, key, is_local);
        if was_local || is_local {
            let keys: Vec<String> = self
                .policies_by_ns
                .get(ns.as_str())
                .into_iter()
                .flatten()
                .cloned()
                .collect();
            for pk in keys {
                let on = is_local
                    && pod.as_deref().is_some_and(|p| {
                        self.policies
                            .get(&pk)
                            .is_some_and(|pol| selects(pol, p.as_pod(), &self.node))
                    });
                self.select(&pk, key, on);
            }
            self.reselect_cluster(key);
            self.dirty_pods.insert(key.to_owned());
        }
        true
    }

    /// Puts pod `id`'s part (`old`'s → `new`'s) in every set in force, marking the sets whose
    /// contents may change and noting the change for a set patched in place (`patch.rs`).
    fn mark_sets(
        &mut self,
        id: u32,
        old: Option<&P>,
        new: Option<&P>,
        labels: &Labels,
        moved: bool,
    ) {
        let ips_of = |p: Option<&P>| p.map(|p| p.as_pod().ips.clone()).unwrap_or_default();
        let (ips_before, ips_after) = (ips_of(old), ips_of(new));
        for (sid, st) in &mut self.sets {
            let m = new
                .map(AsPod::as_pod)
                .filter(|p| st.def.scope().is_none_or(|n| n == p.namespace))
                .and_then(|p| st.def.member(p, labels));
            let member = m.is_some();
            if let Some(was) = st.members.put(id, m, moved) {
                self.dirty_sets.insert(*sid);
                let before: &[IpAddr] = if was { &ips_before } else { &[] };
                let after: &[IpAddr] = if member { &ips_after } else { &[] };
                patch::note(&mut st.edits, id, before, after);
            }
        }
    }
}

mod cluster;
mod flush;
mod lookup;
mod members;
mod objects;
mod patch;
use members::Members;
use patch::Edit;

#[cfg(test)]
mod tests;

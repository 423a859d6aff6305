//! ClusterNetworkPolicies and Nodes in the engine: which local pods each policy's subject
//! selects (a policy comes into force with its first, registering its sets, and leaves with its
//! last), and the sets whose `nodes` peers a Node's change touches.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{AsPod, Engine};
use crate::model::{Action, ClusterPolicy, Labels, NodeInfo, Peer, Pod};
use crate::sets::namespace_labels;

impl<P: AsPod> Engine<P> {
    /// The ClusterNetworkPolicy `name`, as last set.
    pub fn cluster_policy(&self, name: &str) -> Option<&Arc<ClusterPolicy>> {
        self.cluster.get(name)
    }

    /// Every ClusterNetworkPolicy's name.
    pub fn cluster_policy_names(&self) -> impl Iterator<Item = &String> {
        self.cluster.keys()
    }

    /// ClusterNetworkPolicies in force on this node (applying to at least one of its pods).
    pub fn cluster_policies_in_force(&self) -> usize {
        self.cluster_in_force.len()
    }

    /// Whether `policy` applies to the local pod `pod`, whose namespace has `ns_labels`: its
    /// subject selects it and it has rules (one without affects no traffic).
    fn cluster_selects(&self, policy: &ClusterPolicy, pod: &Pod, ns_labels: &Labels) -> bool {
        self.is_local(pod) && policy.has_rules() && policy.subject.selects(pod, ns_labels)
    }

    /// Whether a ClusterNetworkPolicy with rules applies to `pod` (wherever it runs: the
    /// admission asks before the pod's addresses are known), or one in force on this node has
    /// a Deny or Pass rule whose pod or namespace peers select it.
    pub(super) fn cluster_isolates(&self, pod: &Pod) -> bool {
        if self.cluster.is_empty() {
            return false;
        }
        let labels = namespace_labels(&self.namespaces, &pod.namespace);
        let subject = |c: &ClusterPolicy| c.has_rules() && c.subject.selects(pod, &labels);
        // A peer of a Deny or Pass rule in force here: until its address is in that rule's
        // set, the rule would miss it (a Deny let through), unlike an allow's set, which
        // only refuses it meanwhile.
        let held_back = |c: &ClusterPolicy| {
            [&c.ingress, &c.egress]
                .into_iter()
                .flatten()
                .filter(|r| r.action != Action::Accept)
                .flat_map(|r| &r.peers)
                .any(|p| match p {
                    Peer::Pods {
                        namespaces: Some(ns),
                        pods,
                    } => ns.matches(&labels) && pods.matches(&pod.labels),
                    _ => false,
                })
        };
        self.cluster.values().any(|c| subject(c))
            || self
                .cluster_in_force
                .keys()
                .filter_map(|n| self.cluster.get(n))
                .any(|c| held_back(c))
    }

    /// Sets the ClusterNetworkPolicy `name` (cluster-scoped; `None`: deleted); true when that
    /// changed it. Marks the local pods it applies to before or after.
    pub fn set_cluster_policy(&mut self, name: &str, policy: Option<Arc<ClusterPolicy>>) -> bool {
        let old = self.cluster.get(name).cloned();
        if old.as_deref() == policy.as_deref() {
            return false;
        }
        let selected: BTreeSet<String> = match &policy {
            Some(p) => {
                self.cluster.insert(name.to_owned(), Arc::clone(p));
                let mut selected = BTreeSet::new();
                for (ns, keys) in &self.local_by_ns {
                    let labels = namespace_labels(&self.namespaces, ns);
                    if !p.has_rules() || !p.subject.namespaces.matches(&labels) {
                        continue;
                    }
                    let pods = keys
                        .iter()
                        .filter_map(|k| Some((k, self.pods.get(k.as_str())?)));
                    for (k, (_, pod)) in pods {
                        if self.cluster_selects(p, pod.as_pod(), &labels) {
                            selected.insert(k.clone());
                        }
                    }
                }
                selected
            }
            None => {
                self.cluster.remove(name);
                BTreeSet::new()
            }
        };
        let was = self.cluster_in_force.remove(name).unwrap_or_default();
        // The new sets first: one the old version defines too keeps its members.
        if let Some(p) = policy.as_deref().filter(|_| !selected.is_empty()) {
            self.register(&p.sets());
        }
        if let Some(o) = old.as_deref().filter(|_| !was.is_empty()) {
            self.unregister(&o.sets());
        }
        self.dirty_pods.extend(was.iter().chain(&selected).cloned());
        if !selected.is_empty() {
            self.cluster_in_force.insert(name.to_owned(), selected);
        }
        true
    }

    /// Records, for every ClusterNetworkPolicy, whether it applies to the pod `key` now (after
    /// a change to the pod or its namespace); marks the pod when one changed.
    pub(super) fn reselect_cluster(&mut self, key: &str) {
        if self.cluster.is_empty() && self.cluster_in_force.is_empty() {
            return;
        }
        let pod = self.pods.get(key).map(|(_, p)| Arc::clone(p));
        let labels = pod
            .as_deref()
            .map(|p| namespace_labels(&self.namespaces, &p.as_pod().namespace));
        let names: Vec<String> = self.cluster.keys().cloned().collect();
        for name in names {
            let Some(policy) = self.cluster.get(&name).cloned() else {
                continue;
            };
            let on = pod
                .as_deref()
                .zip(labels.as_ref())
                .is_some_and(|(p, l)| self.cluster_selects(&policy, p.as_pod(), l));
            let before = self.cluster_in_force.contains_key(&name);
            let selected = self.cluster_in_force.entry(name.clone()).or_default();
            let changed = if on {
                selected.insert(key.to_owned())
            } else {
                selected.remove(key)
            };
            let after = !selected.is_empty();
            if !after {
                self.cluster_in_force.remove(&name);
            }
            match (before, after) {
                (false, true) => self.register(&policy.sets()),
                (true, false) => self.unregister(&policy.sets()),
                _ => {}
            }
            if changed {
                self.dirty_pods.insert(key.to_owned());
            }
        }
    }

    /// Sets the Node `name` (`None`: deleted); true when that changed it. Marks the sets whose
    /// `nodes` peers select it before or after.
    pub fn set_node(&mut self, name: &str, node: Option<&NodeInfo>) -> bool {
        let old = self.nodes.get(name).cloned();
        if old.as_ref() == node {
            return false;
        }
        match node {
            Some(n) => self.nodes.insert(name.to_owned(), n.clone()),
            None => self.nodes.remove(name),
        };
        for (id, st) in &mut self.sets {
            let touches = |n: &Option<NodeInfo>| {
                n.as_ref()
                    .is_some_and(|n| !st.def.node_addrs(&n.labels, &n.addresses).is_empty())
            };
            if touches(&old) || touches(&node.cloned()) {
                self.dirty_sets.insert(*id);
                st.edits = None;
            }
        }
        true
    }
}

//! [`Engine::set_namespace`] and [`Engine::set_policy`]: what a Namespace's or a
//! NetworkPolicy's change marks (the pods a namespace's labels may move in or out of sets, the
//! local pods a policy selects before or after, the sets it defines).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{index, AsPod, Engine};
use crate::compile::{policy_sets, selects};
use crate::model::{Namespace, Policy};
use crate::sets::namespace_labels;

impl<P: AsPod> Engine<P> {
    /// Sets the namespace `name` (`None`: deleted); true when that changed it.
    pub fn set_namespace(&mut self, name: &str, ns: Option<&Namespace>) -> bool {
        if self.namespaces.get(name) == ns.map(|n| &n.labels) {
            return false;
        }
        match ns {
            Some(n) => self.namespaces.insert(name.to_owned(), n.labels.clone()),
            None => self.namespaces.remove(name),
        };
        if !self.cluster.is_empty() {
            // A subject's namespace selector may apply to its local pods now, or no more.
            let local = self.local_by_ns.get(name).cloned().unwrap_or_default();
            for key in local {
                self.reselect_cluster(&key);
            }
        }
        let labels = namespace_labels(&self.namespaces, name);
        let pods: Vec<(u32, Arc<P>)> = self
            .pods_of(name)
            .map(|(id, p)| (id, Arc::clone(p)))
            .collect();
        for (id, st) in &mut self.sets {
            if !st.def.reads_namespace_labels() {
                continue;
            }
            for (pid, p) in &pods {
                let m = st.def.member(p.as_pod(), &labels);
                let member = m.is_some();
                if let Some(was) = st.members.put(*pid, m, false) {
                    self.dirty_sets.insert(*id);
                    let ips = p.as_pod().ips.as_slice();
                    let part = |on: bool| if on { ips } else { &[] };
                    super::patch::note(&mut st.edits, *pid, part(was), part(member));
                }
            }
        }
        true
    }

    /// Sets the NetworkPolicy `key` (`namespace/name`) to `policy` (`None`: deleted); true when
    /// that changed it.
    pub fn set_policy(&mut self, key: &str, policy: Option<Arc<Policy>>) -> bool {
        let old = self.policies.get(key).cloned();
        if old.as_deref() == policy.as_deref() {
            return false;
        }
        if let Some(o) = &old {
            index(&mut self.policies_by_ns, &o.namespace, key, false);
        }
        let selected: BTreeSet<String> = match &policy {
            Some(p) => {
                index(&mut self.policies_by_ns, &p.namespace, key, true);
                self.policies.insert(key.to_owned(), Arc::clone(p));
                let local = self.local_by_ns.get(&p.namespace).into_iter().flatten();
                local
                    .filter(|k| {
                        self.pods
                            .get(k.as_str())
                            .is_some_and(|(_, pod)| selects(p, pod.as_pod(), &self.node))
                    })
                    .cloned()
                    .collect()
            }
            None => {
                self.policies.remove(key);
                BTreeSet::new()
            }
        };
        let was = self.in_force.remove(key).unwrap_or_default();
        // The new sets first: one the old version defines too keeps its members.
        if let Some(p) = policy.as_deref().filter(|_| !selected.is_empty()) {
            self.register(&policy_sets(p));
        }
        if let Some(o) = old.as_deref().filter(|_| !was.is_empty()) {
            self.unregister(&policy_sets(o));
        }
        self.dirty_pods.extend(was.iter().chain(&selected).cloned());
        if !selected.is_empty() {
            self.in_force.insert(key.to_owned(), selected);
        }
        true
    }
}

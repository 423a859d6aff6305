//! [`Engine::flush`]: what the changes since the last flush marked, compiled again — the
//! contents of the sets marked, the chains and map entries of the local pods marked — with the
//! table's parts changed through its journal (`ruleset::Journal`).

use std::collections::BTreeSet;
use std::mem::take;
use std::net::IpAddr;
use std::sync::Arc;

use super::patch::patchable;
use super::{AsPod, Engine, Flush, Members, Placed};
use crate::compile::{pod_allows, pod_tiers, Dir};
use crate::model::{ClusterPolicy, Policy};
use crate::ruleset::{host_chains, named_sets, pod_chains, VerdictMap};
use crate::sets::{contents_from, namespace_labels, SetId};

impl<P: AsPod> Engine<P> {
    /// Compiles what the changes since the last flush touched, and the script that brings the
    /// kernel's table along.
    pub fn flush(&mut self) -> Flush {
        let (sets, pods) = (take(&mut self.dirty_sets), take(&mut self.dirty_pods));
        for id in &sets {
            self.flush_set(*id);
        }
        for key in &pods {
            self.place(key);
        }
        let journal = take(&mut self.journal);
        let script = journal.script(&self.table);
        let plan = if script.is_empty() {
            None
        } else {
            journal.table_plan(&self.table)
        };
        Flush {
            script,
            plan,
            pods: pods.len(),
            sets: sets.len(),
        }
    }

    fn flush_set(&mut self, id: SetId) {
        if self.patch_set(id) {
            return;
        }
        let Some(st) = self.sets.get(&id) else {
            for stem in ["p4", "p6", "e4", "e6"] {
                let name = format!("{stem}_{id}");
                if self.table.sets.contains_key(&name) {
                    self.table.put_set(&mut self.journal, &name, None);
                }
            }
            return;
        };
        let c = match &st.members {
            Members::Peers(ids) => {
                let pods = ids
                    .iter()
                    .filter_map(|id| self.by_id.get(*id as usize)?.as_ref());
                let ips = pods.flat_map(|p| p.as_pod().ips.iter().copied());
                let nodes = self.nodes.values();
                let node_ips = nodes.flat_map(|n| st.def.node_addrs(&n.labels, &n.addresses));
                contents_from(&st.def, ips.chain(node_ips.copied()), std::iter::empty())
            }
            Members::Endpoints(eps) => {
                contents_from(&st.def, std::iter::empty(), eps.values().flatten().copied())
            }
        };
        let next_edits = patchable(&st.def).then(Vec::new);
        for (name, set) in named_sets(id, &st.def, &c) {
            if self.table.sets.get(&name) != Some(&set) {
                self.table.put_set(&mut self.journal, &name, Some(set));
            }
        }
        if let Some(st) = self.sets.get_mut(&id) {
            st.edits = next_edits;
        }
    }

    /// Compiles the chains of the pod `key` and moves its map entries to them.
    fn place(&mut self, key: &str) {
        let old = self.placed.remove(key).unwrap_or_default();
        let mut new = Placed::default();
        let pod = self.pods.get(key).map(|(_, p)| Arc::clone(p));
        if let Some(pod) = pod
            .as_deref()
            .map(AsPod::as_pod)
            .filter(|p| self.is_local(p))
        {
            let pols = self
                .policies_by_ns
                .get(pod.namespace.as_str())
                .into_iter()
                .flatten();
            let pols: Vec<&Policy> = pols
                .filter_map(|k| self.policies.get(k).map(|p| &**p))
                .collect();
            let labels = namespace_labels(&self.namespaces, &pod.namespace);
            let applying: Vec<Arc<ClusterPolicy>> = self
                .cluster_in_force
                .iter()
                .filter(|(_, keys)| keys.contains(key))
                .filter_map(|(name, _)| self.cluster.get(name).cloned())
                .collect();
            new.ips.clone_from(&pod.ips);
            for dir in Dir::BOTH {
                let allows = pod_allows(pols.iter().copied(), dir, pod);
                let tiers = pod_tiers(applying.iter().map(|p| &**p), dir, pod, &labels);
                let mut chains = vec![(
                    VerdictMap::of(dir),
                    pod_chains(dir, allows.as_deref(), &tiers, self.table.log),
                )];
                if dir == Dir::Egress {
                    chains.push((VerdictMap::Host, host_chains(allows.as_deref(), &tiers)));
                }
                for (m, list) in chains {
                    for (name, rules) in list {
                        let users = self.chain_users.entry(name.clone()).or_insert(0);
                        *users += 1;
                        if *users == 1 {
                            self.table.put_chain(&mut self.journal, &name, Some(rules));
                        }
                        new.chains[m as usize].push(name);
                    }
                }
            }
        }
        let mut touched: BTreeSet<(usize, IpAddr)> = BTreeSet::new();
        for (i, chains) in old.chains.iter().enumerate() {
            if chains.is_empty() {
                continue;
            }
            for ip in &old.ips {
                if let Some(h) = self.holders[i].get_mut(ip) {
                    h.remove(key);
                }
                touched.insert((i, *ip));
            }
            for chain in chains {
                if let Some(users) = self.chain_users.get_mut(chain) {
                    *users -= 1;
                    if *users == 0 {
                        self.chain_users.remove(chain);
                        self.table.put_chain(&mut self.journal, chain, None);
                    }
                }
            }
        }
        for (i, chains) in new.chains.iter().enumerate() {
            let Some(head) = chains.first() else {
                continue;
            };
            for ip in &new.ips {
                self.holders[i]
                    .entry(*ip)
                    .or_default()
                    .insert(key.to_owned(), head.clone());
                touched.insert((i, *ip));
            }
        }
        for (i, ip) in touched {
            let winner = self.holders[i]
                .get(&ip)
                .and_then(|h| h.values().next().cloned());
            if winner.is_none() {
                self.holders[i].remove(&ip);
            }
            let m = VerdictMap::ALL[i];
            if self.table.map(m).get(&ip) != winner.as_ref() {
                self.table.put_verdict(&mut self.journal, m, ip, winner);
            }
        }
        if new.chains.iter().any(|c| !c.is_empty()) {
            self.placed.insert(key.to_owned(), new);
        }
    }
}

//! [`Engine::flush`]: what the changes since the last flush marked, compiled again — the
//! contents of the sets marked, the chains and map entries of the local pods marked — with the
//! table's parts changed through its journal (`ruleset::Journal`).

use std::collections::BTreeSet;
use std::mem::take;
use std::net::IpAddr;

use super::{slot, AsPod, Engine, Flush, Members, Placed};
use crate::compile::{pod_allows, Dir};
use crate::model::Policy;
use crate::ruleset::{chain as chain_rules, named_sets};
use crate::sets::{contents_from, SetId};

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
        Flush {
            script: journal.script(&self.table),
            pods: pods.len(),
            sets: sets.len(),
        }
    }

    fn flush_set(&mut self, id: SetId) {
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
                contents_from(&st.def, ips, std::iter::empty())
            }
            Members::Endpoints(eps) => {
                contents_from(&st.def, std::iter::empty(), eps.values().flatten().copied())
            }
        };
        for (name, set) in named_sets(id, &st.def, &c) {
            if self.table.sets.get(&name) != Some(&set) {
                self.table.put_set(&mut self.journal, &name, Some(set));
            }
        }
    }

    /// Compiles the chains of the pod `key` and moves its map entries to them.
    fn place(&mut self, key: &str) {
        let old = self.placed.remove(key).unwrap_or_default();
        let mut new = Placed::default();
        let pod = self.pods.get(key).map(|(_, p)| p.as_pod());
        if let Some(pod) = pod.filter(|p| self.is_local(p)) {
            let pols = self
                .policies_by_ns
                .get(&pod.namespace)
                .into_iter()
                .flatten();
            let pols: Vec<&Policy> = pols
                .filter_map(|k| self.policies.get(k).map(|p| &**p))
                .collect();
            new.ips.clone_from(&pod.ips);
            for dir in Dir::BOTH {
                if let Some(allows) = pod_allows(pols.iter().copied(), dir, pod) {
                    let (name, rules) = chain_rules(dir, &allows, self.table.log);
                    let users = self.chain_users.entry(name.clone()).or_insert(0);
                    *users += 1;
                    if *users == 1 {
                        self.table.put_chain(&mut self.journal, &name, Some(rules));
                    }
                    new.chains[slot(dir)] = Some(name);
                }
            }
        }
        let mut touched: BTreeSet<(usize, IpAddr)> = BTreeSet::new();
        for (i, chain) in old.chains.iter().enumerate() {
            let Some(chain) = chain else { continue };
            for ip in &old.ips {
                if let Some(h) = self.holders[i].get_mut(ip) {
                    h.remove(key);
                }
                touched.insert((i, *ip));
            }
            if let Some(users) = self.chain_users.get_mut(chain) {
                *users -= 1;
                if *users == 0 {
                    self.chain_users.remove(chain);
                    self.table.put_chain(&mut self.journal, chain, None);
                }
            }
        }
        for (i, chain) in new.chains.iter().enumerate() {
            let Some(chain) = chain else { continue };
            for ip in &new.ips {
                self.holders[i]
                    .entry(*ip)
                    .or_default()
                    .insert(key.to_owned(), chain.clone());
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
            let dir = Dir::BOTH[i];
            let now = match dir {
                Dir::Ingress => self.table.ingress.get(&ip),
                Dir::Egress => self.table.egress.get(&ip),
            };
            if now != winner.as_ref() {
                self.table.put_verdict(&mut self.journal, dir, ip, winner);
            }
        }
        if new.chains.iter().any(Option::is_some) {
            self.placed.insert(key.to_owned(), new);
        }
    }
}

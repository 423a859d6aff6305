//! Who a logged packet's addresses are, for the agent's denied-flow log: the pod holding an
//! address, and the local pod and policies a direction's table judged it by.
//!
//! Invariant: answers from the objects as last set (not the last flush).

use std::net::IpAddr;
use std::sync::Arc;

use super::{AsPod, Engine};
use crate::compile::{rules, selects, Dir};
use crate::ruleset::VerdictMap;

impl<P: AsPod> Engine<P> {
    /// Moves pod `id`'s addresses in the address index from `old`'s to `new`'s.
    pub(super) fn index_ips(&mut self, id: u32, old: Option<&P>, new: Option<&P>) {
        let by_ip = &mut self.by_ip;
        for ip in old.map(|p| &p.as_pod().ips[..]).unwrap_or_default() {
            by_ip.remove(&(*ip, id));
        }
        for ip in new.map(|p| &p.as_pod().ips[..]).unwrap_or_default() {
            by_ip.insert((*ip, id));
        }
    }

    /// A pod holding `ip` (of several, the one with the lowest id: an address is reused only
    /// after its pod is gone, so two are a moment's overlap); `None` when no pod does.
    pub fn pod_by_ip(&self, ip: IpAddr) -> Option<&Arc<P>> {
        let (_, id) = self.holders_of(ip).next()?;
        self.by_id.get(*id as usize)?.as_ref()
    }

    /// The (address, pod id) entries of the pods holding `ip`.
    pub(super) fn holders_of(&self, ip: IpAddr) -> impl Iterator<Item = &(IpAddr, u32)> {
        self.by_ip.range((ip, 0)..=(ip, u32::MAX))
    }

    /// The local pod whose `dir` chain judges `ip` in the table (the map's entry for it) and the
    /// NetworkPolicies (`namespace/name`) that isolate it in `dir`: what denied a packet
    /// logged by that chain (only NetworkPolicy's `drop` is logged: a pod only cluster policies
    /// judge has none). `None` when no local pod is judged with that address.
    pub fn isolated_by(&self, dir: Dir, ip: IpAddr) -> Option<(&Arc<P>, Vec<&str>)> {
        let holders = self.holders[VerdictMap::of(dir) as usize].get(&ip)?;
        let key = holders.keys().next()?;
        let pod = self.pod(key)?;
        let p = pod.as_pod();
        let policies = self
            .policies_by_ns
            .get(p.namespace.as_str())
            .into_iter()
            .flatten()
            .filter(|k| {
                self.policies
                    .get(*k)
                    .is_some_and(|pol| selects(pol, p, &self.node) && rules(pol, dir).is_some())
            })
            .map(String::as_str)
            .collect();
        Some((pod, policies))
    }
}

//! The ClusterNetworkPolicy tiers in a trace: the first rule of a tier that matches, in the
//! compiler's order (`compile/cluster.rs`: priority, then name, then rule order).

use std::net::IpAddr;

use super::{ClusterRuleRef, Direction, Query, Tracer};
use crate::model::{ClusterPolicy, Pod, Rule, Tier};
use crate::sets::namespace_labels;

impl Tracer<'_, '_> {
    /// The first rule of `tier` that applies to `local` in `dir` and matches the connection
    /// with the other end at `peer`.
    pub(super) fn tier(
        &self,
        tier: Tier,
        dir: Direction,
        local: &Pod,
        peer: IpAddr,
        q: &Query,
    ) -> Option<ClusterRuleRef> {
        let ingress = dir == Direction::Ingress;
        let known = self
            .w
            .namespaces
            .iter()
            .map(|n| (n.name.clone(), n.labels.clone()))
            .collect();
        let ns_labels = namespace_labels(&known, &local.namespace);
        let mut applying: Vec<&ClusterPolicy> = self
            .w
            .cluster_policies
            .iter()
            .filter(|p| p.tier == tier && !p.rules(ingress).is_empty())
            .filter(|p| p.subject.selects(local, &ns_labels))
            .collect();
        applying.sort_by(|a, b| (a.priority, &a.name).cmp(&(b.priority, &b.name)));
        for policy in applying {
            for (i, rule) in policy.rules(ingress).iter().enumerate() {
                if rule.peers.is_empty() {
                    continue;
                }
                let r = Rule {
                    peers: rule.peers.clone(),
                    ports: rule.ports.clone(),
                };
                if self.matches("", dir, &r, local, peer, q).is_some() {
                    return Some(ClusterRuleRef {
                        policy: policy.name.clone(),
                        tier,
                        priority: policy.priority,
                        direction: dir,
                        rule: i,
                        name: rule.name.clone(),
                        action: rule.action,
                        note: rule.note.clone(),
                    });
                }
            }
        }
        None
    }
}

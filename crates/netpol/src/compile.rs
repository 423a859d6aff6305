//! The policy compiler (pure): from every Pod, Namespace and NetworkPolicy the agent knows, what
//! each pod of this node may receive and send, as the API defines it
//! (`networking.k8s.io/v1`, "NetworkPolicy"):
//!
//! - a pod is isolated for ingress (egress) when a policy of its namespace selects it with
//!   `Ingress` (`Egress`) in its policyTypes; an isolated pod accepts only what the union of
//!   those policies' rules allows; a pod no policy selects is not isolated (everything allowed);
//! - a rule allows traffic from (to) any of its peers — pods by `podSelector` in the policy's
//!   namespace, by `namespaceSelector` in every selected namespace, by both, or the addresses of
//!   an `ipBlock` minus its `except` — on any of its ports; no peers: anywhere; no ports: every
//!   port;
//! - a named port is resolved against the pod the traffic goes to: for ingress the local pod's
//!   own container ports; for egress the peer pods' (a pod with no such port is not allowed).
//!
//! Host-network pods and finished pods are never peers and never isolated (they have no address
//! of their own, see `model.rs`). ClusterNetworkPolicy's tiers around NetworkPolicy:
//! `compile/cluster.rs`.

use std::collections::BTreeMap;

use crate::model::{
    ClusterPolicy, Labels, Namespace, NodeInfo, Pod, Policy, PortRef, Protocol, Rule,
};
use crate::sets::{contents, namespace_labels, Contents, Member, SetDef, SetId};

/// A protocol's destination ports: `None` every port, else `lo..=hi`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortRange {
    /// The protocol.
    pub protocol: Protocol,
    /// The ports, inclusive.
    pub range: Option<(u16, u16)>,
}

/// One allow rule of a local pod, in one direction. Peers are named by their set
/// ([`crate::sets`]), never by their addresses: a pod joining a selector changes a set's
/// elements, not the rule.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Allow {
    /// From (to) the addresses of set `peers` (`None`: any address) on `ports` (`None`: any
    /// port of any protocol).
    Match {
        /// The peer set.
        peers: Option<SetId>,
        /// The ports.
        ports: Option<Vec<PortRange>>,
    },
    /// To the (address, protocol, port) of an endpoint set: an egress rule's named ports
    /// resolved against its peer pods.
    Endpoints(SetId),
}

/// What one pod of this node is allowed, when a policy isolates it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalPod {
    /// `namespace/name`.
    pub key: String,
    /// Its addresses.
    pub ips: Vec<std::net::IpAddr>,
    /// `Some` when isolated for ingress: what it may receive (empty: nothing).
    pub ingress: Option<Vec<Allow>>,
    /// `Some` when isolated for egress: what it may send (empty: nothing).
    pub egress: Option<Vec<Allow>>,
    /// The ClusterNetworkPolicy rules that apply to it, ingress then egress.
    pub tiers: [Tiers; 2],
}

/// The result: the pods of this node some policy applies to, in `namespace/name` order, the
/// policies that apply to at least one of them, and the sets their rules name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Pods isolated in at least one direction, or with a ClusterNetworkPolicy rule.
    pub pods: Vec<LocalPod>,
    /// NetworkPolicies in force on this node.
    pub policies: usize,
    /// ClusterNetworkPolicies in force on this node (with rules, applying to one of its pods).
    pub cluster_policies: usize,
    /// Every set a rule of a policy in force defines ([`policy_sets`]), with what it holds.
    pub sets: BTreeMap<SetId, (SetDef, Contents)>,
}

/// Everything the compiler reads.
#[derive(Clone, Debug, Default)]
pub struct World<'a> {
    /// This node's name (`spec.nodeName` of its pods).
    pub node: &'a str,
    /// Every pod of the cluster.
    pub pods: &'a [Pod],
    /// Every namespace.
    pub namespaces: &'a [Namespace],
    /// Every NetworkPolicy.
    pub policies: &'a [Policy],
    /// Every ClusterNetworkPolicy.
    pub cluster_policies: &'a [ClusterPolicy],
    /// Every Node (for egress `nodes` peers).
    pub nodes: &'a [NodeInfo],
}

/// A direction of a policy's rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dir {
    /// `spec.ingress`: what the selected pods receive.
    Ingress,
    /// `spec.egress`: what they send.
    Egress,
}

impl Dir {
    /// Both directions.
    pub const BOTH: [Dir; 2] = [Dir::Ingress, Dir::Egress];
}

/// The rules of `policy` in `dir`, when that direction is in force (`None`: it is not).
pub fn rules(policy: &Policy, dir: Dir) -> Option<&[Rule]> {
    match dir {
        Dir::Ingress => policy.ingress_isolates.then_some(&policy.ingress[..]),
        Dir::Egress => policy.egress_isolates.then_some(&policy.egress[..]),
    }
}

/// Whether a local pod with addresses on `node` is selected by `policy` (its namespace, its
/// podSelector, a direction in force).
pub fn selects(policy: &Policy, pod: &Pod, node: &str) -> bool {
    pod.node == node && !pod.ips.is_empty() && policy.isolates(pod)
}

fn peers_def(namespace: &str, rule: &Rule) -> Option<SetDef> {
    (!rule.peers.is_empty()).then(|| SetDef::Peers {
        namespace: namespace.to_owned(),
        peers: rule.peers.clone(),
    })
}

fn endpoints_def(namespace: &str, rule: &Rule, named: Vec<(String, Protocol)>) -> SetDef {
    SetDef::Endpoints {
        namespace: namespace.to_owned(),
        peers: rule.peers.clone(),
        named,
    }
}

pub(crate) fn egress_named(rule: &Rule) -> Vec<(String, Protocol)> {
    let mut named: Vec<(String, Protocol)> = rule
        .ports
        .iter()
        .filter_map(|p| match &p.port {
            PortRef::Named(n) => Some((n.clone(), p.protocol)),
            _ => None,
        })
        .collect();
    named.sort();
    named.dedup();
    named
}

/// Every set the rules of `policy` define, in its directions in force: a rule with peers has
/// its peer set, an egress rule with named ports its endpoint set. Which local pod the policy
/// selects does not change them.
pub fn policy_sets(policy: &Policy) -> Vec<SetDef> {
    let mut out = Vec::new();
    for dir in Dir::BOTH {
        for rule in rules(policy, dir).unwrap_or_default() {
            rule_sets(&policy.namespace, dir, rule, &mut out);
        }
    }
    out
}

/// The sets one rule defines (a rule of a policy of `namespace`; `""` cluster-scoped).
pub(crate) fn rule_sets(namespace: &str, dir: Dir, rule: &Rule, out: &mut Vec<SetDef>) {
    out.extend(peers_def(namespace, rule));
    let named = egress_named(rule);
    if dir == Dir::Egress && !named.is_empty() {
        out.push(endpoints_def(namespace, rule, named));
    }
}

/// The allow rules one policy rule gives `local` in `dir`.
pub fn rule_allows(policy: &Policy, dir: Dir, rule: &Rule, local: &Pod) -> Vec<Allow> {
    matches_of(&policy.namespace, dir, rule, local)
}

/// What one rule (of a policy of `namespace`; `""` cluster-scoped) matches for `local` in
/// `dir`: its peers on its ports, named ports resolved; no peers: any address.
pub(crate) fn matches_of(namespace: &str, dir: Dir, rule: &Rule, local: &Pod) -> Vec<Allow> {
    let peers = peers_def(namespace, rule).map(|d| d.id());
    if rule.ports.is_empty() {
        return vec![Allow::Match { peers, ports: None }];
    }
    let mut numeric = Vec::new();
    for port in &rule.ports {
        match &port.port {
            PortRef::Any => numeric.push(PortRange {
                protocol: port.protocol,
                range: None,
            }),
            PortRef::Range(lo, hi) => numeric.push(PortRange {
                protocol: port.protocol,
                range: Some((*lo, *hi)),
            }),
            // Resolved against the pod the traffic goes to: for ingress the local pod.
            PortRef::Named(name) if dir == Dir::Ingress => numeric.extend(
                local
                    .ports
                    .iter()
                    .filter(|cp| cp.name == *name && cp.protocol == port.protocol)
                    .map(|cp| PortRange {
                        protocol: cp.protocol,
                        range: Some((cp.port, cp.port)),
                    }),
            ),
            PortRef::Named(_) => {}
        }
    }
    let mut out = Vec::new();
    if !numeric.is_empty() {
        numeric.sort();
        numeric.dedup();
        out.push(Allow::Match {
            peers,
            ports: Some(numeric),
        });
    }
    let named = egress_named(rule);
    if dir == Dir::Egress && !named.is_empty() {
        out.push(Allow::Endpoints(endpoints_def(namespace, rule, named).id()));
    }
    out
}

/// What `policies` (those of `local`'s namespace, or more) allow `local` in `dir`: `None` when
/// none of them isolates it in that direction; sorted, without repeats.
pub fn pod_allows<'a>(
    policies: impl IntoIterator<Item = &'a Policy>,
    dir: Dir,
    local: &Pod,
) -> Option<Vec<Allow>> {
    let mut list: Option<Vec<Allow>> = None;
    for policy in policies {
        if !policy.isolates(local) {
            continue;
        }
        let Some(rs) = rules(policy, dir) else {
            continue;
        };
        let l = list.get_or_insert_with(Vec::new);
        for rule in rs {
            l.extend(rule_allows(policy, dir, rule, local));
        }
    }
    if let Some(l) = &mut list {
        l.sort();
        l.dedup();
    }
    list
}

/// Compiles what every pod of `w.node` is allowed, and what each set holds, from scratch
/// (the reference the incremental [`crate::engine`] is held to).
pub fn compile(w: &World<'_>) -> Plan {
    let ns: BTreeMap<String, Labels> = w
        .namespaces
        .iter()
        .map(|n| (n.name.clone(), n.labels.clone()))
        .collect();
    let mut local: Vec<&Pod> = w
        .pods
        .iter()
        .filter(|p| p.node == w.node && !p.ips.is_empty())
        .collect();
    // `namespace/name` order, as the engine keys its pods.
    local.sort_by_cached_key(|p| format!("{}/{}", p.namespace, p.name));
    let mut plan = Plan::default();
    let mut defs: BTreeMap<SetId, SetDef> = BTreeMap::new();
    for policy in w.policies {
        if !local.iter().any(|p| selects(policy, p, w.node)) {
            continue;
        }
        plan.policies += 1;
        for def in policy_sets(policy) {
            defs.insert(def.id(), def);
        }
    }
    for policy in w.cluster_policies.iter().filter(|c| c.has_rules()) {
        let applies = local.iter().any(|p| {
            policy
                .subject
                .selects(p, &namespace_labels(&ns, &p.namespace))
        });
        if applies {
            plan.cluster_policies += 1;
            for def in policy.sets() {
                defs.insert(def.id(), def);
            }
        }
    }
    for p in &local {
        let [ingress, egress] = Dir::BOTH.map(|d| pod_allows(w.policies, d, p));
        let labels = namespace_labels(&ns, &p.namespace);
        let tiers = Dir::BOTH.map(|d| pod_tiers(w.cluster_policies, d, p, &labels));
        if ingress.is_some() || egress.is_some() || tiers.iter().any(|t| !t.is_empty()) {
            plan.pods.push(LocalPod {
                key: format!("{}/{}", p.namespace, p.name),
                ips: p.ips.clone(),
                ingress,
                egress,
                tiers,
            });
        }
    }
    for (id, def) in defs {
        let mut members: Vec<_> = w
            .pods
            .iter()
            .filter_map(|p| def.member(p, &namespace_labels(&ns, &p.namespace)))
            .collect();
        let nodes = w.nodes.iter();
        let node_ips = nodes.flat_map(|n| def.node_addrs(&n.labels, &n.addresses).to_vec());
        members.push(Member::Addrs(node_ips.collect()));
        let c = contents(&def, &members);
        plan.sets.insert(id, (def, c));
    }
    plan
}

mod cluster;
pub use cluster::{cluster_rule_matches, pod_tiers, TierRule, Tiers};

#[cfg(test)]
mod tests;

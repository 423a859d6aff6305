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
//! of their own, see `model.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::addrs::AddrSet;
use crate::model::{Labels, Namespace, Peer, Pod, Policy, PortRef, Protocol, Rule};

/// A protocol's destination ports: `None` every port, else `lo..=hi`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortRange {
    /// The protocol.
    pub protocol: Protocol,
    /// The ports, inclusive.
    pub range: Option<(u16, u16)>,
}

/// One allow rule of a local pod, in one direction.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Allow {
    /// From (to) `peers` (`None`: any address) on `ports` (`None`: any port of any protocol).
    Match {
        /// The peer addresses.
        peers: Option<AddrSet>,
        /// The ports.
        ports: Option<Vec<PortRange>>,
    },
    /// To exactly these (address, protocol, port): an egress rule's named ports resolved
    /// against its peer pods.
    Endpoints(BTreeSet<(IpAddr, Protocol, u16)>),
}

/// What one pod of this node is allowed, when a policy isolates it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalPod {
    /// `namespace/name`.
    pub key: String,
    /// Its addresses.
    pub ips: Vec<IpAddr>,
    /// `Some` when isolated for ingress: what it may receive (empty: nothing).
    pub ingress: Option<Vec<Allow>>,
    /// `Some` when isolated for egress: what it may send (empty: nothing).
    pub egress: Option<Vec<Allow>>,
}

/// The result: the isolated pods of this node, in `namespace/name` order, and the policies
/// that selected at least one of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Pods isolated in at least one direction.
    pub pods: Vec<LocalPod>,
    /// Policies in force on this node.
    pub policies: usize,
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
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Ingress,
    Egress,
}

/// A namespace's labels; one the agent has not seen yet has only the label the API server
/// always sets, `kubernetes.io/metadata.name`.
fn ns_labels<'a>(
    known: &'a BTreeMap<&str, &Labels>,
    name: &str,
    scratch: &'a mut Labels,
) -> &'a Labels {
    if let Some(l) = known.get(name) {
        return l;
    }
    scratch.insert("kubernetes.io/metadata.name".into(), name.to_owned());
    scratch
}

impl World<'_> {
    fn namespaces(&self) -> BTreeMap<&str, &Labels> {
        self.namespaces
            .iter()
            .map(|n| (n.name.as_str(), &n.labels))
            .collect()
    }

    /// The addresses of a rule's peers; `None` when it has none (anywhere).
    fn peers(&self, policy: &Policy, rule: &Rule, ns: &BTreeMap<&str, &Labels>) -> Option<AddrSet> {
        if rule.peers.is_empty() {
            return None;
        }
        let mut set = AddrSet::default();
        for peer in &rule.peers {
            match peer {
                Peer::Block { cidr, except } => set.extend(&AddrSet::block(cidr, except)),
                Peer::Pods { namespaces, pods } => {
                    // Namespaces first (50 selector checks, not 1,000), then the pods in them.
                    let in_ns = |name: &str| match namespaces {
                        None => name == policy.namespace,
                        Some(sel) => {
                            let mut scratch = Labels::new();
                            sel.matches(ns_labels(ns, name, &mut scratch))
                        }
                    };
                    let mut verdict: BTreeMap<&str, bool> = BTreeMap::new();
                    let ips = self
                        .pods
                        .iter()
                        .filter(|p| !p.ips.is_empty())
                        .filter(|p| {
                            *verdict
                                .entry(&p.namespace)
                                .or_insert_with(|| in_ns(&p.namespace))
                        })
                        .filter(|p| pods.matches(&p.labels))
                        .flat_map(|p| p.ips.iter().copied());
                    set.add_ips(ips);
                }
            }
        }
        Some(set)
    }

    /// Egress named ports: every (address, protocol, port) of a pod among `peers` with a
    /// container port of that name and protocol.
    fn endpoints(
        &self,
        peers: Option<&AddrSet>,
        named: &[(&str, Protocol)],
    ) -> BTreeSet<(IpAddr, Protocol, u16)> {
        let mut out = BTreeSet::new();
        for p in self.pods {
            for cp in &p.ports {
                if !named
                    .iter()
                    .any(|(n, proto)| cp.name == *n && cp.protocol == *proto)
                {
                    continue;
                }
                for ip in p
                    .ips
                    .iter()
                    .filter(|ip| peers.is_none_or(|s| s.contains(**ip)))
                {
                    out.insert((*ip, cp.protocol, cp.port));
                }
            }
        }
        out
    }
}

/// The allow rules one policy rule gives `local`, after its peers resolved to `peers`.
fn allows(
    w: &World<'_>,
    dir: Dir,
    rule: &Rule,
    peers: Option<&AddrSet>,
    local: &Pod,
) -> Vec<Allow> {
    if peers.is_some_and(AddrSet::is_empty) {
        return Vec::new(); // peers that match nothing allow nothing
    }
    if rule.ports.is_empty() {
        return vec![Allow::Match {
            peers: peers.cloned(),
            ports: None,
        }];
    }
    let mut numeric = Vec::new();
    let mut named = Vec::new();
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
            PortRef::Named(name) if dir == Dir::Ingress => {
                let own = local.ports.iter();
                numeric.extend(
                    own.filter(|cp| cp.name == *name && cp.protocol == port.protocol)
                        .map(|cp| PortRange {
                            protocol: cp.protocol,
                            range: Some((cp.port, cp.port)),
                        }),
                );
            }
            PortRef::Named(name) => named.push((name.as_str(), port.protocol)),
        }
    }
    let mut out = Vec::new();
    if !numeric.is_empty() {
        numeric.sort();
        numeric.dedup();
        out.push(Allow::Match {
            peers: peers.cloned(),
            ports: Some(numeric),
        });
    }
    if !named.is_empty() {
        let eps = w.endpoints(peers, &named);
        if !eps.is_empty() {
            out.push(Allow::Endpoints(eps));
        }
    }
    out
}

/// Compiles what every pod of `w.node` is allowed.
pub fn compile(w: &World<'_>) -> Plan {
    let ns = w.namespaces();
    let mut local: Vec<&Pod> = w
        .pods
        .iter()
        .filter(|p| p.node == w.node && !p.ips.is_empty())
        .collect();
    local.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut plans: Vec<LocalPod> = local
        .iter()
        .map(|p| LocalPod {
            key: format!("{}/{}", p.namespace, p.name),
            ips: p.ips.clone(),
            ..LocalPod::default()
        })
        .collect();
    let mut in_force = 0;
    for policy in w.policies {
        let selected: Vec<usize> = (0..local.len())
            .filter(|&i| {
                local[i].namespace == policy.namespace
                    && policy.pod_selector.matches(&local[i].labels)
            })
            .collect();
        if selected.is_empty() {
            continue;
        }
        in_force += 1;
        for (dir, isolates, rules) in [
            (Dir::Ingress, policy.ingress_isolates, &policy.ingress),
            (Dir::Egress, policy.egress_isolates, &policy.egress),
        ] {
            if !isolates {
                continue;
            }
            let peers: Vec<Option<AddrSet>> =
                rules.iter().map(|r| w.peers(policy, r, &ns)).collect();
            // What a rule allows depends on the local pod only through an ingress named port:
            // every other rule is compiled once for all the pods it applies to.
            let shared: Vec<Option<Vec<Allow>>> = rules
                .iter()
                .zip(&peers)
                .map(|(rule, peers)| {
                    let per_pod = dir == Dir::Ingress
                        && rule
                            .ports
                            .iter()
                            .any(|p| matches!(p.port, PortRef::Named(_)));
                    (!per_pod).then(|| allows(w, dir, rule, peers.as_ref(), local[selected[0]]))
                })
                .collect();
            for &i in &selected {
                let slot = match dir {
                    Dir::Ingress => &mut plans[i].ingress,
                    Dir::Egress => &mut plans[i].egress,
                };
                let list = slot.get_or_insert_with(Vec::new);
                for ((rule, peers), once) in rules.iter().zip(&peers).zip(&shared) {
                    match once {
                        Some(a) => list.extend(a.iter().cloned()),
                        None => list.extend(allows(w, dir, rule, peers.as_ref(), local[i])),
                    }
                }
            }
        }
    }
    for p in &mut plans {
        for list in [&mut p.ingress, &mut p.egress].into_iter().flatten() {
            list.sort();
            list.dedup();
        }
    }
    plans.retain(|p| p.ingress.is_some() || p.egress.is_some());
    Plan {
        pods: plans,
        policies: in_force,
    }
}

#[cfg(test)]
mod tests;

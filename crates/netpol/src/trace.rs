//! Why A can or cannot reach B (pure): one new connection, from a pod or an address to a pod on
//! a port, judged by the ClusterNetworkPolicies and NetworkPolicies of the same [`World`] the
//! compiler reads, with the reasons: the ClusterNetworkPolicy rule that decided (tier, policy,
//! rule, action) or passed the connection on; which NetworkPolicies isolate each end, and which
//! rule (`ingress[i]`/`egress[i]`, the peer and the port that matched) allows each direction.
//!
//! A connection is judged twice, as the table judges it: by the source pod's egress rules (on
//! the source's node) and by the destination pod's ingress rules (on the destination's node).
//! Each end is isolated in a direction when a policy of its namespace selects it with that
//! direction in force; an isolated end allows what any rule of those policies allows. Pods are
//! matched by their addresses, as the table matches packets: a peer holds an address when a pod
//! with that address is in its namespaces and selected, or its ipBlock minus `except` holds it.
//!
//! Invariant: the same semantics as [`crate::compile`], rule for rule — the tests check every
//! (source, destination, port) of a cluster against the compiled plans. What neither judges: a
//! pod's traffic to its own address (it never leaves the pod's network namespace), replies of an
//! established connection, and traffic between a pod and its own node. No I/O.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::compile::World;
use crate::model::{Action, Labels, Peer, Pod, Port, PortRef, Protocol, Rule, Tier};

/// Where the traced connection comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A pod: each of its addresses.
    Pod {
        /// `metadata.namespace`.
        namespace: String,
        /// `metadata.name`.
        name: String,
    },
    /// An address: a pod's when a pod has it (then that pod's egress is judged), else from
    /// outside the pods (only the destination's ingress is).
    Ip(IpAddr),
}

/// One new connection to trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    /// The source.
    pub from: Source,
    /// The destination pod's namespace.
    pub to_namespace: String,
    /// The destination pod's name.
    pub to_name: String,
    /// The transport protocol.
    pub protocol: Protocol,
    /// The destination port.
    pub port: u16,
}

/// A direction of a policy (`spec.policyTypes`, `spec.ingress`, `spec.egress`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Into the destination.
    Ingress,
    /// Out of the source.
    Egress,
}

impl Direction {
    /// The field as the API spells it: `ingress` or `egress`.
    pub fn field(self) -> &'static str {
        match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        }
    }

    /// A rule's peers field: `from` or `to`.
    pub fn peers_field(self) -> &'static str {
        match self {
            Direction::Ingress => "from",
            Direction::Egress => "to",
        }
    }
}

/// Traces `q` through `w` (its `node` is not read: every pod is judged by its own node's
/// table). `closed` maps the `namespace/name` of each fail-closed stand-in among `w.policies`
/// to why it could not be read (reported, not otherwise used: the stand-in allows nothing).
///
/// # Errors
/// [`Error`]: the source or destination pod is unknown or has no address, or the two share no
/// address family.
pub fn trace(w: &World<'_>, closed: &BTreeMap<String, String>, q: &Query) -> Result<Trace, Error> {
    let t = Tracer { w, closed };
    let dst = t.pod(&q.to_namespace, &q.to_name)?;
    let (src_pod, src_ips) = match &q.from {
        Source::Pod { namespace, name } => {
            let p = t.pod(namespace, name)?;
            (Some(p), p.ips.clone())
        }
        Source::Ip(ip) => (t.owner(*ip), vec![*ip]),
    };
    let to = key(dst);
    let from = src_pod.map(key);
    if src_ips.iter().any(|ip| dst.ips.contains(ip)) {
        return Ok(Trace {
            from,
            to,
            own: true,
            paths: Vec::new(),
        });
    }
    let mut paths = Vec::new();
    for &src in &src_ips {
        for &dst_ip in dst.ips.iter().filter(|d| d.is_ipv4() == src.is_ipv4()) {
            paths.push(Path {
                src,
                dst: dst_ip,
                egress: t.judge(Direction::Egress, src_pod, dst_ip, q),
                ingress: t.judge(Direction::Ingress, Some(dst), src, q),
            });
        }
    }
    if paths.is_empty() {
        return Err(Error::NoCommonFamily {
            from: from.unwrap_or_else(|| src_ips.iter().map(ToString::to_string).collect()),
            to,
        });
    }
    Ok(Trace {
        from,
        to,
        own: false,
        paths,
    })
}

fn key(p: &Pod) -> String {
    format!("{}/{}", p.namespace, p.name)
}

struct Tracer<'w, 'a> {
    w: &'w World<'a>,
    closed: &'w BTreeMap<String, String>,
}

impl Tracer<'_, '_> {
    /// The pod `namespace/name`, with an address.
    fn pod(&self, namespace: &str, name: &str) -> Result<&Pod, Error> {
        let p = self
            .w
            .pods
            .iter()
            .find(|p| p.namespace == namespace && p.name == name)
            .ok_or_else(|| Error::NoSuchPod(format!("{namespace}/{name}")))?;
        if p.ips.is_empty() {
            return Err(Error::NoAddress(key(p)));
        }
        Ok(p)
    }

    /// The pod holding `ip`, the first in `namespace/name` order when several do.
    fn owner(&self, ip: IpAddr) -> Option<&Pod> {
        let holders = self.w.pods.iter().filter(|p| p.ips.contains(&ip));
        holders.min_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
    }

    /// How `local` judges, in `dir`, the connection with the other end at `peer`: the Admin
    /// tier, NetworkPolicy, the Baseline tier (`trace/cluster.rs`).
    fn judge(&self, dir: Direction, local: Option<&Pod>, peer: IpAddr, q: &Query) -> Judgement {
        let Some(local) = local else {
            return Judgement::NotAPod;
        };
        if local.node.is_empty() {
            // No node runs it, so no node's table holds it (the compiler isolates the pods of
            // `World::node`); a pod has an address only once scheduled, so this is a stand-in's
            // or a test's pod.
            return Judgement::NotIsolated;
        }
        let passed = match self.tier(Tier::Admin, dir, local, peer, q) {
            Some(r) if r.action == Action::Pass => Some(r),
            Some(r) => return Judgement::Cluster(r),
            None => None,
        };
        let mut then = self.network_policy(dir, local, peer, q);
        if then == Judgement::NotIsolated {
            if let Some(r) = self.tier(Tier::Baseline, dir, local, peer, q) {
                then = Judgement::Cluster(r);
            }
        }
        match passed {
            Some(by) => Judgement::Passed {
                by,
                then: Box::new(then),
            },
            None => then,
        }
    }

    /// How the NetworkPolicies of `local`'s namespace judge, in `dir`, the connection with the
    /// other end at `peer`.
    fn network_policy(&self, dir: Direction, local: &Pod, peer: IpAddr, q: &Query) -> Judgement {
        let mut isolated_by = Vec::new();
        let mut rules = Vec::new();
        for policy in self.w.policies {
            let (isolates, list) = match dir {
                Direction::Ingress => (policy.ingress_isolates, &policy.ingress),
                Direction::Egress => (policy.egress_isolates, &policy.egress),
            };
            if !isolates
                || policy.namespace != local.namespace
                || !policy.pod_selector.matches(&local.labels)
            {
                continue;
            }
            let at = PolicyRef {
                namespace: policy.namespace.clone(),
                name: policy.name.clone(),
                closed: self
                    .closed
                    .get(&format!("{}/{}", policy.namespace, policy.name))
                    .cloned(),
            };
            for (i, rule) in list.iter().enumerate() {
                let ns = &policy.namespace;
                if let Some((peer, port)) = self.matches(ns, dir, rule, local, peer, q) {
                    rules.push(RuleRef {
                        policy: at.clone(),
                        direction: dir,
                        rule: i,
                        peer,
                        port,
                    });
                }
            }
            isolated_by.push(at);
        }
        match (isolated_by.is_empty(), rules.is_empty()) {
            (true, _) => Judgement::NotIsolated,
            (false, true) => Judgement::Denied { isolated_by },
            (false, false) => Judgement::Allowed { isolated_by, rules },
        }
    }

    /// Whether `rule` allows the connection: `Some((peer, port))`, the first peer and port that
    /// matched (`None` for a rule without peers or ports).
    fn matches(
        &self,
        namespace: &str,
        dir: Direction,
        rule: &Rule,
        local: &Pod,
        peer: IpAddr,
        q: &Query,
    ) -> Option<(Option<usize>, Option<usize>)> {
        let by = if rule.peers.is_empty() {
            None
        } else {
            Some(
                rule.peers
                    .iter()
                    .position(|p| self.holds(namespace, p, peer))?,
            )
        };
        if rule.ports.is_empty() {
            return Some((by, None));
        }
        let port = rule
            .ports
            .iter()
            .position(|p| self.port(dir, p, local, peer, q))?;
        Some((by, Some(port)))
    }

    /// Whether one peer of a policy of `namespace` (`""`: cluster-scoped) holds `ip`.
    fn holds(&self, namespace: &str, peer: &Peer, ip: IpAddr) -> bool {
        match peer {
            Peer::Block { cidr, except } => {
                cidr.contains(ip) && !except.iter().any(|e| e.contains(ip))
            }
            Peer::Nodes(sel) => self
                .w
                .nodes
                .iter()
                .any(|n| sel.matches(&n.labels) && n.addresses.contains(&ip)),
            Peer::Pods { namespaces, pods } => self.w.pods.iter().any(|p| {
                p.ips.contains(&ip)
                    && pods.matches(&p.labels)
                    && match namespaces {
                        None => p.namespace == namespace,
                        Some(sel) => sel.matches(&self.ns_labels(&p.namespace)),
                    }
            }),
        }
    }

    /// A namespace's labels; one not in the World has only the label the API server always
    /// sets (as the compiler reads it).
    fn ns_labels(&self, name: &str) -> Labels {
        match self.w.namespaces.iter().rev().find(|n| n.name == name) {
            Some(n) => n.labels.clone(),
            None => Labels::from([("kubernetes.io/metadata.name".into(), name.to_owned())]),
        }
    }

    /// Whether a rule's port admits `q`: a named port is resolved against the pod the traffic
    /// goes to — the local pod for ingress, any pod holding the peer address for egress.
    fn port(&self, dir: Direction, p: &Port, local: &Pod, peer: IpAddr, q: &Query) -> bool {
        if p.protocol != q.protocol {
            return false;
        }
        match &p.port {
            PortRef::Any => true,
            PortRef::Range(lo, hi) => (*lo..=*hi).contains(&q.port),
            PortRef::Named(name) => {
                let named = |pod: &Pod| {
                    pod.ports
                        .iter()
                        .any(|c| c.name == *name && c.protocol == p.protocol && c.port == q.port)
                };
                match dir {
                    Direction::Ingress => named(local),
                    Direction::Egress => self
                        .w
                        .pods
                        .iter()
                        .any(|pod| pod.ips.contains(&peer) && named(pod)),
                }
            }
        }
    }
}

mod answer;
mod cluster;
pub use answer::{ClusterRuleRef, Error, Judgement, Path, PolicyRef, RuleRef, Trace};

#[cfg(test)]
mod tests;

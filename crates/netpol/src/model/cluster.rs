//! ClusterNetworkPolicy (`policy.networking.k8s.io/v1alpha2`, module
//! `sigs.k8s.io/network-policy-api` v0.3.0, `apis/v1alpha2/clusternetworkpolicy_types.go`) as
//! the compiler reads it, and the Nodes its egress `nodes` peers select.
//!
//! Invariant: a rule never matches more than its object says, except where the API itself says
//! to fail closed. A peer or protocol tern cannot read makes its whole rule fail closed as the
//! API's docs say ("For Accept rules, fail closed means: treat the rule as matching no traffic.
//! For Deny and Pass rules, fail closed means: treat the rule as a 'Deny all' rule"); a
//! `domainNames` peer (experimental, Accept only; tern resolves no names) matches nothing, so
//! the lower-precedence Deny the API tells administrators to pair it with applies.

use std::net::IpAddr;

use super::{LabelSelector, Labels, Peer, Pod, Port};

/// `spec.tier`: where a policy is judged, before (`Admin`) or after (`Baseline`) NetworkPolicy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// Before NetworkPolicy: its Accept and Deny are final.
    Admin,
    /// After NetworkPolicy, only for pods no NetworkPolicy isolates in that direction.
    Baseline,
}

impl Tier {
    /// The value as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Admin => "Admin",
            Tier::Baseline => "Baseline",
        }
    }
}

/// A rule's `action`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// Allow, and judge no further rule of this tier or a later one (in this direction).
    Accept,
    /// Drop, and judge no further rule.
    Deny,
    /// Skip the rest of this tier: judge the next tier (Admin: NetworkPolicy; Baseline: the
    /// default, allow).
    Pass,
}

impl Action {
    /// The value as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Accept => "Accept",
            Action::Deny => "Deny",
            Action::Pass => "Pass",
        }
    }
}

/// `spec.subject`: the pods (not host-network) a policy applies to. `namespaces` alone is
/// read as `pods` with the empty podSelector (every pod of those namespaces).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    /// `namespaces`, or `pods.namespaceSelector`.
    pub namespaces: LabelSelector,
    /// `pods.podSelector` (empty for `namespaces`).
    pub pods: LabelSelector,
}

impl Subject {
    /// Whether the subject selects `pod`, whose namespace has `ns_labels`.
    pub fn selects(&self, pod: &Pod, ns_labels: &Labels) -> bool {
        self.namespaces.matches(ns_labels) && self.pods.matches(&pod.labels)
    }
}

/// One ingress or egress rule of a ClusterNetworkPolicy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterRule {
    /// `name` (may be empty).
    pub name: String,
    /// `action`.
    pub action: Action,
    /// `from`/`to`: `namespaces` and `pods` as [`Peer::Pods`] (always with a
    /// namespaceSelector), `networks` as [`Peer::Block`] (no `except`), `nodes` as
    /// [`Peer::Nodes`]. Empty: the rule matches nothing (the API requires at least one peer;
    /// `domainNames` peers and Accept rules failed closed are left out).
    pub peers: Vec<Peer>,
    /// `protocols`, a `destinationNamedPort` once per protocol; empty: every protocol and
    /// port.
    pub ports: Vec<Port>,
    /// Why part of the rule matches nothing or the rule was made a Deny of everything (a
    /// `domainNames` peer, a peer or protocol tern cannot read); `None` for a rule read whole.
    pub note: Option<String>,
}

/// A ClusterNetworkPolicy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterPolicy {
    /// `metadata.name` (cluster-scoped).
    pub name: String,
    /// `spec.tier`.
    pub tier: Tier,
    /// `spec.priority`, 0..=1000: lower first within a tier.
    pub priority: u16,
    /// `spec.subject`.
    pub subject: Subject,
    /// `spec.ingress`, in precedence order.
    pub ingress: Vec<ClusterRule>,
    /// `spec.egress`, in precedence order.
    pub egress: Vec<ClusterRule>,
}

/// A ClusterNetworkPolicy as [`read_cluster_policy`](super::read_cluster_policy) read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterPolicyRead {
    /// Read whole.
    Ok(ClusterPolicy),
    /// Its subject was read, but not all the rest: `policy` holds every rule that could be read,
    /// the others failed closed (an Accept matches nothing, a Deny or Pass denies everything);
    /// a tier or priority that cannot be read makes every rule of the directions present a
    /// Deny of everything, in the Admin tier at priority 0 when the tier cannot be read.
    Closed {
        /// The stand-in.
        policy: ClusterPolicy,
        /// What could not be read.
        error: String,
    },
    /// Not even `spec.subject` could be read: it can apply to no pod.
    Unreadable {
        /// Why.
        error: String,
    },
}

/// A Node as egress `nodes` peers see it: `metadata.labels` and the addresses of
/// `status.addresses` (every type that holds an IP; `Hostname` entries do not).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeInfo {
    /// `metadata.labels`.
    pub labels: Labels,
    /// The IPs of `status.addresses`.
    pub addresses: Vec<IpAddr>,
}

impl ClusterPolicy {
    /// The rules of `dir`'s field (`ingress` for `Ingress`).
    pub fn rules(&self, ingress: bool) -> &[ClusterRule] {
        if ingress {
            &self.ingress
        } else {
            &self.egress
        }
    }

    /// Whether the policy has rules in at least one direction (one without affects no
    /// traffic: "CNPs with no ingress rules do not affect ingress traffic").
    pub fn has_rules(&self) -> bool {
        !self.ingress.is_empty() || !self.egress.is_empty()
    }
}

//! What a trace answers: the policies isolating each end, the rule allowing each direction,
//! and the verdict of each path; see the parent module for the semantics.

use std::fmt;
use std::net::IpAddr;

use super::Direction;
use crate::model::{Action, Tier};

/// A policy isolating one end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyRef {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// Why it could not be read whole, when it is the fail-closed stand-in
    /// (`model::read_policy`): it isolates and allows nothing.
    pub closed: Option<String>,
}

/// The rule of a policy that allows one direction, and what of it matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleRef {
    /// The policy.
    pub policy: PolicyRef,
    /// `ingress` or `egress`.
    pub direction: Direction,
    /// The rule's index in `spec.ingress` or `spec.egress`.
    pub rule: usize,
    /// The first peer (`from[i]`/`to[i]`) holding the other end's address; `None`: the rule
    /// has no peers (anywhere).
    pub peer: Option<usize>,
    /// The first port (`ports[i]`) that matched; `None`: the rule has no ports (every port).
    pub port: Option<usize>,
}

/// The ClusterNetworkPolicy rule that decided one direction, or passed it on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterRuleRef {
    /// The policy's `metadata.name`.
    pub policy: String,
    /// Its `spec.tier`.
    pub tier: Tier,
    /// Its `spec.priority`.
    pub priority: u16,
    /// `ingress` or `egress`.
    pub direction: Direction,
    /// The rule's index in `spec.ingress` or `spec.egress`.
    pub rule: usize,
    /// The rule's `name` (may be empty).
    pub name: String,
    /// Its action (a rule that could not be read: the one it failed closed to).
    pub action: Action,
    /// Why the rule matches less than written or was made a Deny of everything
    /// (`model::ClusterRule::note`).
    pub note: Option<String>,
}

/// How one end judges the connection in one direction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// No policy isolates it in this direction: allowed.
    NotIsolated,
    /// The source address is no pod's: nothing judges its egress.
    NotAPod,
    /// Isolated by `isolated_by`; `rules` allow it (every one that does).
    Allowed {
        /// The policies isolating this end in this direction, in the World's order.
        isolated_by: Vec<PolicyRef>,
        /// The allowing rules.
        rules: Vec<RuleRef>,
    },
    /// Isolated by `isolated_by`, and no rule of theirs allows it.
    Denied {
        /// The policies isolating this end in this direction.
        isolated_by: Vec<PolicyRef>,
    },
    /// A ClusterNetworkPolicy rule decided: Accept allows, Deny denies (a Baseline Pass hands
    /// the connection to the default: allowed).
    Cluster(ClusterRuleRef),
    /// An Admin tier Pass rule handed the connection on; `then` is how NetworkPolicy (or,
    /// when none isolates this end, the Baseline tier) judged it.
    Passed {
        /// The Pass rule.
        by: ClusterRuleRef,
        /// The judgement after it.
        then: Box<Judgement>,
    },
}

impl Judgement {
    /// Whether the connection passes.
    pub fn allows(&self) -> bool {
        match self {
            Judgement::Denied { .. } => false,
            Judgement::Cluster(r) => r.action != Action::Deny,
            Judgement::Passed { then, .. } => then.allows(),
            _ => true,
        }
    }
}

/// The connection between one source and one destination address of the same family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Path {
    /// The source address.
    pub src: IpAddr,
    /// The destination address.
    pub dst: IpAddr,
    /// The source pod's egress.
    pub egress: Judgement,
    /// The destination pod's ingress.
    pub ingress: Judgement,
}

impl Path {
    /// Whether both ends allow it.
    pub fn allowed(&self) -> bool {
        self.egress.allows() && self.ingress.allows()
    }
}

/// The answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// The source pod's `namespace/name`; `None` when the source address is no pod's.
    pub from: Option<String>,
    /// The destination pod's `namespace/name`.
    pub to: String,
    /// A pod's traffic to its own address: never judged, `paths` is empty.
    pub own: bool,
    /// Each source address to each destination address of its family.
    pub paths: Vec<Path>,
}

impl Trace {
    /// Allowed: the pod's own traffic, or every path allowed.
    pub fn allowed(&self) -> bool {
        self.own || self.paths.iter().all(Path::allowed)
    }
}

/// Why a connection cannot be traced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// No pod of that `namespace/name`.
    NoSuchPod(String),
    /// The pod has no address of its own.
    NoAddress(String),
    /// Source and destination share no address family.
    NoCommonFamily {
        /// The source.
        from: String,
        /// The destination.
        to: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoSuchPod(key) => write!(f, "no pod {key}: check the namespace and the name"),
            Error::NoAddress(key) => write!(
                f,
                "pod {key} has no address of its own (host network, finished, or not running \
                 yet): its traffic is its node's, trace the node's address instead"
            ),
            Error::NoCommonFamily { from, to } => write!(
                f,
                "{from} and {to} have no address of the same family: no connection between them"
            ),
        }
    }
}

impl std::error::Error for Error {}

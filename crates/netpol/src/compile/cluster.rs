//! ClusterNetworkPolicy in the compiler (pure): per local pod and direction, the rules of the
//! Admin and Baseline tiers that apply to it, in precedence order, as the API defines them
//! (`policy.networking.k8s.io/v1alpha2`, `ClusterNetworkPolicySpec.Tier` and `.Priority`):
//!
//! - a policy applies to a pod its subject selects, in each direction it has rules for;
//! - within a tier, lower `priority` first; the API leaves equal priorities to the
//!   implementation: tern orders them by name; within one policy, rule order;
//! - Admin: the first matching rule decides — Accept allows, Deny drops, Pass hands the
//!   connection to NetworkPolicy; then NetworkPolicy as without cluster policies (isolated: its
//!   allows, else dropped); a pod no NetworkPolicy isolates in that direction goes to the
//!   Baseline tier (Accept, Deny; Pass: to the default), then the default: allowed.
//!
//! A rule's peers are a set like a NetworkPolicy rule's (`sets.rs`, scoped to no namespace: every
//! peer of a ClusterNetworkPolicy names its namespaces), its named ports resolved the same way.

use crate::compile::{matches_of, rule_sets, Allow, Dir};
use crate::model::{Action, ClusterPolicy, ClusterRule, Labels, Pod, Rule, Tier};
use crate::sets::SetDef;

/// One ClusterNetworkPolicy rule resolved for a local pod: what it matches and its action.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TierRule {
    /// The rule's action.
    pub action: Action,
    /// What it matches (any of them), never empty.
    pub matches: Vec<Allow>,
}

/// The rules of both tiers that apply to one local pod in one direction, in precedence order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tiers {
    /// Admin tier: before NetworkPolicy.
    pub admin: Vec<TierRule>,
    /// Baseline tier: after NetworkPolicy, for a pod no NetworkPolicy isolates.
    pub baseline: Vec<TierRule>,
}

impl Tiers {
    /// Whether no rule of either tier applies.
    pub fn is_empty(&self) -> bool {
        self.admin.is_empty() && self.baseline.is_empty()
    }
}

/// A ClusterNetworkPolicy rule as the NetworkPolicy rule the set code reads.
fn as_rule(rule: &ClusterRule) -> Rule {
    Rule {
        peers: rule.peers.clone(),
        ports: rule.ports.clone(),
    }
}

impl ClusterPolicy {
    /// The rules of `dir`.
    pub fn dir_rules(&self, dir: Dir) -> &[ClusterRule] {
        self.rules(dir == Dir::Ingress)
    }

    /// Every set its rules define: a rule's peers, an egress rule's named ports resolved
    /// (a rule without peers matches nothing and defines none).
    pub fn sets(&self) -> Vec<SetDef> {
        let mut out = Vec::new();
        for dir in Dir::BOTH {
            for rule in self.dir_rules(dir).iter().filter(|r| !r.peers.is_empty()) {
                rule_sets("", dir, &as_rule(rule), &mut out);
            }
        }
        out
    }
}

/// What one ClusterNetworkPolicy rule matches for `local` in `dir` (empty: nothing).
pub fn cluster_rule_matches(rule: &ClusterRule, dir: Dir, local: &Pod) -> Vec<Allow> {
    if rule.peers.is_empty() {
        return Vec::new();
    }
    let r = as_rule(rule);
    let mut out = matches_of("", dir, &r, local);
    // A rule whose ports all resolve to nothing matches nothing (not "every port").
    if !rule.ports.is_empty() && out.is_empty() {
        return out;
    }
    out.sort();
    out.dedup();
    out
}

/// The tier rules of `policies` (every ClusterNetworkPolicy, any order) that apply to
/// `local`, whose namespace has `ns_labels`, in `dir`.
pub fn pod_tiers<'a>(
    policies: impl IntoIterator<Item = &'a ClusterPolicy>,
    dir: Dir,
    local: &Pod,
    ns_labels: &Labels,
) -> Tiers {
    let mut applying: Vec<&ClusterPolicy> = policies
        .into_iter()
        .filter(|p| !p.dir_rules(dir).is_empty() && p.subject.selects(local, ns_labels))
        .collect();
    applying.sort_by(|a, b| (a.tier, a.priority, &a.name).cmp(&(b.tier, b.priority, &b.name)));
    let mut tiers = Tiers::default();
    for policy in applying {
        let list = match policy.tier {
            Tier::Admin => &mut tiers.admin,
            Tier::Baseline => &mut tiers.baseline,
        };
        for rule in policy.dir_rules(dir) {
            let matches = cluster_rule_matches(rule, dir, local);
            if !matches.is_empty() {
                list.push(TierRule {
                    action: rule.action,
                    matches,
                });
            }
        }
    }
    tiers
}

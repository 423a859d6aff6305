//! `--cluster-network-policy`'s kinds in the store: ClusterNetworkPolicies (cluster-scoped,
//! keyed by name) and the Nodes their egress `nodes` peers select.
//!
//! Invariant: as for NetworkPolicies (`watch.rs`), a ClusterNetworkPolicy that cannot be read
//! whole fails closed (`model::read_cluster_policy`): one whose rules cannot all be read is kept
//! as its stand-in (an unreadable Accept matches nothing, an unreadable Deny or Pass denies
//! everything, as the API's docs say); one whose subject cannot be read is dropped (a stale
//! version of it would be wrong too) and only counted.

use std::collections::BTreeSet;
use std::sync::Arc;

use tern_netpol::model::{ClusterPolicyRead, NodeInfo};
use tracing::{error, info, warn};

use super::{Put, Watched};
use crate::netpol::store::{Kind, Store, Unreadable};

/// Records what became of the ClusterNetworkPolicy `name` (`None`: read whole, or deleted),
/// logging only when that changed.
fn note_unreadable(store: &mut Store, name: &str, now: Option<(Unreadable, String)>) {
    if store.unreadable_cluster.get(name) == now.as_ref() {
        return;
    }
    match now {
        Some((why, e)) => {
            match why {
                Unreadable::Rules => {
                    warn!(policy = %name, error = %e, "cluster network policy: cannot read all of this ClusterNetworkPolicy; the rules that cannot be read fail closed (an Accept matches nothing, a Deny or Pass denies everything) until it can be read")
                }
                Unreadable::PodSelector => {
                    error!(policy = %name, error = %e, "cluster network policy: cannot read which pods this ClusterNetworkPolicy applies to (spec.subject); it applies to none")
                }
            }
            store.unreadable_cluster.insert(name.to_owned(), (why, e));
        }
        None => {
            info!(policy = %name, "cluster network policy: a ClusterNetworkPolicy that could not be read was read whole or deleted");
            store.unreadable_cluster.remove(name);
        }
    }
}

/// Forgets the unreadable ClusterNetworkPolicies a list no longer holds.
pub(super) fn forget_unreadable(store: &mut Store, keep: &BTreeSet<&str>) {
    let gone: Vec<String> = store
        .unreadable_cluster
        .keys()
        .filter(|k| !keep.contains(k.as_str()))
        .cloned()
        .collect();
    for name in gone {
        note_unreadable(store, &name, None);
    }
}

impl Watched for ClusterPolicyRead {
    const KIND: Kind = Kind::ClusterPolicies;

    fn set(store: &mut Store, name: &Arc<str>, new: Option<&Arc<Self>>) -> Put {
        let (policy, unreadable) = match new.map(|p| (**p).clone()) {
            None => (None, None),
            Some(ClusterPolicyRead::Ok(p)) => (Some(p), None),
            Some(ClusterPolicyRead::Closed { policy, error }) => {
                (Some(policy), Some((Unreadable::Rules, error)))
            }
            Some(ClusterPolicyRead::Unreadable { error }) => {
                (None, Some((Unreadable::PodSelector, error)))
            }
        };
        let read = unreadable.is_none();
        note_unreadable(store, name, unreadable);
        match &policy {
            Some(p) => store.cluster_tiers.insert(name.to_string(), p.tier),
            None => store.cluster_tiers.remove(&**name),
        };
        Put {
            changed: store.engine.set_cluster_policy(name, policy.map(Arc::new)),
            read,
        }
    }
}

impl Watched for NodeInfo {
    const KIND: Kind = Kind::Nodes;

    fn set(store: &mut Store, name: &Arc<str>, new: Option<&Arc<Self>>) -> Put {
        if new.is_some() {
            store.nodes.insert(name.to_string());
        } else {
            store.nodes.remove(&**name);
        }
        Put {
            changed: store.engine.set_node(name, new.map(|n| &**n)),
            read: true,
        }
    }
}

#[cfg(test)]
mod tests;

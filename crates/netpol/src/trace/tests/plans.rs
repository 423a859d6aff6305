//! The compiled plans of a whole cluster read as the table reads them: the reference the
//! trace's verdicts are checked against.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::world_with;
use crate::compile::{compile, Allow, LocalPod, TierRule, World};
use crate::model::{Action, ClusterPolicy, Namespace, Pod, Policy, Protocol};
use crate::sets::{Contents, SetId};

/// The compiled plans of every node of `pods` (a node has a name), as one list.
pub(super) fn plans(pods: &[Pod], nss: &[Namespace], pols: &[Policy]) -> Plans {
    plans_with(pods, nss, pols, &[])
}

/// As [`plans`], with ClusterNetworkPolicies.
pub(super) fn plans_with(
    pods: &[Pod],
    nss: &[Namespace],
    pols: &[Policy],
    cluster: &[ClusterPolicy],
) -> Plans {
    let mut nodes: Vec<&str> = pods
        .iter()
        .map(|p| p.node.as_str())
        .filter(|n| !n.is_empty())
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    let mut out = Plans::default();
    for node in nodes {
        let w = World {
            node,
            ..world_with(pods, nss, pols, cluster)
        };
        let plan = compile(&w);
        out.pods.extend(plan.pods);
        out.sets
            .extend(plan.sets.into_iter().map(|(id, (_, c))| (id, c)));
    }
    out
}

/// Every node's isolated pods, and the sets their rules name (one id, one set, on every node).
#[derive(Default)]
pub(super) struct Plans {
    pods: Vec<LocalPod>,
    sets: BTreeMap<SetId, Contents>,
}

/// Whether one compiled allow rule admits the other end at `peer` on `proto`/`port`, read as
/// the table's rules read it (`ruleset.rs`).
fn admits(
    sets: &BTreeMap<SetId, Contents>,
    a: &Allow,
    peer: IpAddr,
    proto: Protocol,
    port: u16,
) -> bool {
    match a {
        Allow::Match { peers, ports } => {
            peers.is_none_or(|id| sets.get(&id).is_some_and(|s| s.addrs.contains(peer)))
                && ports.as_ref().is_none_or(|list| {
                    list.iter().any(|r| {
                        r.protocol == proto
                            && r.range.is_none_or(|(lo, hi)| lo <= port && port <= hi)
                    })
                })
        }
        Allow::Endpoints(id) => sets
            .get(id)
            .is_some_and(|s| s.endpoints.contains(&(peer, proto, port))),
    }
}

/// The compiled plans' verdict on `src` to `dst`: the source's egress chain (when a plan
/// isolates the address) and the destination's ingress chain; an address the maps do not
/// hold is not judged, and a pod's own traffic never reaches the table.
pub(super) fn plan_allows(
    plans: &Plans,
    dst_pod: &[IpAddr],
    src: IpAddr,
    dst: IpAddr,
    proto: Protocol,
    port: u16,
) -> bool {
    if dst_pod.contains(&src) {
        return true;
    }
    // One pod's chains in one direction: the Admin tier (Pass returns), NetworkPolicy's
    // allows else the Baseline tier (Pass returns), then accept.
    let judge = |at: IpAddr, eg: bool, peer: IpAddr| {
        let Some(p) = plans.pods.iter().find(|p| p.ips.contains(&at)) else {
            return true;
        };
        let (np, tiers) = if eg {
            (p.egress.as_ref(), &p.tiers[1])
        } else {
            (p.ingress.as_ref(), &p.tiers[0])
        };
        let hit = |r: &&TierRule| {
            r.matches
                .iter()
                .any(|a| admits(&plans.sets, a, peer, proto, port))
        };
        if let Some(r) = tiers.admin.iter().find(hit) {
            if r.action != Action::Pass {
                return r.action == Action::Accept;
            }
        }
        if let Some(l) = np {
            return l.iter().any(|a| admits(&plans.sets, a, peer, proto, port));
        }
        tiers
            .baseline
            .iter()
            .find(hit)
            .is_none_or(|r| r.action != Action::Deny)
    };
    judge(src, true, dst) && judge(dst, false, src)
}

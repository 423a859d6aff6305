//! The changes of `--netpol-compile` (and `--netpol-change-cost`) that isolate a local pod: a
//! policy created that selects one (its chain changes: made, and its old one removed when no
//! other pod shares it, as an isolating policy's creation does on the nodes of the pods it
//! selects), with or without an ipBlock peer, and its deletion.

use std::sync::Arc;

use tern_netpol::model::{Peer, Policy};
use tern_netpol::Engine;

use super::{policy, Cluster, Rng, Shape};

/// Where the names of the policies [`policy_for_local_pod`] makes start: without an ipBlock,
/// with one.
const LOCAL_POLICIES: usize = 10_000_000;
const BLOCK_POLICIES: usize = 20_000_000;

fn name(n: usize, block: bool) -> String {
    let base = if block {
        BLOCK_POLICIES
    } else {
        LOCAL_POLICIES
    };
    format!("np{}", base + n)
}

/// The ipBlock peer of change `n`: `172.16.0.0/12` except one `/24` of its own, so that every
/// such policy's peers differ (a peer set is named by its peers as written: each policy makes
/// a new interval set, as a policy with its own ipBlock does).
fn block(n: usize) -> Option<Peer> {
    let cidr = "172.16.0.0/12".parse().ok()?;
    let except = format!("172.{}.{}.0/24", 16 + n % 16, (n / 16) % 256);
    Some(Peer::Block {
        cidr,
        except: vec![except.parse().ok()?],
    })
}

/// A new policy (named by [`name`]) that selects a random local pod by its namespace and app
/// label; with `with_block`, its ingress rule's peers also hold an ipBlock (its peer sets are
/// interval sets: the pods the rule names and the block minus its except).
pub(super) fn policy_for_local_pod(
    r: &mut Rng,
    shape: &Shape,
    c: &mut Cluster,
    e: &mut Engine,
    n: usize,
    with_block: bool,
) {
    let local: Vec<usize> = (0..c.pods.len())
        .filter(|&i| c.pods[i].node == "n0")
        .collect();
    let Some(&i) = local.get(r.below(local.len().max(1))) else {
        return;
    };
    // An index that is neither a tenth's namespace peer nor the ipBlock egress of `policy`.
    let Some(mut p) = policy(r, shape, LOCAL_POLICIES + n * 10 + 3, n % 7) else {
        return;
    };
    p.name = name(n, with_block);
    p.namespace = c.pods[i].namespace.to_string();
    let app = c.pods[i].labels.get("app").cloned().unwrap_or_default();
    p.pod_selector.match_labels.insert("app".into(), app);
    if with_block {
        let peer = block(n);
        if let Some(rule) = p.ingress.first_mut() {
            rule.peers.extend(peer);
        }
    }
    set(e, &p);
    c.policies.push(p);
}

fn set(e: &mut Engine, p: &Policy) {
    e.set_policy(
        &format!("{}/{}", p.namespace, p.name),
        Some(Arc::new(p.clone())),
    );
}

/// Deletes the policy [`policy_for_local_pod`] made as change `n` (a random one when it made
/// none).
pub(super) fn delete_policy_for_local_pod(
    r: &mut Rng,
    c: &mut Cluster,
    e: &mut Engine,
    n: usize,
    with_block: bool,
) {
    let name = name(n, with_block);
    let i = c.policies.iter().position(|p| p.name == name);
    let p = c
        .policies
        .swap_remove(i.unwrap_or(r.below(c.policies.len())));
    e.set_policy(&format!("{}/{}", p.namespace, p.name), None);
}

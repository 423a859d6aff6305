//! Pod admission (`admitPod` on the agent channel, sent by tern's ADD before it returns): the
//! pod's addresses go into the store before the kubelet posts them to the API server, and the
//! answer waits until the kernel table isolates the pod when a policy selects it.
//!
//! Order of an admission, all bounded by the plugin's wait: (1) every kind listed and the Pod
//! in the store, scheduled to this node, with the UID the runtime passed (the Pod exists before
//! its sandbox, but its watch event may lag); (2) its addresses recorded
//! ([`Store::admitted`](super::store::Store::admitted)) and the generation bumped by the
//! admission itself (never left to the Pod event that carries the addresses: an event that
//! changes nothing the compiler reads leaves the generation, so the wait cannot hang on one);
//! (3) no policy isolates it: answer at once (the table learns its address on the next tick, so
//! isolated peers refuse it meanwhile: a delay, not a hole); otherwise wait for
//! [`Store::applied`](super::store::Store::applied) to reach that generation.
//!
//! Invariant: `admitted { isolated: true }` is only answered once the table that isolates the
//! pod's addresses is in the kernel; a failed admission leaves no admitted addresses behind.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_kube::channel::Outcome;
use tracing::{debug, warn};

use super::store::{AdmittedPod, Shared, Store};

/// Most addresses one pod may be admitted with (one per family, with room for more IPAM
/// ranges).
pub const MAX_IPS: usize = 8;

/// The pod an admission is for, as tern's ADD names it (`CNI_ARGS`) with its addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmitRequest {
    /// `K8S_POD_NAMESPACE`.
    pub namespace: String,
    /// `K8S_POD_NAME`.
    pub name: String,
    /// `K8S_POD_UID` (`None`: any pod of that name).
    pub uid: Option<String>,
    /// The addresses ADD gave it.
    pub ips: Vec<IpAddr>,
}

/// The agent channel's handle on the NetworkPolicy controller.
#[derive(Clone)]
pub struct PodAdmission {
    shared: Arc<Shared>,
}

impl PodAdmission {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        PodAdmission { shared }
    }

    /// Admits `req`, waiting at most `wait`: `admitted` (with whether a policy isolates the
    /// pod) or `failed` with the reason.
    pub fn admit(&self, req: &AdmitRequest, wait: Duration) -> Outcome {
        let started = Instant::now();
        match admit(&self.shared, req, started + wait) {
            Ok(isolated) => {
                debug!(pod = %key(req), isolated, seconds = started.elapsed().as_secs_f64(), "network policy: pod admitted");
                Outcome::Admitted { isolated }
            }
            Err(reason) => {
                warn!(pod = %key(req), %reason, "network policy: pod not admitted; its ADD fails and is retried");
                Outcome::Failed { reason }
            }
        }
    }
}

fn key(req: &AdmitRequest) -> String {
    format!("{}/{}", req.namespace, req.name)
}

/// Why the pod cannot be admitted yet; `None` when it can.
fn not_ready(st: &Store, node: &str, req: &AdmitRequest) -> Option<String> {
    if !st.synced() {
        return Some("the agent has not listed Pods, Namespaces and NetworkPolicies yet".into());
    }
    let Some(pod) = st.pods.get(&key(req)) else {
        return Some("the agent's Pod watch has not shown the pod yet".into());
    };
    if let Some(uid) = req.uid.as_deref().filter(|u| !u.is_empty()) {
        if pod.uid != uid {
            return Some(format!(
                "the agent knows a pod of that name with UID {:?}, not {uid:?}",
                pod.uid
            ));
        }
    }
    if pod.node != node {
        return Some(format!(
            "the agent knows the pod on node {:?}, not this node {node:?}",
            pod.node
        ));
    }
    None
}

/// The admission itself; `Ok(isolated)` or the reason it failed.
pub(crate) fn admit(s: &Shared, req: &AdmitRequest, until: Instant) -> Result<bool, String> {
    if req.ips.is_empty() || req.ips.len() > MAX_IPS {
        return Err(format!(
            "a pod is admitted with 1 to {MAX_IPS} addresses, not {}",
            req.ips.len()
        ));
    }
    let key = key(req);
    let mut st = s.store();
    loop {
        if s.stop.is_stopped() {
            return Err("the agent is stopping".into());
        }
        let Some(why) = not_ready(&st, &s.cfg.node_name, req) else {
            break;
        };
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("{why} (waited for it)"));
        }
        st = s
            .changed
            .wait_timeout(st, left)
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
    }
    let pod = &st.pods[&key];
    let uid = pod.uid.clone();
    let mut admitted = pod.pod.clone();
    admitted.ips.clone_from(&req.ips);
    let isolated = st.policies.values().any(|p| p.isolates(&admitted));
    st.admitted.insert(
        key.clone(),
        AdmittedPod {
            uid,
            ips: req.ips.clone(),
        },
    );
    st.settle_admitted(&key);
    st.generation += 1;
    let target = st.generation;
    if !isolated {
        return Ok(false);
    }
    st.waiting += 1;
    s.notify(); // the syncer renders now rather than at its next tick
    let applied = loop {
        if st.applied >= target {
            break Ok(true);
        }
        if s.stop.is_stopped() {
            break Err("the agent is stopping".to_owned());
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break Err("the table that isolates the pod is not in the kernel yet (see the agent's log: the kernel may refuse it)".to_owned());
        }
        st = s
            .changed
            .wait_timeout(st, left)
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
    };
    st.waiting -= 1;
    // The ADD fails and releases the addresses: they must not stay this pod's.
    if applied.is_err() && st.admitted.get(&key).is_some_and(|a| a.ips == req.ips) {
        st.admitted.remove(&key);
        st.generation += 1;
    }
    applied
}

#[cfg(test)]
mod tests;

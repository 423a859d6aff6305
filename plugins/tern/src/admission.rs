//! NetworkPolicy admission on ADD (`networkPolicy` in the netconf; DESIGN.md, "NetworkPolicy in
//! the agent"): before ADD returns, tern-agent is told the pod's addresses over its channel and
//! answers once a policy that selects the pod is in the kernel (at once when none does).
//!
//! Invariant: runs last in ADD, with the undo stack armed, so a refusal leaves nothing behind;
//! without `networkPolicy` it is never called (ADD's latency stays as it was); DEL never comes
//! here.

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use tern_cni::{AddInput, Error};
use tern_kube::channel::{Outcome, Request};
use tern_kube::AgentClient;

use crate::config::{NetworkPolicyConf, TernConf};
use crate::lookup::PodArgs;

/// How often a connect is tried again while no agent listens.
const RECONNECT: Duration = Duration::from_millis(100);

/// With `networkPolicy` in `conf`, asks the agent at `agentSocket` to admit the pod `CNI_ARGS`
/// names with `addrs`, waiting at most `networkPolicy.waitSeconds`. Without it, or for an ADD
/// whose `CNI_ARGS` names no pod (not a Kubernetes pod: no policy can select it), nothing is
/// asked.
///
/// # Errors
/// Code 11 (try again later: the kubelet retries the sandbox) when no agent listens on the
/// socket within the wait (it is tried again every 100 ms), it does not answer within the wait, it does not enforce NetworkPolicy, or it could not
/// admit the pod (its Pod watch did not show the pod in time, its table was not applied).
pub fn admit(input: &AddInput, conf: &TernConf, addrs: &[IpAddr]) -> Result<(), Error> {
    let Some(np) = &conf.network_policy else {
        return Ok(());
    };
    let outcome = ask(input, &conf.agent_socket, np, addrs);
    tern_node::phase::mark("netpol-admit");
    outcome
}

fn ask(
    input: &AddInput,
    socket: &Path,
    np: &NetworkPolicyConf,
    addrs: &[IpAddr],
) -> Result<(), Error> {
    let Some(PodArgs {
        namespace,
        name,
        uid,
    }) = PodArgs::of(input)
    else {
        tracing::debug!("CNI_ARGS names no pod: no NetworkPolicy admission");
        return Ok(());
    };
    let deadline = Instant::now() + np.wait;
    // While no agent listens (a restart, a rollout), try again every 100 ms within the wait:
    // the pod starts once the agent is back rather than after the kubelet's retry backoff.
    let outcome = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let req = Request::AdmitPod {
            namespace: namespace.clone(),
            name: name.clone(),
            uid: uid.clone(),
            ips: addrs.to_vec(),
            wait_ms: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
        };
        match AgentClient::ask(socket, &req, left.max(Duration::from_millis(1))) {
            Err(e) if e.is_agent_not_listening() && left > RECONNECT => {
                std::thread::sleep(RECONNECT);
            }
            other => break other,
        }
    };
    let refused = |why: String| {
        Error::try_again_later(format!(
            "pod {namespace}/{name} not admitted by tern-agent's NetworkPolicy: {why}"
        ))
        .with_details(
            "networkPolicy is set in tern's netconf, so a pod is wired only once tern-agent \
             (run --network-policy) has its rules in the kernel; the kubelet retries",
        )
    };
    match outcome {
        Ok(Outcome::Admitted { isolated }) => {
            tracing::debug!(namespace, name, isolated, "admitted by tern-agent");
            Ok(())
        }
        Ok(Outcome::Failed { reason } | Outcome::Error { reason }) => Err(refused(reason)),
        Ok(other) => Err(refused(format!("unexpected answer {other:?}"))),
        Err(e) => Err(refused(e.to_string())),
    }
}

//! NetworkPolicy admission on ADD (`networkPolicy` in the netconf; DESIGN.md, "NetworkPolicy in
//! the agent"): before ADD returns, tern-agent is told the pod's addresses over its channel and
//! answers once a policy that selects the pod is in the kernel (at once when none does).
//!
//! Invariant: runs last in ADD, with the undo stack armed, so a refusal leaves nothing behind;
//! without `networkPolicy` it is never called (ADD's latency stays as it was); DEL never comes
//! here.

use std::net::IpAddr;
use std::path::Path;

use tern_cni::{AddInput, Error};
use tern_kube::channel::{Outcome, Request};
use tern_kube::AgentClient;

use crate::config::{NetworkPolicyConf, TernConf};
use crate::lookup::PodArgs;

/// With `networkPolicy` in `conf`, asks the agent at `agentSocket` to admit the pod `CNI_ARGS`
/// names with `addrs`, waiting at most `networkPolicy.waitSeconds`. Without it, or for an ADD
/// whose `CNI_ARGS` names no pod (not a Kubernetes pod: no policy can select it), nothing is
/// asked.
///
/// # Errors
/// Code 11 (try again later: the kubelet retries the sandbox) when no agent listens on the
/// socket, it does not answer within the wait, it does not enforce NetworkPolicy, or it could not
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
    let req = Request::AdmitPod {
        namespace: namespace.clone(),
        name: name.clone(),
        uid,
        ips: addrs.to_vec(),
        wait_ms: u64::try_from(np.wait.as_millis()).unwrap_or(u64::MAX),
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
    match AgentClient::ask(socket, &req, np.wait) {
        Ok(Outcome::Admitted { isolated }) => {
            tracing::debug!(namespace, name, isolated, "admitted by tern-agent");
            Ok(())
        }
        Ok(Outcome::Failed { reason } | Outcome::Error { reason }) => Err(refused(reason)),
        Ok(other) => Err(refused(format!("unexpected answer {other:?}"))),
        Err(e) => Err(refused(e.to_string())),
    }
}

//! Pod lookup on ADD (DESIGN.md, "Pod lookup"): what IPAM is asked for.
//!
//! The API call itself runs in `tern-lookup` (found in `CNI_PATH`), so tern links no HTTP or TLS
//! (docs/decisions/0009).
//!
//! Invariant: runs before anything is created, so a refused or failed lookup leaves nothing. DEL,
//! CHECK, STATUS and GC never come here (they make no API call).

use std::borrow::Cow;

use serde_json::Value;
use tern_cni::{AddInput, Error};
use tern_kube::helper::{self, Call, PodCall, PodReply};

use crate::config::TernConf;

/// The pod a Kubernetes runtime names in `CNI_ARGS` (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`, and
/// `K8S_POD_UID` when not empty), for the pod lookup and the NetworkPolicy admission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodArgs {
    /// `K8S_POD_NAMESPACE`.
    pub namespace: String,
    /// `K8S_POD_NAME`.
    pub name: String,
    /// `K8S_POD_UID`, absent or empty as `None`.
    pub uid: Option<String>,
}

impl PodArgs {
    /// `None` when `CNI_ARGS` lacks the namespace or the name (not a Kubernetes pod).
    pub fn of(input: &AddInput) -> Option<PodArgs> {
        Some(PodArgs {
            namespace: input.args.get("K8S_POD_NAMESPACE")?.to_owned(),
            name: input.args.get("K8S_POD_NAME")?.to_owned(),
            uid: input
                .args
                .get("K8S_POD_UID")
                .filter(|u| !u.is_empty())
                .map(ToOwned::to_owned),
        })
    }
}

/// The netconf bytes to send to IPAM for this ADD: the config as received, plus the `ips`
/// runtimeConfig when the pod's `tern.io/ip-addrs` annotation asks for addresses.
///
/// The lookup runs only when `kubernetes.kubeconfig` is set and `CNI_ARGS` names the pod
/// (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`; `K8S_POD_UID` is checked when present).
///
/// # Errors
/// Code 11 when the API server or the agent cannot answer in time (401 after a refresh, agent
/// unreachable with an expired token, timeouts, 5xx, 429, connection or TLS failures, an
/// unreadable kubeconfig); code 3 when the pod is gone, terminating or has another UID (nothing
/// was wired, so the runtime needs no DEL); code 7 for a malformed annotation; code 105 for a
/// 403 (not retried: RBAC must be fixed); code 5 otherwise; code 7 when `tern-lookup` is not in
/// `CNI_PATH`.
pub fn ipam_stdin<'a>(input: &'a AddInput, conf: &TernConf) -> Result<Cow<'a, [u8]>, Error> {
    let Some(kube) = &conf.kubernetes else {
        return Ok(Cow::Borrowed(&input.config.bytes));
    };
    let Some(pod) = PodArgs::of(input) else {
        tracing::debug!("CNI_ARGS names no pod: no lookup");
        return Ok(Cow::Borrowed(&input.config.bytes));
    };
    let call = Call::Pod(PodCall {
        kubeconfig: kube.kubeconfig.clone(),
        agent_socket: conf.agent_socket.clone(),
        namespace: pod.namespace,
        name: pod.name,
        uid: pod.uid,
        deadline_ms: u64::try_from(kube.lookup_timeout.as_millis()).unwrap_or(u64::MAX),
    });
    let info: PodReply = helper::call(&input.cni_path, &call)?;
    if info.ip_addrs.is_empty() {
        return Ok(Cow::Borrowed(&input.config.bytes));
    }
    let ips: Vec<Value> = info
        .ip_addrs
        .iter()
        .map(|ip| Value::String(ip.to_string()))
        .collect();
    input
        .config
        .bytes_with_runtime_config("ips", Value::Array(ips))
        .map(Cow::Owned)
}

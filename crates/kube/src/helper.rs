//! `tern-lookup`, the one process of tern that talks to the API server on a plugin's behalf:
//! tern's pod lookup and tern-ipam's first-ADD node read run in it, exec'd from `CNI_PATH` like a
//! delegate, only when a netconf sets `kubernetes.kubeconfig` (docs/decisions/0009,
//! the plugins' API reads in tern-lookup).
//!
//! Why a separate process: a plugin's peak RSS is its resident text, and the TLS stack (rustls,
//! ring), the HTTP client and the YAML parser were more than a third of tern's text, mapped on
//! every ADD although most networks never call the API.
//!
//! Protocol: the request is one JSON [`Call`] on stdin; the answer is one JSON object on stdout —
//! [`PodReply`] or [`NodeReply`] with exit status 0, or a CNI error object (`code`, `msg`) with
//! exit status 1, whose code the plugin passes on unchanged. The `CNI_*` environment a delegate
//! gets is ignored.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tern_cni::{code, Delegate, Error, Verb};

use crate::lookup::{pod_lookup, LookupError, LookupRequest};

/// The helper's binary name, looked up in `CNI_PATH`.
pub const HELPER: &str = "tern-lookup";

/// How long the helper may take beyond the call's own budget (its start-up, the kubeconfig read)
/// before the plugin kills it, with its children, and fails with code 11.
pub const HELPER_GRACE: Duration = Duration::from_secs(1);

/// One API read, as the plugin asks for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Call {
    /// tern's pod lookup ([`pod_lookup`]).
    Pod(PodCall),
    /// tern-ipam's `usePodCidr` read of the node (`GET /api/v1/nodes/{name}`).
    Node(NodeCall),
}

impl Call {
    /// The time the call itself may take (its `deadlineMs` or `timeoutMs`).
    pub fn budget(&self) -> Duration {
        Duration::from_millis(match self {
            Call::Pod(p) => p.deadline_ms,
            Call::Node(n) => n.timeout_ms,
        })
    }
}

/// A pod lookup: the fields of [`LookupRequest`], owned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCall {
    /// The token kubeconfig (netconf `kubernetes.kubeconfig`).
    pub kubeconfig: PathBuf,
    /// The agent socket (netconf `agentSocket`).
    pub agent_socket: PathBuf,
    /// `K8S_POD_NAMESPACE`.
    pub namespace: String,
    /// `K8S_POD_NAME`.
    pub name: String,
    /// `K8S_POD_UID`, when the runtime gives it.
    pub uid: Option<String>,
    /// Budget for the whole lookup, in milliseconds.
    pub deadline_ms: u64,
}

/// A node read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCall {
    /// The kubeconfig to read the node with.
    pub kubeconfig: PathBuf,
    /// `metadata.name` of the node.
    pub name: String,
    /// Budget for the GET, in milliseconds.
    pub timeout_ms: u64,
}

/// The answer to [`Call::Pod`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReply {
    /// The addresses the pod's `tern.io/ip-addrs` annotation asks for (empty when absent).
    pub ip_addrs: Vec<IpAddr>,
}

/// The answer to [`Call::Node`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeReply {
    /// The node's `spec.podCIDRs`, as the API lists them.
    #[serde(rename = "podCIDRs")]
    pub pod_cidrs: Vec<String>,
}

/// The CNI code of a failed pod lookup: 11 for what a later ADD may not see (401 after the agent
/// refresh, agent unreachable with an expired token, timeouts, 5xx, 429, an unreadable
/// kubeconfig); 3 for a pod that is gone, terminating or recreated (nothing was wired, the
/// runtime need not DEL); 7 for a malformed `tern.io/ip-addrs`; 105 for a 403; 5 otherwise.
pub fn lookup_error(e: &LookupError) -> Error {
    let code = match e {
        e if e.try_again_later() => code::TRY_AGAIN_LATER,
        LookupError::Kubeconfig(_) => code::TRY_AGAIN_LATER,
        LookupError::PodGone { .. }
        | LookupError::Terminating { .. }
        | LookupError::UidMismatch { .. } => code::UNKNOWN_CONTAINER,
        LookupError::BadAnnotation { .. } => code::INVALID_NETWORK_CONFIG,
        LookupError::Forbidden { .. } => code::API_FORBIDDEN,
        _ => code::IO_FAILURE,
    };
    Error::new(code, e.to_string())
}

/// Refuses what no namespace, pod or node can be named (RFC 1123 subdomain: lowercase letters,
/// digits, `-` and `.`, at most 253), since names become URL path segments: `code` 4 for pod
/// names (from `CNI_ARGS`), 7 for the node name (from the netconf or the host name).
fn object_name(what: &str, name: &str, code: u32) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !name.starts_with(['-', '.'])
        && !name.ends_with(['-', '.']);
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            code,
            format!("{what} {name:?} is not a Kubernetes object name"),
        ))
    }
}

/// Serves one call in this process (the helper's `main`): the reply as JSON.
///
/// # Errors
/// For a pod: [`lookup_error`]'s code. For a node: code 105 for a 403, otherwise 11, with the
/// client's message (the plugin words it).
pub fn serve(call: &Call) -> Result<serde_json::Value, Error> {
    let json = |v: Result<serde_json::Value, serde_json::Error>| {
        v.map_err(|e| Error::io(format!("encode the reply: {e}")))
    };
    match call {
        Call::Pod(p) => {
            object_name("namespace", &p.namespace, code::INVALID_ENVIRONMENT)?;
            object_name("pod name", &p.name, code::INVALID_ENVIRONMENT)?;
            let req = LookupRequest {
                kubeconfig: &p.kubeconfig,
                agent_socket: &p.agent_socket,
                namespace: &p.namespace,
                name: &p.name,
                uid: p.uid.as_deref(),
                deadline: Duration::from_millis(p.deadline_ms),
            };
            let info = pod_lookup(&req).map_err(|e| lookup_error(&e))?;
            json(serde_json::to_value(PodReply {
                ip_addrs: info.ip_addrs,
            }))
        }
        Call::Node(n) => {
            object_name("node name", &n.name, code::INVALID_NETWORK_CONFIG)?;
            let node = crate::kubeconfig::load(&n.kubeconfig)
                .and_then(|cfg| crate::Client::new(&cfg))
                .and_then(|client| client.get_node(&n.name, Duration::from_millis(n.timeout_ms)))
                .map_err(|e| match e {
                    // Not retried: RBAC must be fixed (as the pod lookup's 403).
                    crate::KubeError::Forbidden { .. } => Error::new(
                        code::API_FORBIDDEN,
                        format!(
                            "{e}; grant the CNI service account \"get\" on \"nodes\" (see deploy/rbac.yaml)"
                        ),
                    ),
                    e => Error::try_again_later(e.to_string()),
                })?;
            json(serde_json::to_value(NodeReply {
                pod_cidrs: node.pod_cidrs,
            }))
        }
    }
}

/// Runs `call` in the `tern-lookup` found in `cni_path` (the plugin side; links no HTTP or TLS).
///
/// # Errors
/// The helper's error with its code; code 7 when `tern-lookup` is not in `CNI_PATH`; code 5 or 6
/// when it cannot be run or answers something that is not a reply; code 11 when it has not ended
/// [`HELPER_GRACE`] after the call's budget (it is then killed with its children).
pub fn call<R: for<'de> Deserialize<'de>>(cni_path: &str, call: &Call) -> Result<R, Error> {
    let stdin =
        serde_json::to_vec(call).map_err(|e| Error::io(format!("encode {HELPER} call: {e}")))?;
    // The delegation machinery (CNI_PATH lookup, ETXTBSY retries, stderr forwarded, error
    // objects kept with their code); the CNI_COMMAND it sets means nothing to the helper.
    let reply = Delegate::without_attachment(HELPER, cni_path)
        .with_deadline(call.budget() + HELPER_GRACE)
        .run(Verb::Add, &stdin)?
        .ok_or_else(|| Error::decode(format!("{HELPER} printed no reply")))?;
    serde_json::from_value(reply).map_err(|e| Error::decode(format!("{HELPER} reply: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_replies_have_a_stable_json_shape() {
        let call = Call::Pod(PodCall {
            kubeconfig: "/etc/cni/net.d/tern-kubeconfig".into(),
            agent_socket: "/run/tern/agent.sock".into(),
            namespace: "ns".into(),
            name: "p".into(),
            uid: None,
            deadline_ms: 5000,
        });
        let v = serde_json::to_value(&call).unwrap();
        assert_eq!(v["pod"]["agentSocket"], "/run/tern/agent.sock");
        assert_eq!(v["pod"]["deadlineMs"], 5000);
        assert_eq!(serde_json::from_value::<Call>(v).unwrap(), call);
        let r: NodeReply = serde_json::from_str(r#"{"podCIDRs":["10.1.0.0/24"]}"#).unwrap();
        assert_eq!(r.pod_cidrs, vec!["10.1.0.0/24".to_string()]);
    }

    #[test]
    fn names_that_are_not_object_names_never_reach_a_url() {
        for bad in [
            "",
            "p1?x=1",
            "p1#frag",
            "../../nodes/n",
            "p 1",
            "P1",
            "-p",
            "p.",
        ] {
            let call = Call::Node(NodeCall {
                kubeconfig: "/nonexistent".into(),
                name: bad.into(),
                timeout_ms: 1,
            });
            assert_eq!(serve(&call).unwrap_err().code, 7, "{bad:?}");
        }
        let call = Call::Node(NodeCall {
            kubeconfig: "/nonexistent".into(),
            name: "node-a.example".into(),
            timeout_ms: 1,
        });
        assert_eq!(
            serve(&call).unwrap_err().code,
            11,
            "a valid name reaches the kubeconfig"
        );
    }

    #[test]
    fn a_missing_helper_is_code_7_naming_it() {
        let e = call::<PodReply>(
            "/nonexistent",
            &Call::Node(NodeCall {
                kubeconfig: "/k".into(),
                name: "n".into(),
                timeout_ms: 1,
            }),
        )
        .unwrap_err();
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("tern-lookup"), "{}", e.msg);
    }
}

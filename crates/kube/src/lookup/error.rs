//! Why a pod lookup failed, and which failures are CNI code 11 ("try again later").

use std::path::PathBuf;

use crate::error::KubeError;

/// Why a lookup failed. [`LookupError::try_again_later`] tells the plugin which ones are CNI
/// code 11.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The kubeconfig is missing or malformed (the inner message names its path).
    #[error("{0}")]
    Kubeconfig(KubeError),
    /// The pod does not exist.
    #[error("pod {namespace}/{name} not found: refusing to wire a sandbox for a pod that is gone")]
    PodGone {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The pod is being deleted.
    #[error(
        "pod {namespace}/{name} is terminating (deletionTimestamp {since}): refusing to wire it"
    )]
    Terminating {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// `metadata.deletionTimestamp`.
        since: String,
    },
    /// The pod was recreated: its UID is not the sandbox's.
    #[error("pod {namespace}/{name} has uid {found}, not K8S_POD_UID {expected}: the pod was deleted and recreated")]
    UidMismatch {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// `K8S_POD_UID`.
        expected: String,
        /// `metadata.uid`.
        found: String,
    },
    /// The `tern.io/ip-addrs` annotation is not a JSON list of IP addresses.
    #[error("pod {namespace}/{name}: annotation tern.io/ip-addrs is malformed ({reason}); expected a JSON list of IP addresses such as [\"10.1.2.3\"]")]
    BadAnnotation {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// 403: the CNI service account lacks a permission; not retried.
    #[error("{message}; grant the CNI service account \"get\" on \"pods\" (see deploy/rbac.yaml)")]
    Forbidden {
        /// The server's Status message naming the missing permission.
        message: String,
    },
    /// The token was refused and the agent could not make it good.
    #[error("API server refused the token in {kubeconfig} (401) {detail}; tern-agent at {socket} is expected to refresh it")]
    Unauthorized {
        /// Kubeconfig path.
        kubeconfig: PathBuf,
        /// Agent socket.
        socket: PathBuf,
        /// What happened after the 401 (agent outcome, retry result).
        detail: String,
    },
    /// The token is expired (or expires within the deadline) and the agent cannot be reached.
    #[error("token in {kubeconfig} is expired or about to expire and tern-agent at {socket} is unreachable: {reason}")]
    AgentUnreachable {
        /// Kubeconfig path.
        kubeconfig: PathBuf,
        /// Agent socket.
        socket: PathBuf,
        /// Why.
        reason: String,
    },
    /// The API server did not answer in time.
    #[error("pod lookup with {kubeconfig} timed out: {source}")]
    Timeout {
        /// Kubeconfig path.
        kubeconfig: PathBuf,
        /// The underlying error.
        source: KubeError,
    },
    /// The API server is unavailable: 5xx, 429, connection or TLS failure.
    #[error("pod lookup with {kubeconfig} failed: {source}")]
    Unavailable {
        /// Kubeconfig path.
        kubeconfig: PathBuf,
        /// The underlying error.
        source: KubeError,
    },
    /// Anything else (unexpected status, undecodable pod).
    #[error("pod lookup with {kubeconfig} failed: {source}")]
    Other {
        /// Kubeconfig path.
        kubeconfig: PathBuf,
        /// The underlying error.
        source: KubeError,
    },
}

impl LookupError {
    /// True for failures a later ADD may not see (CNI code 11, "try again later"): 401 after the
    /// retry, agent unreachable, timeouts, 5xx/429/connection errors.
    pub fn try_again_later(&self) -> bool {
        matches!(
            self,
            Self::Unauthorized { .. }
                | Self::AgentUnreachable { .. }
                | Self::Timeout { .. }
                | Self::Unavailable { .. }
        )
    }
}

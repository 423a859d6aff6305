//! The few Kubernetes objects tern reads and writes, reduced to the fields it uses
//! (`staging/src/k8s.io/api/core/v1/types.go`, `…/authentication/v1/types.go`).
//!
//! Invariant: absent JSON fields decode to their zero value, as `omitempty` means on the server.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::token::BearerToken;

/// What tern needs from a Pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pod {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.deletionTimestamp` (RFC 3339), set once deletion has started.
    pub deletion_timestamp: Option<String>,
    /// `metadata.annotations` (empty when absent).
    pub annotations: BTreeMap<String, String>,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
}

/// What tern needs from a Node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node {
    /// `metadata.name`.
    pub name: String,
    /// `spec.podCIDRs` (at most one per family; empty until assigned). Falls back to
    /// `spec.podCIDR` when only that is set.
    pub pod_cidrs: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawMeta {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub uid: String,
    pub deletion_timestamp: Option<String>,
    #[serde(default)]
    pub annotations: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawPodSpec {
    pub node_name: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct RawPod {
    #[serde(default)]
    pub metadata: RawMeta,
    #[serde(default)]
    pub spec: RawPodSpec,
}

impl From<RawPod> for Pod {
    fn from(p: RawPod) -> Self {
        Pod {
            namespace: p.metadata.namespace,
            name: p.metadata.name,
            uid: p.metadata.uid,
            deletion_timestamp: p.metadata.deletion_timestamp,
            annotations: p.metadata.annotations.unwrap_or_default(),
            node_name: p.spec.node_name,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawNodeSpec {
    #[serde(rename = "podCIDR")]
    pub pod_cidr: Option<String>,
    #[serde(rename = "podCIDRs")]
    pub pod_cidrs: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct RawNode {
    #[serde(default)]
    pub metadata: RawMeta,
    #[serde(default)]
    pub spec: RawNodeSpec,
}

impl From<RawNode> for Node {
    fn from(n: RawNode) -> Self {
        let pod_cidrs = match n.spec.pod_cidrs {
            Some(v) if !v.is_empty() => v,
            _ => n
                .spec
                .pod_cidr
                .into_iter()
                .filter(|c| !c.is_empty())
                .collect(),
        };
        Node {
            name: n.metadata.name,
            pod_cidrs,
        }
    }
}

/// `boundObjectRef` of a TokenRequest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoundObjectReference {
    /// `Pod` or `Secret`.
    pub kind: String,
    /// `v1`.
    pub api_version: String,
    /// Object name.
    pub name: String,
    /// Object UID.
    pub uid: String,
}

/// `spec` of a TokenRequest (`authentication.k8s.io/v1`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenRequestSpec {
    /// Audiences; empty means the API server's own.
    pub audiences: Vec<String>,
    /// Requested lifetime in seconds; `None` lets the server default (3600). The server may
    /// shorten it. Never ask for exactly 3607 (the server would mint a 1-year token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expiration_seconds: Option<i64>,
    /// The object the token is bound to, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_object_ref: Option<BoundObjectReference>,
}

/// What a TokenRequest returned.
#[derive(Debug, Clone)]
pub struct TokenRequestStatus {
    /// `status.token`.
    pub token: BearerToken,
    /// `status.expirationTimestamp` in Unix seconds: the server's expiry, which is what
    /// refreshes must be scheduled from (it may differ from the JWT `exp`).
    pub expiration_timestamp: i64,
    /// `spec.expirationSeconds` as granted (after any server cap), when echoed.
    pub granted_seconds: Option<i64>,
    /// `Warning` headers (e.g. the max-expiration clamp notice).
    pub warnings: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawTokenRequest {
    #[serde(default)]
    pub spec: Option<RawTokenSpec>,
    pub status: Option<RawTokenStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawTokenSpec {
    pub expiration_seconds: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawTokenStatus {
    #[serde(default)]
    pub token: String,
    #[serde(default)]
    pub expiration_timestamp: String,
}

//! The kinds the agent watches, each with its slim type: the fields its consumers read, decoded
//! from one object's JSON (a list item or a watch event's object) and nothing more.
//!
//! Invariant: a slim type compares equal when nothing a consumer reads changed, so the store
//! drops the event (a Pod's conditions, a managedFields entry, a resourceVersion alone).

use serde_json::Value;
use tern_kube::client::nodes::{node_from_json, NodeEntry};
use tern_netpol::model::{namespace_from_json, pod_from_json, read_cluster_policy, read_policy};
use tern_netpol::model::{ClusterPolicyRead, Name, Namespace, NodeInfo, Pod, PolicyRead};

/// A kind: its collection, a label for logs and metrics, and how one object is read.
#[derive(Debug)]
pub struct Kind<T> {
    /// The collection's path (`/api/v1/pods`).
    pub collection: &'static str,
    /// A short name for logs and metric labels (`pods`).
    pub label: &'static str,
    /// One object's JSON into the slim type; `Err` (why) for an object not of the kind's shape.
    pub decode: fn(&Value) -> Result<T, String>,
}

// Not derived: a derive would ask `T: Clone`.
impl<T> Clone for Kind<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Kind<T> {}

/// A Pod as the agent's consumers read it: what the NetworkPolicy compiler reads (namespace,
/// name, UID, labels, node, addresses, named ports), its phase and whether it is being deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodObject {
    /// The compiler's view (`tern_netpol::model::Pod`).
    pub pod: Pod,
    /// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`; empty when absent), one
    /// copy per distinct phase.
    pub phase: Name,
    /// `metadata.deletionTimestamp` is set: the pod is terminating.
    pub deleting: bool,
}

impl std::ops::Deref for PodObject {
    type Target = Pod;

    /// The compiler's view: what most readers want.
    fn deref(&self) -> &Pod {
        &self.pod
    }
}

/// The NetworkPolicy engine keeps the watch layer's object itself (one copy) and reads this view;
/// a change of phase or deletion alone is no change to it.
impl tern_netpol::AsPod for PodObject {
    fn as_pod(&self) -> &Pod {
        &self.pod
    }
}

impl From<Pod> for PodObject {
    /// A running pod, not being deleted.
    fn from(pod: Pod) -> PodObject {
        PodObject {
            pod,
            phase: "Running".into(),
            deleting: false,
        }
    }
}

fn pod(v: &Value) -> Result<PodObject, String> {
    Ok(PodObject {
        pod: pod_from_json(v).map_err(|e| e.to_string())?,
        phase: v["status"]["phase"].as_str().unwrap_or_default().into(),
        deleting: v["metadata"]["deletionTimestamp"].is_string(),
    })
}

fn namespace(v: &Value) -> Result<Namespace, String> {
    namespace_from_json(v).map_err(|e| e.to_string())
}

// Never fails: a policy not read whole is a `PolicyRead` too (it fails closed downstream).
#[allow(clippy::unnecessary_wraps)]
fn policy(v: &Value) -> Result<PolicyRead, String> {
    Ok(read_policy(v))
}

fn node(v: &Value) -> Result<NodeEntry, String> {
    node_from_json(v).map_err(|e| e.to_string())
}

// Never fails, as `policy`: a ClusterNetworkPolicy not read whole fails closed downstream.
#[allow(clippy::unnecessary_wraps)]
fn cluster_policy(v: &Value) -> Result<ClusterPolicyRead, String> {
    Ok(read_cluster_policy(v))
}

fn node_peer(v: &Value) -> Result<NodeInfo, String> {
    tern_netpol::model::node_from_json(v).map_err(|e| e.to_string())
}

/// `/api/v1/pods`.
pub const PODS: Kind<PodObject> = Kind {
    collection: "/api/v1/pods",
    label: "pods",
    decode: pod,
};

/// `/api/v1/namespaces`.
pub const NAMESPACES: Kind<Namespace> = Kind {
    collection: "/api/v1/namespaces",
    label: "namespaces",
    decode: namespace,
};

/// `/apis/networking.k8s.io/v1/networkpolicies`, each read as the compiler reads it (a policy
/// that cannot be read whole is kept as what it fails closed to).
pub const POLICIES: Kind<PolicyRead> = Kind {
    collection: "/apis/networking.k8s.io/v1/networkpolicies",
    label: "networkpolicies",
    decode: policy,
};

/// `/api/v1/nodes`: name, podCIDRs, InternalIPs, the VTEP MAC annotation.
pub const NODES: Kind<NodeEntry> = Kind {
    collection: "/api/v1/nodes",
    label: "nodes",
    decode: node,
};

/// `/apis/policy.networking.k8s.io/v1alpha2/clusternetworkpolicies` (cluster-scoped: keyed by
/// name), each read as the compiler reads it (a policy not read whole is kept as what it fails
/// closed to). v1alpha2 is the version the CRD of sigs.k8s.io/network-policy-api v0.3.0 serves
/// beside v1beta1, with the same schema and no conversion: an object written as either reads the
/// same here.
pub const CLUSTER_POLICIES: Kind<ClusterPolicyRead> = Kind {
    collection: "/apis/policy.networking.k8s.io/v1alpha2/clusternetworkpolicies",
    label: "clusternetworkpolicies",
    decode: cluster_policy,
};

/// `/api/v1/nodes` as ClusterNetworkPolicy's egress `nodes` peers read them: labels and
/// addresses (the routes' [`NODES`] reads other fields of the same objects).
pub const NODE_PEERS: Kind<NodeInfo> = Kind {
    collection: "/api/v1/nodes",
    label: "nodes",
    decode: node_peer,
};

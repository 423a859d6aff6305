//! The kinds the NetworkPolicy controller watches, in the store's order: NetworkPolicy's three,
//! and ClusterNetworkPolicy's two with `--cluster-network-policy`.

/// The kinds watched, in the store's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `/api/v1/pods`.
    Pods,
    /// `/api/v1/namespaces`.
    Namespaces,
    /// `/apis/networking.k8s.io/v1/networkpolicies`.
    Policies,
    /// ClusterNetworkPolicies (`--cluster-network-policy`).
    ClusterPolicies,
    /// Nodes, the peers of ClusterNetworkPolicy's egress `nodes` (`--cluster-network-policy`).
    Nodes,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 5] = [
        Kind::Pods,
        Kind::Namespaces,
        Kind::Policies,
        Kind::ClusterPolicies,
        Kind::Nodes,
    ];

    /// The kinds watched: NetworkPolicy's three, ClusterNetworkPolicy's two with `cluster`.
    pub fn watched(cluster: bool) -> impl Iterator<Item = Kind> {
        Kind::ALL
            .into_iter()
            .filter(move |k| cluster || !k.is_cluster())
    }

    /// Whether the kind is watched only with `--cluster-network-policy`.
    pub fn is_cluster(self) -> bool {
        matches!(self, Kind::ClusterPolicies | Kind::Nodes)
    }

    /// The collection's path.
    pub fn collection(self) -> &'static str {
        match self {
            Kind::Pods => "/api/v1/pods",
            Kind::Namespaces => "/api/v1/namespaces",
            Kind::Policies => "/apis/networking.k8s.io/v1/networkpolicies",
            Kind::ClusterPolicies => {
                "/apis/policy.networking.k8s.io/v1alpha2/clusternetworkpolicies"
            }
            Kind::Nodes => "/api/v1/nodes",
        }
    }

    /// A short name for logs and metric labels.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Pods => "pods",
            Kind::Namespaces => "namespaces",
            Kind::Policies => "networkpolicies",
            Kind::ClusterPolicies => "clusternetworkpolicies",
            Kind::Nodes => "nodes",
        }
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }
}

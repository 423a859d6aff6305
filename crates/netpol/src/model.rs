//! What the policy compiler reads (pure): Pods, Namespaces and NetworkPolicies reduced to the
//! fields that decide a verdict, parsed from their Kubernetes JSON (`core/v1` Pod and Namespace,
//! `networking.k8s.io/v1` NetworkPolicy, field names as the API spells them), and label
//! selectors (`metav1.LabelSelector`) with their matching rules.
//!
//! Invariant: parsing never fails on a field the compiler does not need; an object without the
//! fields it needs parses into something that selects or allows nothing more than the API says
//! (a pod without IPs is no peer and gets no rules; an unknown selector operator matches
//! nothing, the API server rejects such a selector anyway). A NetworkPolicy that cannot be read
//! whole fails closed ([`read_policy`]): what its podSelector selects is isolated and allowed
//! nothing. ClusterNetworkPolicies and Nodes: `model/cluster.rs`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use serde::Deserialize;

/// `metav1.LabelSelector`: `matchLabels` and `matchExpressions`, ANDed. The empty selector
/// matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Each key must be present with exactly this value.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Each requirement must hold.
    #[serde(default)]
    pub match_expressions: Vec<Requirement>,
}

/// One `matchExpressions` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// The values of `In` and `NotIn`.
    #[serde(default)]
    pub values: Vec<String>,
}

/// Labels of an object, sorted by key in one allocation, and that allocation shared by every
/// object with the same labels ([`intern`]: the pods of a Deployment hold one copy): a pod's few
/// labels in a `BTreeMap` would cost a whole node (about half a KiB) per pod, at 150,000 pods
/// 75 MiB.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels(Arc<[(String, String)]>);

/// Every distinct label set held.
static LABEL_SETS: intern::Pool<[(String, String)]> = intern::Pool::new();

impl Default for Labels {
    fn default() -> Labels {
        Labels::new()
    }
}

impl Labels {
    /// No labels.
    pub fn new() -> Labels {
        Labels::shared(Vec::new())
    }

    /// `sorted` (by key, each key once), as the pool's copy.
    fn shared(sorted: Vec<(String, String)>) -> Labels {
        Labels(intern::slice(&LABEL_SETS, &sorted))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&String> {
        let i = self.0.binary_search_by(|(k, _)| k.as_str().cmp(key)).ok()?;
        Some(&self.0[i].1)
    }

    /// Sets `key` to `value`; the value it had.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        let mut v = self.0.to_vec();
        let old = match v.binary_search_by(|(k, _)| k.cmp(&key)) {
            Ok(i) => Some(std::mem::replace(&mut v[i].1, value)),
            Err(i) => {
                v.insert(i, (key, value));
                None
            }
        };
        *self = Labels::shared(v);
        old
    }

    /// Removes `key`; the value it had.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let mut v = self.0.to_vec();
        let i = v.binary_search_by(|(k, _)| k.as_str().cmp(key)).ok()?;
        let old = v.remove(i).1;
        *self = Labels::shared(v);
        Some(old)
    }

    /// Every label, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &String)> {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl FromIterator<(String, String)> for Labels {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Labels {
        let map: BTreeMap<String, String> = iter.into_iter().collect();
        Labels::shared(map.into_iter().collect())
    }
}

impl<const N: usize> From<[(String, String); N]> for Labels {
    fn from(a: [(String, String); N]) -> Labels {
        a.into_iter().collect()
    }
}

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Labels, D::Error> {
        Ok(BTreeMap::<String, String>::deserialize(d)?
            .into_iter()
            .collect())
    }
}

impl LabelSelector {
    /// Whether `labels` satisfy the selector (apimachinery's `LabelSelectorAsSelector`:
    /// `NotIn` and `DoesNotExist` hold for a missing key; an unknown operator never holds).
    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let got = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => got.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => !got.is_some_and(|v| r.values.contains(v)),
                    "Exists" => got.is_some(),
                    "DoesNotExist" => got.is_none(),
                    _ => false,
                }
            })
    }
}

/// A transport protocol a policy port names (`TCP` when not given).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
pub enum Protocol {
    /// TCP.
    #[serde(rename = "TCP")]
    Tcp,
    /// UDP.
    #[serde(rename = "UDP")]
    Udp,
    /// SCTP (matched on its header's destination port; needs no SCTP support in the kernel).
    #[serde(rename = "SCTP")]
    Sctp,
}

impl Protocol {
    /// The name nft's `meta l4proto` takes.
    pub fn nft(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }

    /// Its IP protocol number (what `meta l4proto` compares).
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }
}

fn tcp() -> Protocol {
    Protocol::Tcp
}

/// A named container port (`spec.containers[].ports[]` with a `name`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NamedPort {
    /// `name` (an IANA_SVC_NAME).
    pub name: String,
    /// `protocol`.
    pub protocol: Protocol,
    /// `containerPort`.
    pub port: u16,
}

/// A Pod as the compiler sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    /// `metadata.namespace` (shared by the namespace's pods).
    pub namespace: Name,
    /// `metadata.name`.
    pub name: String,
    /// The UID the kubelet knows the pod by (`K8S_POD_UID`): `metadata.uid`, or for a static
    /// pod's mirror its `kubernetes.io/config.mirror` annotation (the static pod's own UID);
    /// empty when absent. Tells a pod from an earlier one of the same name.
    pub uid: String,
    /// `metadata.labels`.
    pub labels: Labels,
    /// `spec.nodeName` (empty until scheduled; shared by the node's pods).
    pub node: Name,
    /// `status.podIPs`, else `status.podIP`; empty for host-network pods and pods that have
    /// finished (`Succeeded`, `Failed`: their addresses may already be another pod's).
    pub ips: Vec<IpAddr>,
    /// The named ports of its containers, init containers included (restartable sidecars);
    /// shared by the pods with the same ones ([`Pod::shared_ports`]).
    pub ports: Arc<[NamedPort]>,
}

/// Every distinct list of named ports held.
static PORT_LISTS: intern::Pool<[NamedPort]> = intern::Pool::new();

impl Pod {
    /// `ports` as the copy shared by every pod with the same named ports.
    pub fn shared_ports(ports: &[NamedPort]) -> Arc<[NamedPort]> {
        intern::slice(&PORT_LISTS, ports)
    }
}

/// A Namespace: its name and labels (`kubernetes.io/metadata.name` is set by the API server).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: Labels,
}

/// A port of a rule: `port` is a number, a named port, or absent (every port of the protocol).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortRef {
    /// Every port.
    Any,
    /// `port`..=`endPort` (`endPort` absent: one port).
    Range(u16, u16),
    /// A container port's name, resolved against the pod the traffic goes to.
    Named(String),
}

/// `NetworkPolicyPort`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    /// `protocol`.
    pub protocol: Protocol,
    /// `port` and `endPort`.
    pub port: PortRef,
}

/// `NetworkPolicyPeer`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    /// `podSelector` and/or `namespaceSelector`: `namespaces` `None` means the policy's own
    /// namespace; `pods` absent is the empty selector (every pod of those namespaces).
    Pods {
        /// `namespaceSelector`.
        namespaces: Option<LabelSelector>,
        /// `podSelector`.
        pods: LabelSelector,
    },
    /// `ipBlock`: `cidr` minus every `except`.
    Block {
        /// `cidr`.
        cidr: ipnetwork::IpNetwork,
        /// `except`.
        except: Vec<ipnetwork::IpNetwork>,
    },
    /// A ClusterNetworkPolicy's egress `nodes`: the addresses of the Nodes the selector
    /// selects (never a NetworkPolicy's).
    Nodes(LabelSelector),
}

/// One ingress or egress rule: traffic from/to any of `peers` (empty: anywhere) on any of
/// `ports` (empty: every port).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    /// `from` or `to`.
    pub peers: Vec<Peer>,
    /// `ports`.
    pub ports: Vec<Port>,
}

/// A NetworkPolicy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.podSelector`: the pods of its namespace it isolates.
    pub pod_selector: LabelSelector,
    /// `Ingress` in `spec.policyTypes` (default: always).
    pub ingress_isolates: bool,
    /// `Egress` in `spec.policyTypes` (default: when `spec.egress` has rules).
    pub egress_isolates: bool,
    /// `spec.ingress`.
    pub ingress: Vec<Rule>,
    /// `spec.egress`.
    pub egress: Vec<Rule>,
}

impl Policy {
    /// Whether this policy isolates `pod` in at least one direction: same namespace, selected
    /// by `podSelector`, with `Ingress` or `Egress` in force (the compiler's rule).
    pub fn isolates(&self, pod: &Pod) -> bool {
        self.namespace == pod.namespace
            && self.pod_selector.matches(&pod.labels)
            && (self.ingress_isolates || self.egress_isolates)
    }
}

/// A NetworkPolicy as [`read_policy`] read it: whole, or failed closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyRead {
    /// Read whole (shared with the engine, which keeps the same copy).
    Read(Arc<Policy>),
    /// Not read whole, but its namespace and `spec.podSelector` were: `policy` isolates the pods
    /// it selects in the directions it names and allows nothing (`ingress` and `egress` empty).
    Closed {
        /// The deny-all stand-in.
        policy: Arc<Policy>,
        /// Why the whole policy could not be read.
        error: String,
    },
    /// Not even its namespace and `spec.podSelector` could be read: it can isolate nothing.
    Unreadable {
        /// Why.
        error: String,
    },
}

mod cluster;
mod cluster_parse;
mod intern;
mod parse;
pub use cluster::{Action, ClusterPolicy, ClusterPolicyRead, ClusterRule, NodeInfo, Subject, Tier};
pub use cluster_parse::{node_from_json, read_cluster_policy};
pub use intern::Name;
pub use parse::{namespace_from_json, pod_from_json, policy_from_json, read_policy};

#[cfg(test)]
mod tests;

//! What the policy compiler reads (pure): Pods, Namespaces and NetworkPolicies reduced to the
//! fields that decide a verdict, parsed from their Kubernetes JSON (`core/v1` Pod and Namespace,
//! `networking.k8s.io/v1` NetworkPolicy, field names as the API spells them), and label
//! selectors (`metav1.LabelSelector`) with their matching rules.
//!
//! Invariant: parsing never fails on a field the compiler does not need; an object without the
//! fields it needs parses into something that selects or allows nothing more than the API says
//! (a pod without IPs is no peer and gets no rules; an unknown selector operator matches
//! nothing, the API server rejects such a selector anyway).

use std::collections::BTreeMap;
use std::net::IpAddr;

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

/// Labels of an object.
pub type Labels = BTreeMap<String, String>;

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
}

fn tcp() -> Protocol {
    Protocol::Tcp
}

/// A named container port (`spec.containers[].ports[]` with a `name`).
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: Labels,
    /// `spec.nodeName` (empty until scheduled).
    pub node: String,
    /// `status.podIPs`, else `status.podIP`; empty for host-network pods and pods that have
    /// finished (`Succeeded`, `Failed`: their addresses may already be another pod's).
    pub ips: Vec<IpAddr>,
    /// The named ports of its containers, init containers included (restartable sidecars).
    pub ports: Vec<NamedPort>,
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

// ---- the API's JSON ----

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    labels: Option<Labels>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawContainerPort {
    #[serde(default)]
    name: Option<String>,
    container_port: i64,
    #[serde(default = "tcp")]
    protocol: Protocol,
}

#[derive(Deserialize, Default)]
struct RawContainer {
    #[serde(default)]
    ports: Vec<serde_json::Value>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawPodSpec {
    #[serde(default)]
    node_name: String,
    #[serde(default)]
    host_network: bool,
    #[serde(default)]
    containers: Vec<RawContainer>,
    #[serde(default)]
    init_containers: Vec<RawContainer>,
}

#[derive(Deserialize)]
struct RawIp {
    ip: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawPodStatus {
    #[serde(default)]
    phase: String,
    #[serde(default, rename = "podIP")]
    pod_ip: String,
    #[serde(default, rename = "podIPs")]
    pod_ips: Vec<RawIp>,
}

#[derive(Deserialize)]
struct RawPod {
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    spec: RawPodSpec,
    #[serde(default)]
    status: RawPodStatus,
}

/// A Pod from its API JSON.
///
/// # Errors
/// The JSON is not an object of the Pod's shape (a field of the wrong type).
pub fn pod_from_json(v: &serde_json::Value) -> Result<Pod, serde_json::Error> {
    let raw = RawPod::deserialize(v)?;
    let finished = matches!(raw.status.phase.as_str(), "Succeeded" | "Failed");
    let mut ips: Vec<IpAddr> = raw
        .status
        .pod_ips
        .iter()
        .filter_map(|i| i.ip.parse().ok())
        .collect();
    if ips.is_empty() {
        ips.extend(raw.status.pod_ip.parse::<IpAddr>().ok());
    }
    if raw.spec.host_network || finished {
        ips.clear();
    }
    let ports = raw
        .spec
        .containers
        .iter()
        .chain(&raw.spec.init_containers)
        .flat_map(|c| &c.ports)
        .filter_map(|p| RawContainerPort::deserialize(p).ok())
        .filter_map(|p| {
            Some(NamedPort {
                name: p.name.filter(|n| !n.is_empty())?,
                protocol: p.protocol,
                port: u16::try_from(p.container_port).ok()?,
            })
        })
        .collect();
    Ok(Pod {
        namespace: raw.metadata.namespace,
        name: raw.metadata.name,
        labels: raw.metadata.labels.unwrap_or_default(),
        node: raw.spec.node_name,
        ips,
        ports,
    })
}

#[derive(Deserialize)]
struct RawNamespace {
    #[serde(default)]
    metadata: Meta,
}

/// A Namespace from its API JSON.
///
/// # Errors
/// The JSON is not of the Namespace's shape.
pub fn namespace_from_json(v: &serde_json::Value) -> Result<Namespace, serde_json::Error> {
    let raw = RawNamespace::deserialize(v)?;
    Ok(Namespace {
        name: raw.metadata.name,
        labels: raw.metadata.labels.unwrap_or_default(),
    })
}

#[derive(Deserialize)]
#[serde(untagged)]
enum IntOrString {
    Int(i64),
    Str(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPort {
    #[serde(default = "tcp")]
    protocol: Protocol,
    #[serde(default)]
    port: Option<IntOrString>,
    #[serde(default)]
    end_port: Option<i64>,
}

#[derive(Deserialize)]
struct RawBlock {
    cidr: String,
    #[serde(default)]
    except: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPeer {
    #[serde(default)]
    pod_selector: Option<LabelSelector>,
    #[serde(default)]
    namespace_selector: Option<LabelSelector>,
    #[serde(default)]
    ip_block: Option<RawBlock>,
}

#[derive(Deserialize, Default)]
struct RawRule {
    #[serde(default, alias = "to")]
    from: Vec<RawPeer>,
    #[serde(default)]
    ports: Vec<RawPort>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawPolicySpec {
    #[serde(default)]
    pod_selector: LabelSelector,
    #[serde(default)]
    policy_types: Option<Vec<String>>,
    #[serde(default)]
    ingress: Vec<RawRule>,
    #[serde(default)]
    egress: Vec<RawRule>,
}

#[derive(Deserialize)]
struct RawPolicy {
    #[serde(default)]
    metadata: Meta,
    #[serde(default)]
    spec: RawPolicySpec,
}

/// A network from an ipBlock's text, which the API server validated as a CIDR; host bits are
/// cleared (`10.0.0.1/24` is `10.0.0.0/24`, as the API's ParseCIDR reads it).
fn cidr(text: &str) -> Result<ipnetwork::IpNetwork, String> {
    let n: ipnetwork::IpNetwork = text.parse().map_err(|e| format!("ipBlock {text:?}: {e}"))?;
    ipnetwork::IpNetwork::new(n.network(), n.prefix()).map_err(|e| format!("ipBlock {text:?}: {e}"))
}

fn peer(raw: RawPeer) -> Result<Peer, String> {
    if let Some(b) = raw.ip_block {
        let except = b.except.iter().map(|e| cidr(e)).collect::<Result<_, _>>()?;
        return Ok(Peer::Block {
            cidr: cidr(&b.cidr)?,
            except,
        });
    }
    Ok(Peer::Pods {
        namespaces: raw.namespace_selector,
        pods: raw.pod_selector.unwrap_or_default(),
    })
}

fn port(raw: RawPort) -> Result<Port, String> {
    let in_range = |n: i64| u16::try_from(n).map_err(|_| format!("port {n} out of range"));
    let port = match raw.port {
        None => PortRef::Any,
        Some(IntOrString::Str(s)) => match s.parse::<i64>() {
            Ok(n) => PortRef::Range(in_range(n)?, in_range(n)?),
            Err(_) => PortRef::Named(s),
        },
        Some(IntOrString::Int(n)) => {
            let lo = in_range(n)?;
            let hi = raw.end_port.map(in_range).transpose()?.unwrap_or(lo);
            PortRef::Range(lo, hi.max(lo))
        }
    };
    Ok(Port {
        protocol: raw.protocol,
        port,
    })
}

fn rule(raw: RawRule) -> Result<Rule, String> {
    Ok(Rule {
        peers: raw.from.into_iter().map(peer).collect::<Result<_, _>>()?,
        ports: raw.ports.into_iter().map(port).collect::<Result<_, _>>()?,
    })
}

/// A NetworkPolicy from its API JSON. `policyTypes` absent defaults as the API server's
/// defaulting does: Ingress, plus Egress when `spec.egress` has rules.
///
/// # Errors
/// The JSON is not of the NetworkPolicy's shape, or an ipBlock or port the API server would
/// have refused (the message names it).
pub fn policy_from_json(v: &serde_json::Value) -> Result<Policy, String> {
    let raw = RawPolicy::deserialize(v).map_err(|e| e.to_string())?;
    let types = raw.spec.policy_types.clone();
    let has = |t: &str| types.as_ref().is_some_and(|v| v.iter().any(|x| x == t));
    let (ingress_isolates, egress_isolates) = match &types {
        Some(_) => (has("Ingress"), has("Egress")),
        None => (true, !raw.spec.egress.is_empty()),
    };
    Ok(Policy {
        namespace: raw.metadata.namespace,
        name: raw.metadata.name,
        pod_selector: raw.spec.pod_selector,
        ingress_isolates,
        egress_isolates,
        ingress: raw
            .spec
            .ingress
            .into_iter()
            .map(rule)
            .collect::<Result<_, _>>()?,
        egress: raw
            .spec
            .egress
            .into_iter()
            .map(rule)
            .collect::<Result<_, _>>()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: &[(&str, &str)]) -> Labels {
        v.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn selectors_as_apimachinery_reads_them() {
        let sel: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "team", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist"}
            ]
        }))
        .unwrap();
        let ok = labels(&[("app", "web"), ("tier", "a"), ("team", "x")]);
        assert!(sel.matches(&ok));
        let mut l = ok.clone();
        l.insert("env".into(), "prod".into());
        assert!(!sel.matches(&l), "NotIn prod");
        l = ok.clone();
        l.insert("legacy".into(), "".into());
        assert!(!sel.matches(&l), "DoesNotExist");
        l = ok.clone();
        l.remove("team");
        assert!(!sel.matches(&l), "Exists");
        l = ok.clone();
        l.insert("tier".into(), "c".into());
        assert!(!sel.matches(&l), "In");
        l = ok;
        l.insert("app".into(), "db".into());
        assert!(!sel.matches(&l), "matchLabels");
        assert!(LabelSelector::default().matches(&Labels::new()));
        let odd = LabelSelector {
            match_expressions: vec![Requirement {
                key: "a".into(),
                operator: "Gt".into(),
                values: vec![],
            }],
            ..Default::default()
        };
        assert!(!odd.matches(&labels(&[("a", "1")])));
    }

    #[test]
    fn pods_ips_ports_and_what_is_no_peer() {
        let p = pod_from_json(&json!({
            "metadata": {"namespace": "n", "name": "p", "labels": {"app": "web"}},
            "spec": {"nodeName": "node-a", "containers": [
                {"name": "c", "ports": [{"name": "http", "containerPort": 8080},
                                        {"containerPort": 9000},
                                        {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                        {"name": "odd", "containerPort": 53, "protocol": "ICMP"}]}],
                "initContainers": [{"name": "s", "ports": [{"name": "side", "containerPort": 7000}]}]},
            "status": {"phase": "Running", "podIP": "10.0.0.5",
                       "podIPs": [{"ip": "10.0.0.5"}, {"ip": "fd00::5"}]}
        }))
        .unwrap();
        assert_eq!(p.ips.len(), 2);
        assert_eq!(p.node, "node-a");
        let names: Vec<_> = p.ports.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["http", "dns", "side"]);
        assert_eq!(p.ports[1].protocol, Protocol::Udp);
        let host = pod_from_json(&json!({"spec": {"hostNetwork": true},
            "status": {"podIP": "10.99.0.1"}}))
        .unwrap();
        assert!(host.ips.is_empty());
        let done =
            pod_from_json(&json!({"status": {"phase": "Succeeded", "podIP": "10.0.0.6"}})).unwrap();
        assert!(done.ips.is_empty());
        let old = pod_from_json(&json!({"status": {"podIP": "10.0.0.7"}})).unwrap();
        assert_eq!(old.ips, ["10.0.0.7".parse::<IpAddr>().unwrap()]);
    }

    #[test]
    fn policies_with_defaults_and_every_peer_and_port_kind() {
        let p = policy_from_json(&json!({
            "metadata": {"namespace": "n", "name": "p"},
            "spec": {"podSelector": {},
                "ingress": [{"from": [
                    {"podSelector": {"matchLabels": {"a": "b"}}},
                    {"namespaceSelector": {}},
                    {"namespaceSelector": {"matchLabels": {"x": "y"}}, "podSelector": {}},
                    {"ipBlock": {"cidr": "10.1.0.1/16", "except": ["10.1.2.0/24"]}}],
                    "ports": [{"port": 80}, {"protocol": "UDP", "port": 1000, "endPort": 2000},
                              {"port": "http"}, {"protocol": "SCTP"}, {"port": "443"}]}],
                "egress": [{"to": [{"ipBlock": {"cidr": "fd00::/64"}}]}]}
        }))
        .unwrap();
        assert!(p.ingress_isolates && p.egress_isolates);
        let r = &p.ingress[0];
        assert_eq!(r.peers.len(), 4);
        assert!(matches!(
            &r.peers[0],
            Peer::Pods {
                namespaces: None,
                ..
            }
        ));
        assert!(
            matches!(&r.peers[1], Peer::Pods { namespaces: Some(s), .. } if *s == LabelSelector::default())
        );
        assert!(
            matches!(&r.peers[3], Peer::Block { cidr, except } if cidr.to_string() == "10.1.0.0/16" && except.len() == 1)
        );
        assert_eq!(r.ports[0].port, PortRef::Range(80, 80));
        assert_eq!(r.ports[1].port, PortRef::Range(1000, 2000));
        assert_eq!(r.ports[1].protocol, Protocol::Udp);
        assert_eq!(r.ports[2].port, PortRef::Named("http".into()));
        assert_eq!(r.ports[3].port, PortRef::Any);
        assert_eq!(r.ports[4].port, PortRef::Range(443, 443));
        assert_eq!(p.egress[0].peers.len(), 1);

        let only_in = policy_from_json(&json!({"metadata": {"namespace": "n", "name": "q"},
            "spec": {"podSelector": {}}}))
        .unwrap();
        assert!(only_in.ingress_isolates && !only_in.egress_isolates);
        let only_eg = policy_from_json(&json!({"metadata": {"namespace": "n", "name": "q"},
            "spec": {"podSelector": {}, "policyTypes": ["Egress"]}}))
        .unwrap();
        assert!(!only_eg.ingress_isolates && only_eg.egress_isolates);
        let bad = policy_from_json(
            &json!({"spec": {"ingress": [{"from": [{"ipBlock": {"cidr": "x"}}]}]}}),
        );
        assert!(bad.unwrap_err().contains("ipBlock \"x\""));
    }
}

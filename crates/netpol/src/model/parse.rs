//! The Kubernetes JSON of Pods, Namespaces and NetworkPolicies (field names as the API spells
//! them) into the compiler's model; see the parent module for the invariant.

use std::net::IpAddr;
use std::sync::Arc;

use serde::Deserialize;

use super::*;
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Meta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    labels: Option<Labels>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

/// The annotation a static pod's mirror carries: the static pod's UID, which is what the kubelet
/// passes as `K8S_POD_UID` (kubelet's `ConfigMirrorAnnotationKey`).
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

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
    let mut raw = RawPod::deserialize(v)?;
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
    // Collected with room for four (68 bytes); a pod has one or two, and 150,000 pods keep them.
    ips.shrink_to_fit();
    let ports: Vec<NamedPort> = raw
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
    let mirror_of = raw
        .metadata
        .annotations
        .as_mut()
        .and_then(|a| a.remove(MIRROR_ANNOTATION));
    Ok(Pod {
        namespace: raw.metadata.namespace.into(),
        name: raw.metadata.name,
        uid: mirror_of.unwrap_or(raw.metadata.uid),
        labels: raw.metadata.labels.unwrap_or_default(),
        node: raw.spec.node_name.into(),
        ips,
        ports: Pod::shared_ports(&ports),
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

/// A policy's metadata: only what the compiler reads (labels and annotations of a policy are
/// never read, so one of the wrong type does not make the policy unreadable).
#[derive(Deserialize, Default)]
struct PolicyMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
}

#[derive(Deserialize)]
struct RawPolicy {
    #[serde(default)]
    metadata: PolicyMeta,
    #[serde(default)]
    spec: RawPolicySpec,
}

/// Which directions a policy isolates (ingress, egress), from `spec.policyTypes` (`None` or
/// empty: absent) and whether `spec.egress` has rules: absent, Ingress plus Egress when it has,
/// as the API server's defaulting does (`SetDefaults_NetworkPolicy`).
fn isolation(types: Option<&[String]>, egress_rules: bool) -> (bool, bool) {
    match types.filter(|t| !t.is_empty()) {
        Some(t) => (
            t.iter().any(|x| x == "Ingress"),
            t.iter().any(|x| x == "Egress"),
        ),
        None => (true, egress_rules),
    }
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

/// A NetworkPolicy from its API JSON. `policyTypes` absent (or empty) defaults as the API
/// server's defaulting does: Ingress, plus Egress when `spec.egress` has rules.
///
/// # Errors
/// The JSON is not of the NetworkPolicy's shape, or an ipBlock or port the API server would
/// have refused (the message names it).
pub fn policy_from_json(v: &serde_json::Value) -> Result<Policy, String> {
    let raw = RawPolicy::deserialize(v).map_err(|e| e.to_string())?;
    let (ingress_isolates, egress_isolates) = isolation(
        raw.spec.policy_types.as_deref(),
        !raw.spec.egress.is_empty(),
    );
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

/// A NetworkPolicy from its API JSON, failing closed: [`PolicyRead::Read`] when
/// [`policy_from_json`] reads it; else, when `metadata.namespace` and `spec.podSelector` can be
/// read (absent or `null`: the empty selector, as the API decodes it), [`PolicyRead::Closed`]
/// with a policy that isolates the selected pods in the directions it names and allows nothing
/// (`spec.policyTypes` when readable and not empty, else Ingress plus Egress when `spec.egress`
/// is present and not an empty list: the API's defaulting, read so that rules which cannot be
/// read count as rules); else [`PolicyRead::Unreadable`].
pub fn read_policy(v: &serde_json::Value) -> PolicyRead {
    let error = match policy_from_json(v) {
        Ok(p) => return PolicyRead::Read(Arc::new(p)),
        Err(e) => e,
    };
    match deny_all(v) {
        Ok(policy) => PolicyRead::Closed {
            policy: Arc::new(policy),
            error,
        },
        Err(why) => PolicyRead::Unreadable {
            error: format!("{why} ({error})"),
        },
    }
}

/// The stand-in of a policy whose rules cannot be read; the error names what else cannot be.
fn deny_all(v: &serde_json::Value) -> Result<Policy, String> {
    use serde_json::Value;
    let text = |path: &str| v.pointer(path).and_then(Value::as_str);
    let namespace = text("/metadata/namespace")
        .filter(|n| !n.is_empty())
        .ok_or("metadata.namespace cannot be read")?;
    let spec = v
        .get("spec")
        .filter(|s| s.is_object())
        .ok_or("spec is not an object")?;
    let pod_selector = match spec.get("podSelector") {
        None | Some(Value::Null) => LabelSelector::default(),
        Some(sel) => LabelSelector::deserialize(sel)
            .map_err(|e| format!("spec.podSelector cannot be read: {e}"))?,
    };
    let types = spec
        .get("policyTypes")
        .and_then(|t| Vec::<String>::deserialize(t).ok());
    let egress_rules = spec
        .get("egress")
        .is_some_and(|e| !e.is_null() && e.as_array().is_none_or(|a| !a.is_empty()));
    let (ingress_isolates, egress_isolates) = isolation(types.as_deref(), egress_rules);
    Ok(Policy {
        namespace: namespace.to_owned(),
        name: text("/metadata/name").unwrap_or_default().to_owned(),
        pod_selector,
        ingress_isolates,
        egress_isolates,
        ingress: Vec::new(),
        egress: Vec::new(),
    })
}

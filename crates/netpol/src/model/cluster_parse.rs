//! The Kubernetes JSON of ClusterNetworkPolicies (v1alpha2) and Nodes into the compiler's
//! model; see `cluster.rs` for what fails closed and how.

use std::net::IpAddr;

use serde::Deserialize;
use serde_json::Value;

use super::{
    Action, ClusterPolicy, ClusterPolicyRead, ClusterRule, LabelSelector, Labels, NodeInfo, Peer,
    Port, PortRef, Protocol, Subject, Tier,
};

/// Every IPv4 and every IPv6 address: the peers of a rule failed closed as "Deny all".
fn everywhere() -> Vec<Peer> {
    ["0.0.0.0/0", "::/0"]
        .iter()
        .filter_map(|c| c.parse().ok())
        .map(|cidr| Peer::Block {
            cidr,
            except: Vec::new(),
        })
        .collect()
}

/// A field that is present and not `null`.
fn field<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|x| !x.is_null())
}

fn selector(v: &Value, what: &str) -> Result<LabelSelector, String> {
    LabelSelector::deserialize(v).map_err(|e| format!("{what}: {e}"))
}

/// `NamespacedPod`: both selectors, absent ones empty.
fn namespaced_pod(v: &Value, what: &str) -> Result<(LabelSelector, LabelSelector), String> {
    let part = |k: &str| match field(v, k) {
        None => Ok(LabelSelector::default()),
        Some(s) => selector(s, &format!("{what}.{k}")),
    };
    Ok((part("namespaceSelector")?, part("podSelector")?))
}

/// `spec.subject`: exactly one of `namespaces` and `pods`.
fn subject(spec: &Value) -> Result<Subject, String> {
    let s = field(spec, "subject").ok_or("spec.subject is absent")?;
    match (field(s, "namespaces"), field(s, "pods")) {
        (Some(n), None) => Ok(Subject {
            namespaces: selector(n, "spec.subject.namespaces")?,
            pods: LabelSelector::default(),
        }),
        (None, Some(p)) => {
            let (namespaces, pods) = namespaced_pod(p, "spec.subject.pods")?;
            Ok(Subject { namespaces, pods })
        }
        _ => Err("spec.subject: not exactly one of namespaces and pods".into()),
    }
}

/// A CIDR as the API validates it (`cidr(self) == cidr(self).masked()`).
fn network(v: &Value) -> Result<Peer, String> {
    let text = v.as_str().ok_or("networks: an entry is not a string")?;
    let cidr: ipnetwork::IpNetwork = text
        .parse()
        .map_err(|e| format!("networks {text:?}: {e}"))?;
    if cidr.ip() != cidr.network() {
        return Err(format!("networks {text:?}: host bits set"));
    }
    Ok(Peer::Block {
        cidr,
        except: Vec::new(),
    })
}

/// One peer: `Ok(None)` for a `domainNames` peer (matches nothing).
fn peer(v: &Value, egress: bool, action: Action) -> Result<Option<Vec<Peer>>, String> {
    let kinds: &[&str] = if egress {
        &["namespaces", "pods", "nodes", "networks", "domainNames"]
    } else {
        &["namespaces", "pods"]
    };
    let set: Vec<&str> = kinds
        .iter()
        .copied()
        .filter(|k| field(v, k).is_some())
        .collect();
    let [kind] = set[..] else {
        return Err(format!(
            "a peer sets {} of {kinds:?}, not exactly one (a field of a newer API?)",
            set.len()
        ));
    };
    let x = &v[kind];
    Ok(Some(match kind {
        "namespaces" => vec![Peer::Pods {
            namespaces: Some(selector(x, "namespaces")?),
            pods: LabelSelector::default(),
        }],
        "pods" => {
            let (ns, pods) = namespaced_pod(x, "pods")?;
            vec![Peer::Pods {
                namespaces: Some(ns),
                pods,
            }]
        }
        "nodes" => vec![Peer::Nodes(selector(x, "nodes")?)],
        "networks" => {
            let list = x.as_array().ok_or("networks is not a list")?;
            list.iter().map(network).collect::<Result<_, _>>()?
        }
        _ if action == Action::Accept => return Ok(None),
        _ => return Err("domainNames in a Deny or Pass rule (Accept only)".into()),
    }))
}

/// A `destinationPort`: a number, or a range with start < end, all in 1..=65535.
fn destination_port(v: &Value) -> Result<PortRef, String> {
    let num = |x: Option<&Value>| {
        x.and_then(Value::as_u64)
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n > 0)
    };
    match (field(v, "number"), field(v, "range")) {
        (Some(n), None) => {
            let n = num(Some(n)).ok_or("destinationPort.number out of 1..=65535")?;
            Ok(PortRef::Range(n, n))
        }
        (None, Some(r)) => match (num(r.get("start")), num(r.get("end"))) {
            (Some(lo), Some(hi)) if lo < hi => Ok(PortRef::Range(lo, hi)),
            _ => Err("destinationPort.range: not 1 <= start < end <= 65535".into()),
        },
        _ => Err("destinationPort: not exactly one of number and range".into()),
    }
}

/// One `protocols` entry: one port, or a named port once per protocol.
fn protocol(v: &Value) -> Result<Vec<Port>, String> {
    let kinds = ["tcp", "udp", "sctp", "destinationNamedPort"];
    let set: Vec<&str> = kinds
        .into_iter()
        .filter(|k| field(v, k).is_some())
        .collect();
    let [kind] = set[..] else {
        return Err("a protocols entry sets not exactly one of tcp, udp, sctp, \
                    destinationNamedPort"
            .into());
    };
    let proto = match kind {
        "tcp" => Protocol::Tcp,
        "udp" => Protocol::Udp,
        "sctp" => Protocol::Sctp,
        _ => {
            let name = v[kind]
                .as_str()
                .filter(|n| !n.is_empty())
                .ok_or("destinationNamedPort is not a name")?;
            let each = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp];
            return Ok(each
                .into_iter()
                .map(|protocol| Port {
                    protocol,
                    port: PortRef::Named(name.to_owned()),
                })
                .collect());
        }
    };
    let dport = field(&v[kind], "destinationPort")
        .ok_or_else(|| format!("{kind}.destinationPort is absent"))?;
    Ok(vec![Port {
        protocol: proto,
        port: destination_port(dport)?,
    }])
}

/// The rule a rule that cannot be read fails closed to (`action` `None`: not even it).
fn failed(name: String, action: Option<Action>, why: String) -> ClusterRule {
    let (action, peers) = match action {
        Some(Action::Accept) => (Action::Accept, Vec::new()),
        _ => (Action::Deny, everywhere()),
    };
    ClusterRule {
        name,
        action,
        peers,
        ports: Default::default(),
        note: Some(format!("failed closed: {why}")),
    }
}

/// One rule, and why it failed closed when it did.
fn rule(v: &Value, egress: bool) -> (ClusterRule, Option<String>) {
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let action = match v.get("action").and_then(Value::as_str) {
        Some("Accept") => Some(Action::Accept),
        Some("Deny") => Some(Action::Deny),
        Some("Pass") => Some(Action::Pass),
        _ => None,
    };
    let read = match action {
        Some(a) => matches(v, egress, a).map(|m| (a, m)),
        None => Err(format!(
            "action {:?} is not Accept, Deny or Pass",
            v.get("action")
        )),
    };
    match read {
        Ok((action, (peers, ports, note))) => (
            ClusterRule {
                name,
                action,
                peers,
                ports,
                note,
            },
            None,
        ),
        Err(why) => (failed(name, action, why.clone()), Some(why)),
    }
}

/// A rule's peers (`domainNames` left out, with a note saying so) and ports.
type Matches = (Vec<Peer>, Vec<Port>, Option<String>);

/// What a rule with `action` matches.
fn matches(v: &Value, egress: bool, action: Action) -> Result<Matches, String> {
    let key = if egress { "to" } else { "from" };
    let list = field(v, key)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("{key} is not a list"))?;
    let (mut peers, mut note) = (Vec::new(), None);
    for p in list {
        match peer(p, egress, action).map_err(|why| format!("{key}: {why}"))? {
            Some(mut ps) => peers.append(&mut ps),
            None => note = Some("domainNames: not supported by tern, matches nothing".into()),
        }
    }
    let mut ports = Vec::new();
    if let Some(protos) = field(v, "protocols") {
        let protos = protos.as_array().ok_or("protocols is not a list")?;
        for p in protos {
            ports.append(&mut protocol(p).map_err(|why| format!("protocols: {why}"))?);
        }
    }
    Ok((peers, ports, note))
}

/// The rules of `spec.ingress` or `spec.egress`, and what could not be read.
fn rules(spec: &Value, egress: bool, errors: &mut Vec<String>) -> Vec<ClusterRule> {
    let key = if egress { "egress" } else { "ingress" };
    let Some(v) = field(spec, key) else {
        return Vec::new();
    };
    let Some(list) = v.as_array() else {
        errors.push(format!("spec.{key} is not a list"));
        return vec![failed(
            String::new(),
            None,
            format!("spec.{key} is not a list"),
        )];
    };
    let mut out = Vec::new();
    for (i, r) in list.iter().enumerate() {
        let (rule, why) = rule(r, egress);
        if let Some(why) = why {
            errors.push(format!("spec.{key}[{i}]: {why}"));
        }
        out.push(rule);
    }
    out
}

/// A ClusterNetworkPolicy from its API JSON, failing closed ([`ClusterPolicyRead`]).
pub fn read_cluster_policy(v: &Value) -> ClusterPolicyRead {
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let Some(spec) = field(v, "spec").filter(|s| s.is_object()) else {
        return ClusterPolicyRead::Unreadable {
            error: "spec is not an object".into(),
        };
    };
    let subject = match subject(spec) {
        Ok(s) => s,
        Err(error) => return ClusterPolicyRead::Unreadable { error },
    };
    let mut errors = Vec::new();
    let tier = match spec.get("tier").and_then(Value::as_str) {
        Some("Admin") => Some(Tier::Admin),
        Some("Baseline") => Some(Tier::Baseline),
        t => {
            errors.push(format!("spec.tier {t:?} is not Admin or Baseline"));
            None
        }
    };
    let priority = spec
        .get("priority")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p <= 1000);
    if priority.is_none() {
        errors.push(format!(
            "spec.priority {:?} is not in 0..=1000",
            spec.get("priority")
        ));
    }
    let ingress = rules(spec, false, &mut errors);
    let egress = rules(spec, true, &mut errors);
    let mut policy = ClusterPolicy {
        name,
        tier: tier.unwrap_or(Tier::Admin),
        priority: priority.unwrap_or(0),
        subject,
        ingress,
        egress,
    };
    if tier.is_none() || priority.is_none() {
        let why = errors.join("; ");
        for list in [&mut policy.ingress, &mut policy.egress] {
            if !list.is_empty() {
                *list = vec![failed(String::new(), None, why.clone())];
            }
        }
    }
    if errors.is_empty() {
        ClusterPolicyRead::Ok(policy)
    } else {
        ClusterPolicyRead::Closed {
            policy,
            error: errors.join("; "),
        }
    }
}

#[derive(Deserialize, Default)]
struct RawNodeMeta {
    #[serde(default)]
    labels: Option<Labels>,
}

#[derive(Deserialize)]
struct RawNodeAddress {
    #[serde(default)]
    address: String,
}

#[derive(Deserialize, Default)]
struct RawNodeStatus {
    #[serde(default)]
    addresses: Vec<RawNodeAddress>,
}

#[derive(Deserialize)]
struct RawNode {
    #[serde(default)]
    metadata: RawNodeMeta,
    #[serde(default)]
    status: RawNodeStatus,
}

/// A Node from its API JSON: its labels and the IPs of `status.addresses`, sorted.
///
/// # Errors
/// The JSON is not of the Node's shape.
pub fn node_from_json(v: &Value) -> Result<NodeInfo, serde_json::Error> {
    let raw = RawNode::deserialize(v)?;
    let mut addresses: Vec<IpAddr> = raw
        .status
        .addresses
        .iter()
        .filter_map(|a| a.address.parse().ok())
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    Ok(NodeInfo {
        labels: raw.metadata.labels.unwrap_or_default(),
        addresses,
    })
}

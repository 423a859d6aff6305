//! `tern-agent trace`: why one pod or address can or cannot reach a pod. Lists Pods, Namespaces
//! and NetworkPolicies once (in-cluster credentials, or `--kubeconfig`), reads them as the
//! NetworkPolicy controller does (`model::read_policy`: a policy that cannot be read whole fails
//! closed), runs `tern_netpol::trace::trace` and prints the verdict and its reasons.
//!
//! Invariant: reads the API and nothing else (no table, no host state); exit 0 allowed, 1
//! denied, 2 could not answer.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use serde_json::Value;
use tern_kube::client::objects::key_of;
use tern_netpol::model::{
    namespace_from_json, pod_from_json, read_policy, Namespace, Pod, Policy, PolicyRead, Protocol,
};
use tern_netpol::trace::{
    trace, ClusterRuleRef, Judgement, Path, PolicyRef, Query, RuleRef, Source, Trace,
};
use tern_netpol::World;

use crate::args::{api_server_from, DEFAULT_SA_DIR};
use crate::mint::{in_cluster_client, ApiAccess, DEFAULT_REQUEST_TIMEOUT};
use crate::netpol::store::Kind;

/// `tern-agent trace`'s flags.
#[derive(Debug, Clone, Args)]
pub struct TraceArgs {
    /// The source: a pod as NAMESPACE/NAME, or an address
    #[arg(long, value_name = "NS/POD|IP", value_parser = parse_source)]
    pub from: Source,
    /// The destination pod, as NAMESPACE/NAME
    #[arg(long, value_name = "NS/POD", value_parser = parse_pod)]
    pub to: PodName,
    /// The destination port
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// TCP, UDP or SCTP
    #[arg(long, value_name = "PROTOCOL", default_value = "TCP", value_parser = parse_protocol)]
    pub protocol: Protocol,
    /// Read the API with this kubeconfig (token or tokenFile users) [default: in-cluster
    /// credentials, as `run`'s]
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
}

/// A pod's `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodName {
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
}

fn parse_pod(v: &str) -> Result<PodName, String> {
    match v.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(PodName {
                namespace: ns.into(),
                name: name.into(),
            })
        }
        _ => Err(format!("takes a pod as NAMESPACE/NAME, not {v:?}")),
    }
}

fn parse_source(v: &str) -> Result<Source, String> {
    if let Ok(ip) = v.parse::<IpAddr>() {
        return Ok(Source::Ip(ip));
    }
    let p = parse_pod(v).map_err(|_| format!("takes NAMESPACE/NAME or an address, not {v:?}"))?;
    Ok(Source::Pod {
        namespace: p.namespace,
        name: p.name,
    })
}

fn parse_protocol(v: &str) -> Result<Protocol, String> {
    match v.to_ascii_uppercase().as_str() {
        "TCP" => Ok(Protocol::Tcp),
        "UDP" => Ok(Protocol::Udp),
        "SCTP" => Ok(Protocol::Sctp),
        _ => Err(format!("takes TCP, UDP or SCTP, not {v:?}")),
    }
}

/// What the lists held, read as the controller reads them.
#[derive(Debug, Default)]
pub struct Listed {
    /// The pods that could be read.
    pub pods: Vec<Pod>,
    /// The namespaces that could be read.
    pub namespaces: Vec<Namespace>,
    /// The policies, fail-closed stand-ins included.
    pub policies: Vec<Policy>,
    /// `namespace/name` of each stand-in → why it could not be read whole.
    pub closed: BTreeMap<String, String>,
    /// `namespace/name` of each policy that isolates nothing (its podSelector cannot be read)
    /// → why.
    pub unreadable: BTreeMap<String, String>,
}

impl Listed {
    /// Reads the three lists' items.
    pub fn read(pods: &[Value], namespaces: &[Value], policies: &[Value]) -> Self {
        let mut l = Listed {
            pods: pods.iter().filter_map(|v| pod_from_json(v).ok()).collect(),
            namespaces: namespaces
                .iter()
                .filter_map(|v| namespace_from_json(v).ok())
                .collect(),
            ..Listed::default()
        };
        for v in policies {
            match read_policy(v) {
                PolicyRead::Read(p) => l.policies.push(p),
                PolicyRead::Closed { policy, error } => {
                    l.closed.insert(key_of(v), error);
                    l.policies.push(policy);
                }
                PolicyRead::Unreadable { error } => {
                    l.unreadable.insert(key_of(v), error);
                }
            }
        }
        l
    }

    /// Traces `q` through what was listed.
    ///
    /// # Errors
    /// As [`tern_netpol::trace::trace`].
    pub fn trace(&self, q: &Query) -> Result<Trace, tern_netpol::trace::Error> {
        let w = World {
            node: "",
            pods: &self.pods,
            namespaces: &self.namespaces,
            policies: &self.policies,
            ..World::default()
        };
        trace(&w, &self.closed, q)
    }
}

/// The query of `a`.
pub fn query(a: &TraceArgs) -> Query {
    Query {
        from: a.from.clone(),
        to_namespace: a.to.namespace.clone(),
        to_name: a.to.name.clone(),
        protocol: a.protocol,
        port: a.port,
    }
}

fn policy(p: &PolicyRef) -> String {
    match &p.closed {
        Some(e) => format!(
            "{}/{} (cannot be read whole, allows nothing: {e})",
            p.namespace, p.name
        ),
        None => format!("{}/{}", p.namespace, p.name),
    }
}

fn rule(r: &RuleRef) -> String {
    let (dir, peers) = (r.direction.field(), r.direction.peers_field());
    let peer = r
        .peer
        .map_or(format!("{peers} anywhere"), |i| format!("{peers}[{i}]"));
    let port = r
        .port
        .map_or("every port".into(), |i| format!("ports[{i}]"));
    let p = &r.policy;
    format!("{}/{} {dir}[{}] {peer} {port}", p.namespace, p.name, r.rule)
}

fn list(v: &[String]) -> String {
    v.join(", ")
}

/// One end's reason line: how `who` judged, in `dir`, the connection with the other end at
/// `other` on `service`.
fn reason(who: &str, dir: &str, j: &Judgement, other: IpAddr, service: &str) -> String {
    let by = |p: &[PolicyRef]| list(&p.iter().map(policy).collect::<Vec<_>>());
    match j {
        Judgement::NotIsolated => format!("{dir} of {who}: allowed, no NetworkPolicy isolates it for {dir}"),
        Judgement::NotAPod => format!("{dir} of {who}: no pod has this address, no policy judges its {dir}"),
        Judgement::Allowed { isolated_by, rules } => format!(
            "{dir} of {who}: allowed by {}; isolated by {}",
            list(&rules.iter().map(rule).collect::<Vec<_>>()),
            by(isolated_by)
        ),
        Judgement::Denied { isolated_by } => format!(
            "{dir} of {who}: denied, isolated by {} and no {dir} rule of theirs allows {other} {service}",
            by(isolated_by)
        ),
        Judgement::Cluster(r) => {
            let verdict = if j.allows() { "allowed" } else { "denied" };
            format!("{dir} of {who}: {verdict} by {}", cluster_rule(r))
        }
        Judgement::Passed { by, then } => format!(
            "{} (after {} passed it on)",
            reason(who, dir, then, other, service),
            cluster_rule(by)
        ),
    }
}

/// A ClusterNetworkPolicy rule as printed: policy, tier and priority, rule, action, note.
fn cluster_rule(r: &ClusterRuleRef) -> String {
    let name = if r.name.is_empty() {
        String::new()
    } else {
        format!(" ({})", r.name)
    };
    let note = r.note.as_ref().map_or(String::new(), |n| format!(", {n}"));
    format!(
        "ClusterNetworkPolicy {} ({} tier, priority {}) {}[{}]{name} {}{note}",
        r.policy,
        r.tier.as_str(),
        r.priority,
        r.direction.field(),
        r.rule,
        r.action.as_str()
    )
}

fn path_lines(out: &mut String, t: &Trace, p: &Path, service: &str) {
    let from = match &t.from {
        Some(pod) => format!("{pod} ({})", p.src),
        None => p.src.to_string(),
    };
    let to = format!("{} ({})", t.to, p.dst);
    let _ = writeln!(
        out,
        "  {}",
        reason(&from, "egress", &p.egress, p.dst, service)
    );
    let _ = writeln!(
        out,
        "  {}",
        reason(&to, "ingress", &p.ingress, p.src, service)
    );
}

/// The answer as printed: the verdict, then one reason per line.
pub fn render(l: &Listed, q: &Query, t: &Trace) -> String {
    let service = format!("port {}/{}", q.port, q.protocol.nft().to_ascii_uppercase());
    let verdict = if t.allowed() { "allowed" } else { "denied" };
    let from = match (&t.from, &q.from) {
        (Some(pod), _) => pod.clone(),
        (None, Source::Ip(ip)) => ip.to_string(),
        (None, Source::Pod { namespace, name }) => format!("{namespace}/{name}"),
    };
    let mut out = format!("{verdict}: {from} -> {} {service}\n", t.to);
    if t.own {
        out.push_str("  a pod's traffic to its own address stays in its network namespace: no policy judges it\n");
    }
    for p in &t.paths {
        path_lines(&mut out, t, p, service.as_str());
    }
    if t.from.is_none() {
        let _ = writeln!(
            out,
            "  note: traffic from {}'s own node is never judged",
            t.to
        );
    }
    let namespaces = [
        Some(q.to_namespace.as_str()),
        t.from.as_deref().and_then(|f| f.split('/').next()),
    ];
    for (key, e) in &l.unreadable {
        if namespaces
            .iter()
            .flatten()
            .any(|ns| key.starts_with(&format!("{ns}/")))
        {
            let _ = writeln!(
                out,
                "  note: NetworkPolicy {key} cannot be read and isolates nothing: {e}"
            );
        }
    }
    out
}

/// Lists the three kinds once.
fn fetch(a: &TraceArgs, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Listed> {
    let client = match &a.kubeconfig {
        Some(path) => tern_kube::Client::new(&tern_kube::kubeconfig::load(path)?)?,
        None => {
            let api = ApiAccess {
                // The only refusal without a flag: no in-cluster variables.
                api_server: api_server_from(None, env).map_err(|_| {
                    anyhow::anyhow!("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set (not in a pod): pass --kubeconfig")
                })?,
                sa_dir: DEFAULT_SA_DIR.into(),
                request_timeout: DEFAULT_REQUEST_TIMEOUT,
            };
            in_cluster_client(&api)?.0
        }
    };
    let mut items = Vec::new();
    // NetworkPolicy's three kinds: ClusterNetworkPolicies are not traced yet, and listing them
    // would fail where their CRD is not installed.
    for kind in Kind::watched(false) {
        let list = client
            .list_objects(kind.collection(), DEFAULT_REQUEST_TIMEOUT)
            .with_context(|| format!("list {}", kind.collection()))?;
        items.push(list.items);
    }
    Ok(Listed::read(&items[0], &items[1], &items[2]))
}

/// Runs `tern-agent trace`: prints the answer on stdout, or the error on stderr.
pub fn main(a: &TraceArgs) -> ExitCode {
    let q = query(a);
    let answer = fetch(a, &|k| std::env::var(k).ok()).and_then(|l| Ok((l.trace(&q)?, l)));
    match answer {
        Ok((t, l)) => {
            print!("{}", render(&l, &q, &t));
            ExitCode::from(if t.allowed() { 0 } else { 1 })
        }
        Err(e) => {
            eprintln!("tern-agent: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests;

//! `tern-agent trace`: why one pod or address can or cannot reach a pod. Lists Pods, Namespaces
//! and NetworkPolicies once (in-cluster credentials, or `--kubeconfig`), and ClusterNetworkPolicies
//! with the Nodes their peers select where the API serves them; reads them as the NetworkPolicy
//! controller does (`model::read_policy`, `model::read_cluster_policy`: a policy that cannot be
//! read whole fails closed), runs `tern_netpol::trace::trace` and prints the verdict and its
//! reasons (`trace/render.rs`). Then, on a node (`--node`, `NODE_NAME` in the agent's pod), it
//! compares what the node's table holds for that connection with the table the agent compiles
//! from the same lists (`trace/check.rs`, `trace/kernel.rs`).
//!
//! Invariant: reads the API and, on a node, a few objects of `inet tern_netpol`; changes
//! nothing. Exit 0 allowed, 1 denied, 2 could not answer, 3 the kernel's table differs from
//! the model (the answer printed is the model's).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use serde_json::Value;
use tern_kube::client::objects::key_of;
use tern_kube::KubeError;
use tern_netpol::model::{
    namespace_from_json, node_from_json, pod_from_json, read_cluster_policy, read_policy,
    ClusterPolicy, ClusterPolicyRead, Namespace, NodeInfo, Pod, Policy, PolicyRead, Protocol,
};
use tern_netpol::ruleset::DEFAULT_LOG_GROUP;
use tern_netpol::trace::{trace, Query, Source, Trace};
use tern_netpol::World;

use crate::args::{api_server_from, parse_bool, DEFAULT_SA_DIR};
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
    /// Trace ClusterNetworkPolicies too (true, false, 1 or 0) [default: when the API serves
    /// them]
    #[arg(long, value_name = "BOOL", value_parser = parse_bool, env = "TERN_CLUSTER_NETWORK_POLICY")]
    pub cluster_network_policy: Option<bool>,
    /// The node whose table this is, for the kernel check [default: NODE_NAME, set in the
    /// agent's pod; neither: no check]
    #[arg(long, value_name = "NAME", env = "NODE_NAME", hide_env_values = true)]
    pub node: Option<String>,
    /// Do not compare the answer with this node's table
    #[arg(long)]
    pub no_kernel_check: bool,
    /// The agent's --network-policy-log-group, when it logs denied flows (the log rule's text
    /// is part of each chain's)
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LOG_GROUP,
        value_parser = clap::value_parser!(u16).range(1..))]
    pub network_policy_log_group: u16,
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
    /// The ClusterNetworkPolicies, fail-closed stand-ins included (none where not served).
    pub cluster_policies: Vec<ClusterPolicy>,
    /// The Nodes, for their `nodes` peers (listed with ClusterNetworkPolicies).
    pub nodes: Vec<NodeInfo>,
    /// What the answer says about ClusterNetworkPolicies beside its judgements: one that
    /// applies to no pod (its subject cannot be read), or why none were listed.
    pub cluster_notes: Vec<String>,
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
                PolicyRead::Read(p) => l.policies.push((*p).clone()),
                PolicyRead::Closed { policy, error } => {
                    l.closed.insert(key_of(v), error);
                    l.policies.push((*policy).clone());
                }
                PolicyRead::Unreadable { error } => {
                    l.unreadable.insert(key_of(v), error);
                }
            }
        }
        l
    }

    /// Adds the ClusterNetworkPolicies' and the Nodes' list items, read as `run
    /// --cluster-network-policy` reads them.
    pub fn read_cluster(&mut self, policies: &[Value], nodes: &[Value]) {
        for v in policies {
            match read_cluster_policy(v) {
                ClusterPolicyRead::Ok(p) | ClusterPolicyRead::Closed { policy: p, .. } => {
                    self.cluster_policies.push(p);
                }
                ClusterPolicyRead::Unreadable { error } => self.cluster_notes.push(format!(
                    "ClusterNetworkPolicy {} cannot be read and applies to no pod: {error}",
                    key_of(v)
                )),
            }
        }
        self.nodes = nodes
            .iter()
            .filter_map(|v| node_from_json(v).ok())
            .collect();
    }

    /// The World of what was listed, as the agent of `node` compiles it.
    pub fn world<'a>(&'a self, node: &'a str) -> World<'a> {
        World {
            node,
            pods: &self.pods,
            namespaces: &self.namespaces,
            policies: &self.policies,
            cluster_policies: &self.cluster_policies,
            nodes: &self.nodes,
        }
    }

    /// Traces `q` through what was listed.
    ///
    /// # Errors
    /// As [`tern_netpol::trace::trace`].
    pub fn trace(&self, q: &Query) -> Result<Trace, tern_netpol::trace::Error> {
        trace(&self.world(""), &self.closed, q)
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

/// Lists NetworkPolicy's three kinds once, and ClusterNetworkPolicy's two unless told not to
/// (or where the API does not serve them).
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
    let list = |kind: Kind| {
        client
            .list_objects(kind.collection(), DEFAULT_REQUEST_TIMEOUT)
            .map(|l| l.items)
    };
    let mut items = Vec::new();
    for kind in Kind::watched(false) {
        items.push(list(kind).with_context(|| format!("list {}", kind.collection()))?);
    }
    let mut l = Listed::read(&items[0], &items[1], &items[2]);
    if a.cluster_network_policy == Some(false) {
        return Ok(l);
    }
    match list(Kind::ClusterPolicies) {
        Ok(policies) => {
            let nodes = list(Kind::Nodes).unwrap_or_else(|e| {
                l.cluster_notes.push(format!(
                    "Nodes not listed ({e}): no `nodes` peer of a ClusterNetworkPolicy holds an address"
                ));
                Vec::new()
            });
            l.read_cluster(&policies, &nodes);
        }
        // Not served (no CRD): no ClusterNetworkPolicy can be in force.
        Err(KubeError::NotFound { .. }) if a.cluster_network_policy.is_none() => {}
        // Without the RBAC of deploy/cluster-network-policy/ (the chart's clusterNetworkPolicy
        // off) the agent enforces none either: nothing to say on every trace.
        Err(KubeError::Forbidden { .. }) if a.cluster_network_policy.is_none() => {}
        Err(e) if a.cluster_network_policy.is_none() => l.cluster_notes.push(format!(
            "ClusterNetworkPolicies not traced: cannot list them ({e})"
        )),
        Err(e) => {
            return Err(e).with_context(|| format!("list {}", Kind::ClusterPolicies.collection()))
        }
    }
    Ok(l)
}

/// Runs `tern-agent trace`: prints the answer on stdout, or the error on stderr.
pub fn main(a: &TraceArgs) -> ExitCode {
    let q = query(a);
    let env = |k: &str| std::env::var(k).ok();
    let answer = || -> anyhow::Result<(Trace, Listed, KernelAnswer)> {
        let l = fetch(a, &env)?;
        let t = l.trace(&q)?;
        let k = check::run(a, &l, &q, &t);
        Ok((t, l, k))
    };
    let mut answered = answer();
    if matches!(&answered, Ok((_, _, k)) if k.differs()) {
        // A change between the list and the table: the agent applies one within milliseconds.
        std::thread::sleep(std::time::Duration::from_secs(1));
        answered = answer();
    }
    match answered {
        Ok((t, l, k)) => {
            print!("{}{}", render(&l, &q, &t), k.text());
            let code = if k.differs() {
                3
            } else if t.allowed() {
                0
            } else {
                1
            };
            ExitCode::from(code)
        }
        Err(e) => {
            eprintln!("tern-agent: {e:#}");
            ExitCode::from(2)
        }
    }
}

mod check;
pub mod kernel;
mod render;
pub use check::{compare_on, ends, expected_table, KernelAnswer};
pub use render::render;

#[cfg(test)]
mod tests;

//! The cluster `tern-bench netpol-scale` loads: Namespaces, Nodes, Pods and NetworkPolicies as
//! JSON bodies with the path each is POSTed to, from a seeded generator (one seed, one cluster).
//!
//! Shape (every figure of the run depends on it, so it is written down here):
//! - namespaces `ns-0 .. ns-(K-1)` labelled team=t(k%4), env=prod|dev; `np-free`, where the change
//!   fixtures live; `np-nsl-c` (one per namespace-label change), each holding one pod; each with
//!   its `default` ServiceAccount (no controller-manager makes one; admission wants it);
//! - kwok Nodes `kwok-NNNNN` (podCIDR 10.(64+i/256).(i%256).0/24) and agent Nodes `agent-KKK`
//!   (10.30.k.0/24), the agents' carrying no kwok annotation;
//! - `--local` pods on each agent Node and the rest spread round robin over the kwok Nodes, in
//!   random `ns-*` with labels app=a0..a19, tier=web|db|cache|api, version=v0..v2 and named ports
//!   http/metrics (one in four also dns/UDP), addresses from their Node's podCIDR;
//! - fixtures, all in `np-free` unless said: `fix-k` on agent k (app=fix), which the fixture
//!   policies `peer-in` (from pods role=peer) and `ns-in` (from namespaces peer=yes) select, so
//!   every change below shows in every agent's table; `peer-c` (app=peer, 10.251.1.c+1) on a kwok
//!   Node, labelled role=peer by the `label` change; `newpeer-c` (10.251.2.c+1) created by `newpod`
//!   and deleted by `delpod`; `nsl-c` in `np-nsl-c` (10.251.3.c+1), whose namespace gets peer=yes;
//!   policy `newpol-c` (from 172.16.c.0/24) created, updated to 172.17.c.0/24, deleted;
//! - the ADD phase's pods ([`super::adds`]): `add-open-i` (np-free) and `add-iso-i` (`ns-*`),
//!   app=adds, on agent i % agents, without an address;
//! - policies: a baseline per `ns-k` (even k deny ingress, odd k allow from the same namespace),
//!   the two fixture policies, the rest in six shapes (those of scripts/netpol-scale's cluster, now removed) in
//!   random `ns-*`: pod selector + port and port range; namespace selector + named port; ipBlocks
//!   with except; egress to a pod selector in every namespace and UDP/TCP 53; namespace and pod
//!   selector + named ports; matchExpressions with ingress and egress.

use serde_json::{json, Value};

use crate::cluster::api::Write;

/// Sizes of one run.
#[derive(Clone, Debug)]
pub(crate) struct Shape {
    pub(crate) nodes: usize,
    pub(crate) agents: usize,
    pub(crate) pods: usize,
    pub(crate) local: usize,
    pub(crate) policies: usize,
    pub(crate) namespaces: usize,
    pub(crate) changes: usize,
    /// Fixtures of the relist phase (`--relist`), after the changes phase's.
    pub(crate) relist: usize,
    pub(crate) adds: usize,
    pub(crate) seed: u64,
}

impl Shape {
    /// Fixtures made at the start: the changes phase's, then the relist phase's.
    pub(crate) fn fixtures(&self) -> usize {
        self.changes + self.relist
    }
}

/// A seeded splitmix64: the same seed, the same cluster.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z % n.max(1) as u64) as usize
    }
}

pub(crate) fn kwok_node(i: usize) -> String {
    format!("kwok-{i:05}")
}
pub(crate) fn agent_node(k: usize) -> String {
    format!("agent-{k:03}")
}
fn kwok_cidr(i: usize) -> String {
    format!("10.{}.{}.0/24", 64 + i / 256, i % 256)
}
fn kwok_pod_ip(i: usize, j: usize) -> String {
    format!("10.{}.{}.{}", 64 + i / 256, i % 256, j % 250 + 1)
}
/// The marker addresses of the fixtures: `10.251.<kind>.<c+1>`.
pub(crate) fn fixture_ip(kind: usize, c: usize) -> String {
    format!("10.251.{kind}.{}", c + 1)
}

fn namespace(name: &str, labels: Value) -> Vec<Write> {
    vec![
        Write::post(
            "/api/v1/namespaces".into(),
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}),
        ),
        Write::post(
            format!("/api/v1/namespaces/{name}/serviceaccounts"),
            &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}),
        ),
    ]
}

/// The Namespaces and their ServiceAccounts (first: the rest lives in them).
pub(crate) fn namespaces(s: &Shape) -> Vec<Write> {
    let mut w = Vec::new();
    for k in 0..s.namespaces {
        let env = if k % 2 == 0 { "prod" } else { "dev" };
        w.extend(namespace(
            &format!("ns-{k}"),
            json!({"team": format!("t{}", k % 4), "env": env}),
        ));
    }
    w.extend(namespace("np-free", json!({"team": "free"})));
    for c in 0..s.fixtures() {
        w.extend(namespace(&format!("np-nsl-{c}"), json!({"team": "nsl"})));
    }
    w
}

/// The Nodes: kwok's (annotated for kwok to keep Ready) and the agents'.
pub(crate) fn nodes(s: &Shape) -> Vec<Write> {
    let mut w = Vec::new();
    for i in 0..s.nodes {
        let n = kwok_node(i);
        w.push(Write::post("/api/v1/nodes".into(), &json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n, "labels": {"type": "kwok", "kubernetes.io/hostname": n},
                "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"podCIDR": kwok_cidr(i), "podCIDRs": [kwok_cidr(i)],
                "taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]}})));
    }
    for k in 0..s.agents {
        let n = agent_node(k);
        let cidr = format!("10.30.{k}.0/24");
        w.push(Write::post(
            "/api/v1/nodes".into(),
            &json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
            "spec": {"podCIDR": cidr, "podCIDRs": [cidr]}}),
        ));
    }
    w
}

/// One pod: its create and the status write that gives it its address (phase Running, Ready).
pub(crate) struct PodSpec {
    pub(crate) ns: String,
    pub(crate) name: String,
    pub(crate) node: String,
    pub(crate) ip: String,
    pub(crate) labels: Value,
    pub(crate) dns: bool,
}

impl PodSpec {
    pub(crate) fn create(&self) -> Write {
        let mut ports = vec![
            json!({"name": "http", "containerPort": 8080}),
            json!({"name": "metrics", "containerPort": 9090}),
        ];
        if self.dns {
            ports.push(json!({"name": "dns", "containerPort": 53, "protocol": "UDP"}));
        }
        Write::post(
            format!("/api/v1/namespaces/{}/pods", self.ns),
            &json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "labels": self.labels},
            "spec": {"nodeName": self.node, "automountServiceAccountToken": false,
                "containers": [{"name": "main", "image": "localhost/none:1", "ports": ports}]}}),
        )
    }
    pub(crate) fn status(&self) -> Write {
        Write::merge(
            format!("/api/v1/namespaces/{}/pods/{}/status", self.ns, self.name),
            &json!({"status": {
            "phase": "Running", "podIP": self.ip, "podIPs": [{"ip": self.ip}],
            "conditions": [{"type": "Ready", "status": "True"}]}}),
        )
    }
}

fn generic_labels(r: &mut Rng) -> Value {
    const TIERS: [&str; 4] = ["web", "db", "cache", "api"];
    json!({"app": format!("a{}", r.below(20)), "tier": TIERS[r.below(4)], "version": format!("v{}", r.below(3))})
}

/// Every pod of the start: the generic ones, then the fixtures (`fix-k`, `peer-c`, `nsl-c`).
pub(crate) fn pods(s: &Shape, r: &mut Rng) -> Vec<PodSpec> {
    let mut v = Vec::with_capacity(s.pods);
    for k in 0..s.agents {
        for j in 0..s.local {
            let labels = generic_labels(r);
            v.push(PodSpec {
                ns: format!("ns-{}", r.below(s.namespaces)),
                name: format!("a{k}-{j}"),
                node: agent_node(k),
                ip: format!("10.30.{k}.{}", j % 250 + 2),
                labels,
                dns: r.below(4) == 0,
            });
        }
        v.push(PodSpec {
            ns: "np-free".into(),
            name: format!("fix-{k}"),
            node: agent_node(k),
            ip: format!("10.30.{k}.1"),
            labels: json!({"app": "fix"}),
            dns: false,
        });
    }
    let remote = s
        .pods
        .saturating_sub(v.len() + 2 * s.fixtures() + 2 * s.adds);
    for j in 0..remote {
        let i = j % s.nodes.max(1);
        let labels = generic_labels(r);
        v.push(PodSpec {
            ns: format!("ns-{}", r.below(s.namespaces)),
            name: format!("p-{j}"),
            node: kwok_node(i),
            ip: kwok_pod_ip(i, j / s.nodes.max(1)),
            labels,
            dns: r.below(4) == 0,
        });
    }
    for c in 0..s.fixtures() {
        v.push(PodSpec {
            ns: "np-free".into(),
            name: format!("peer-{c}"),
            node: kwok_node(c % s.nodes.max(1)),
            ip: fixture_ip(1, c),
            labels: json!({"app": "peer"}),
            dns: false,
        });
        v.push(PodSpec {
            ns: format!("np-nsl-{c}"),
            name: format!("nsl-{c}"),
            node: kwok_node(c % s.nodes.max(1)),
            ip: fixture_ip(3, c),
            labels: json!({"app": "nsl"}),
            dns: false,
        });
    }
    v
}

/// The pod `newpeer-c` the `newpod` change creates.
pub(crate) fn newpeer(c: usize) -> PodSpec {
    PodSpec {
        ns: "np-free".into(),
        name: format!("newpeer-{c}"),
        node: kwok_node(0),
        ip: fixture_ip(2, c),
        labels: json!({"app": "peer", "role": "peer"}),
        dns: false,
    }
}

pub(crate) fn policy(ns: &str, name: &str, spec: Value) -> Write {
    Write::post(
        format!("/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"),
        &json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": name}, "spec": spec}),
    )
}

/// The spec of `newpol-c` with ingress from `172.<octet>.c.0/24`.
pub(crate) fn newpol_spec(c: usize, octet: u8) -> Value {
    json!({"podSelector": {"matchLabels": {"app": "fix"}},
        "ingress": [{"from": [{"ipBlock": {"cidr": format!("172.{octet}.{c}.0/24")}}], "ports": [{"port": 443}]}]})
}

fn shape_spec(shape: usize, r: &mut Rng) -> Value {
    let a = format!("a{}", r.below(20));
    let b = format!("a{}", r.below(20));
    let t = format!("t{}", r.below(4));
    let v = format!("v{}", r.below(3));
    let q = r.below(20);
    match shape {
        0 => {
            json!({"podSelector": {"matchLabels": {"app": a}}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"tier": "web"}}}], "ports": [{"port": 80}, {"port": 8000, "endPort": 8100}]}]})
        }
        1 => {
            json!({"podSelector": {"matchLabels": {"tier": "db", "app": a}}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": t}}}], "ports": [{"port": "http"}]}]})
        }
        2 => {
            json!({"podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": [a, b]}]}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": [format!("10.{}.0.0/16", 64 + q), format!("10.30.{q}.0/24")]}}, {"ipBlock": {"cidr": "192.168.0.0/16", "except": [format!("192.168.{q}.0/24")]}}], "ports": [{"port": 443}]}]})
        }
        3 => {
            json!({"podSelector": {"matchLabels": {"app": a}}, "policyTypes": ["Egress"], "egress": [{"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"tier": "cache"}}}], "ports": [{"port": "http"}]}, {"to": [{"ipBlock": {"cidr": "10.96.0.10/32"}}], "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53}]}]})
        }
        4 => {
            json!({"podSelector": {"matchLabels": {"app": a, "version": v}}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"env": "prod"}}, "podSelector": {"matchLabels": {"tier": "api"}}}], "ports": [{"port": "metrics"}, {"port": "dns", "protocol": "UDP"}]}]})
        }
        _ => {
            json!({"podSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["db", "api"]}, {"key": "version", "operator": "NotIn", "values": [v]}, {"key": "app", "operator": "In", "values": [a, b]}]}, "policyTypes": ["Ingress", "Egress"], "ingress": [{"from": [{"podSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}]}], "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "169.254.169.254/32"]}}]}, {"to": [{"podSelector": {"matchLabels": {"tier": "db"}}}], "ports": [{"port": 5432}]}]})
        }
    }
}

/// Every policy of the start.
pub(crate) fn policies(s: &Shape, r: &mut Rng) -> Vec<Write> {
    let mut w = vec![
        policy(
            "np-free",
            "peer-in",
            json!({"podSelector": {"matchLabels": {"app": "fix"}}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "peer"}}}], "ports": [{"port": 8080}]}]}),
        ),
        policy(
            "np-free",
            "ns-in",
            json!({"podSelector": {"matchLabels": {"app": "fix"}}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"peer": "yes"}}}], "ports": [{"port": "http"}]}]}),
        ),
    ];
    for k in 0..s.namespaces {
        let spec = if k % 2 == 0 {
            json!({"podSelector": {}, "policyTypes": ["Ingress"]})
        } else {
            json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]})
        };
        w.push(policy(&format!("ns-{k}"), "baseline", spec));
    }
    for i in w.len()..s.policies {
        let shape = r.below(6);
        let spec = shape_spec(shape, r);
        w.push(policy(
            &format!("ns-{}", r.below(s.namespaces)),
            &format!("pol-{i}"),
            spec,
        ));
    }
    w
}

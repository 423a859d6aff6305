//! The engine against the full compile: after every one of thousands of random changes (pods
//! created, relabelled, moved, given other addresses and ports, deleted; namespaces relabelled
//! and deleted; policies of every peer and port shape created, changed and deleted), the
//! engine's table equals `render(&compile(..))` of the same objects, and what it compiled again
//! was only what the change touched.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use super::*;
use crate::compile::{compile, Dir, World};
use crate::model::{policy_from_json, ClusterPolicy, NamedPort, NodeInfo, Protocol};
use crate::ruleset::{render_logging, LogDenied};

mod cluster;
use cluster::{random_cluster_policy, random_node};

/// xorshift64*: a fixed sequence per seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

const NAMESPACES: [&str; 3] = ["a", "b", "a-b"];
const NODES: [&str; 2] = ["n1", "n2"];

fn random_pod(r: &mut Rng, ns: &str, name: &str) -> Pod {
    let mut labels = Labels::new();
    labels.insert("app".into(), (*r.pick(&["web", "db", "cli"])).into());
    if r.chance(50) {
        labels.insert("tier".into(), (*r.pick(&["x", "y"])).into());
    }
    let mut ips = Vec::new();
    if r.chance(90) {
        // A small pool: addresses are shared, adjacent and reused.
        ips.push(
            format!("10.0.0.{}", r.below(16))
                .parse()
                .unwrap_or(IpAddr::from([0; 4])),
        );
        if r.chance(60) {
            ips.push(
                format!("fd00::{:x}", r.below(16))
                    .parse()
                    .unwrap_or(IpAddr::from([0; 4])),
            );
        }
    }
    let mut ports = Vec::new();
    for _ in 0..r.below(3) {
        ports.push(NamedPort {
            name: (*r.pick(&["h", "d"])).into(),
            protocol: *r.pick(&[Protocol::Tcp, Protocol::Udp]),
            port: *r.pick(&[80, 8080, 53]),
        });
    }
    Pod {
        namespace: ns.into(),
        name: name.into(),
        uid: String::new(),
        labels,
        node: (*r.pick(&NODES)).into(),
        ips,
        ports,
    }
}

fn random_selector(r: &mut Rng, key: &str, values: &[&str]) -> Value {
    match r.below(4) {
        0 => json!({}),
        1 => json!({"matchLabels": {key: r.pick(values)}}),
        2 => json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
        _ => {
            json!({"matchExpressions": [{"key": key, "operator": "NotIn", "values": [r.pick(values)]}]})
        }
    }
}

fn random_peer(r: &mut Rng) -> Value {
    match r.below(4) {
        0 => json!({"podSelector": random_selector(r, "app", &["web", "db", "cli"])}),
        1 => json!({"namespaceSelector": random_selector(r, "team", &["red", "blue"])}),
        2 => json!({"namespaceSelector": random_selector(r, "team", &["red", "blue"]),
                    "podSelector": random_selector(r, "app", &["web", "db", "cli"])}),
        _ => json!({"ipBlock": {"cidr": r.pick(&["10.0.0.0/29", "10.0.0.8/30", "fd00::/124"]),
                    "except": if r.chance(50) { json!(["10.0.0.2/31"]) } else { json!([]) }}}),
    }
}

fn random_rule(r: &mut Rng, to: &str) -> Value {
    let mut rule = serde_json::Map::new();
    if r.chance(80) {
        let peers: Vec<Value> = (0..1 + r.below(2)).map(|_| random_peer(r)).collect();
        rule.insert(to.into(), Value::Array(peers));
    }
    if r.chance(70) {
        let ports: Vec<Value> = (0..1 + r.below(2))
            .map(|_| match r.below(4) {
                0 => json!({"port": 80}),
                1 => json!({"port": 1000, "endPort": 2000, "protocol": "UDP"}),
                2 => json!({"port": r.pick(&["h", "d"])}),
                _ => json!({"protocol": "UDP"}),
            })
            .collect();
        rule.insert("ports".into(), Value::Array(ports));
    }
    Value::Object(rule)
}

fn random_policy(r: &mut Rng, ns: &str, name: &str) -> Policy {
    let types = r
        .pick(&[vec!["Ingress"], vec!["Egress"], vec!["Ingress", "Egress"]])
        .clone();
    let ingress: Vec<Value> = (0..r.below(3)).map(|_| random_rule(r, "from")).collect();
    let egress: Vec<Value> = (0..r.below(3)).map(|_| random_rule(r, "to")).collect();
    let spec = json!({"podSelector": random_selector(r, "app", &["web", "db", "cli"]),
        "policyTypes": types, "ingress": ingress, "egress": egress});
    let obj = json!({"metadata": {"namespace": ns, "name": name}, "spec": spec});
    policy_from_json(&obj).unwrap_or_else(|e| panic!("{obj}: {e}"))
}

/// The objects as the API would hold them, beside the engine.
#[derive(Default)]
struct Mirror {
    pods: BTreeMap<String, Pod>,
    namespaces: BTreeMap<String, Namespace>,
    policies: BTreeMap<String, Policy>,
    cluster: BTreeMap<String, ClusterPolicy>,
    nodes: BTreeMap<String, NodeInfo>,
}

impl Mirror {
    fn full(&self, node: &str, log: Option<LogDenied>) -> Table {
        let pods: Vec<Pod> = self.pods.values().cloned().collect();
        let namespaces: Vec<Namespace> = self.namespaces.values().cloned().collect();
        let policies: Vec<Policy> = self.policies.values().cloned().collect();
        let cluster: Vec<ClusterPolicy> = self.cluster.values().cloned().collect();
        let nodes: Vec<NodeInfo> = self.nodes.values().cloned().collect();
        render_logging(
            &compile(&World {
                node,
                pods: &pods,
                namespaces: &namespaces,
                policies: &policies,
                cluster_policies: &cluster,
                nodes: &nodes,
            }),
            log,
        )
        .0
    }
}

/// One random change, made to both; a description of it.
fn change(r: &mut Rng, m: &mut Mirror, e: &mut Engine) -> String {
    let ns = *r.pick(&NAMESPACES);
    match r.below(13) {
        0..=4 => {
            let key = format!("{ns}/p{}", r.below(12));
            if r.chance(15) {
                m.pods.remove(&key);
                e.set_pod(&key, None);
                return format!("pod {key} deleted");
            }
            let name = key.split('/').nth(1).unwrap_or_default().to_owned();
            let p = random_pod(r, ns, &name);
            m.pods.insert(key.clone(), p.clone());
            e.set_pod(&key, Some(Arc::new(p.clone())));
            format!("pod {key} set to {p:?}")
        }
        5 | 6 => {
            if r.chance(20) {
                m.namespaces.remove(ns);
                e.set_namespace(ns, None);
                return format!("namespace {ns} deleted");
            }
            let mut labels = Labels::from([("kubernetes.io/metadata.name".into(), ns.into())]);
            if r.chance(70) {
                labels.insert("team".into(), (*r.pick(&["red", "blue"])).into());
            }
            let n = Namespace {
                name: ns.into(),
                labels,
            };
            m.namespaces.insert(ns.into(), n.clone());
            e.set_namespace(ns, Some(&n));
            format!("namespace {n:?}")
        }
        10 | 11 => {
            let name = format!("cnp{}", r.below(4));
            if r.chance(20) {
                m.cluster.remove(&name);
                e.set_cluster_policy(&name, None);
                return format!("cluster policy {name} deleted");
            }
            let mut p = random_cluster_policy(r, &name);
            if r.chance(30) {
                // Only the priority changes: the order of the tier's rules does.
                if let Some(old) = m.cluster.get(&name) {
                    p = ClusterPolicy {
                        priority: *r.pick(&[0, 5, 10]),
                        ..old.clone()
                    };
                }
            }
            m.cluster.insert(name.clone(), p.clone());
            e.set_cluster_policy(&name, Some(Arc::new(p.clone())));
            format!("cluster policy {name} set to {p:?}")
        }
        12 => {
            let name = *r.pick(&["n1", "n2", "n3"]);
            if r.chance(20) {
                m.nodes.remove(name);
                e.set_node(name, None);
                return format!("node {name} deleted");
            }
            let n = random_node(r);
            m.nodes.insert(name.into(), n.clone());
            e.set_node(name, Some(&n));
            format!("node {name} set to {n:?}")
        }
        _ => {
            let key = format!("{ns}/np{}", r.below(5));
            if r.chance(20) {
                m.policies.remove(&key);
                e.set_policy(&key, None);
                return format!("policy {key} deleted");
            }
            let name = key.split('/').nth(1).unwrap_or_default().to_owned();
            let p = random_policy(r, ns, &name);
            m.policies.insert(key.clone(), p.clone());
            e.set_policy(&key, Some(Arc::new(p.clone())));
            format!("policy {key} set to {p:?}")
        }
    }
}

#[test]
fn the_engine_equals_a_full_compile_after_every_random_change() {
    for seed in 1..=8u64 {
        // Half the seeds with denied connections logged: the same changes, other chains.
        let log = (seed % 2 == 0).then(LogDenied::default);
        let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
        let (mut m, mut e) = (Mirror::default(), Engine::new("n1").logging(log));
        let mut kernel = Table {
            log,
            ..Table::default()
        };
        for step in 0..600 {
            let what = change(&mut r, &mut m, &mut e);
            let f = e.flush();
            let want = m.full("n1", log);
            assert_eq!(e.table(), &want, "seed {seed} step {step}: {what}");
            if log.is_some() {
                assert_lookups(&e, &m, "n1");
            }
            // The script moves a table that was the last flush's to this one's.
            assert_eq!(
                f.script.is_empty(),
                kernel == want,
                "seed {seed} step {step}: {what}\n{}",
                f.script
            );
            kernel = want;
        }
    }
}

/// What the engine names a logged packet's ends by, against the objects: each address's pod,
/// and for each address the table judges, the policies of its pod that isolate it that way.
fn assert_lookups(e: &Engine, m: &Mirror, node: &str) {
    for p in m.pods.values() {
        for ip in &p.ips {
            let holder = e.pod_by_ip(*ip).map(|h| &h.ips);
            assert!(holder.is_some_and(|ips| ips.contains(ip)), "{ip} of {p:?}");
        }
    }
    for (dir, map) in [
        (Dir::Ingress, &e.table().ingress),
        (Dir::Egress, &e.table().egress),
    ] {
        for ip in map.keys() {
            let Some((pod, pols)) = e.isolated_by(dir, *ip) else {
                panic!("{ip} judged in {dir:?} but no pod named")
            };
            assert!(pod.ips.contains(ip) && pod.node == node);
            let want: Vec<String> = m
                .policies
                .iter()
                .filter(|(_, pol)| pol.isolates(pod) && crate::compile::rules(pol, dir).is_some())
                .map(|(k, _)| k.clone())
                .collect();
            // A pod only ClusterNetworkPolicies judge is in the map with no NetworkPolicy.
            assert!(
                !want.is_empty() || !m.cluster.is_empty(),
                "{ip}: {dir:?} judged, no policy isolates"
            );
            assert_eq!(pols, want, "{ip} in {dir:?}");
        }
    }
    assert!(e.pod_by_ip("192.0.2.1".parse().unwrap()).is_none());
}

#[test]
fn setting_an_object_to_what_it_is_compiles_nothing() {
    let mut r = Rng(7);
    let (mut m, mut e) = (Mirror::default(), Engine::new("n1"));
    for _ in 0..300 {
        change(&mut r, &mut m, &mut e);
    }
    e.flush();
    for (k, p) in &m.pods {
        assert!(!e.set_pod(k, Some(Arc::new(p.clone()))));
    }
    for (k, p) in &m.policies {
        assert!(!e.set_policy(k, Some(Arc::new(p.clone()))));
    }
    for (k, n) in &m.namespaces {
        assert!(!e.set_namespace(k, Some(n)));
    }
    for (k, p) in &m.cluster {
        assert!(!e.set_cluster_policy(k, Some(Arc::new(p.clone()))));
    }
    for (k, n) in &m.nodes {
        assert!(!e.set_node(k, Some(n)));
    }
    assert_eq!(e.flush(), Flush::default());
}

fn web(ns: &str, name: &str, node: &str, ip: &str) -> Pod {
    Pod {
        namespace: ns.into(),
        name: name.into(),
        uid: String::new(),
        labels: Labels::from([("app".into(), "web".into())]),
        node: node.into(),
        ips: vec![ip.parse().unwrap_or(IpAddr::from([0; 4]))],
        ports: Vec::new(),
    }
}

#[test]
fn a_change_compiles_only_what_it_touches() {
    let mut e = Engine::new("n1");
    let pol = policy_from_json(&json!({"metadata": {"namespace": "a", "name": "web"},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}},
                 "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}]}}))
    .unwrap_or_else(|e| panic!("{e}"));
    e.set_policy("a/web", Some(Arc::new(pol)));
    for i in 0..50 {
        let node = if i < 5 { "n1" } else { "n2" };
        let p = web("a", &format!("w{i}"), node, &format!("10.0.1.{i}"));
        e.set_pod(&p.key(), Some(Arc::new(p)));
    }
    // A policy of another namespace selecting none of this node's pods: no compile at all.
    let other = policy_from_json(&json!({"metadata": {"namespace": "b", "name": "deny"},
        "spec": {"podSelector": {}}}))
    .unwrap_or_else(|e| panic!("{e}"));
    e.flush();
    e.set_policy("b/deny", Some(Arc::new(other)));
    assert_eq!(e.flush(), Flush::default());
    // A remote peer joining: one set, no pod's chain; only its elements in the script.
    let p = web("a", "w99", "n2", "10.0.2.99");
    e.set_pod("a/w99", Some(Arc::new(p)));
    let f = e.flush();
    assert_eq!((f.pods, f.sets), (0, 1));
    assert!(
        f.script.starts_with("add element inet tern_netpol p4_"),
        "{}",
        f.script
    );
    assert_eq!(f.script.lines().count(), 1, "{}", f.script);
    // A local pod admitted: its own chain (shared, so only map entries) and the set it joins.
    let p = web("a", "w100", "n1", "10.0.1.100");
    e.set_pod("a/w100", Some(Arc::new(p)));
    let f = e.flush();
    assert_eq!((f.pods, f.sets), (1, 1));
    assert!(
        f.script
            .contains("add element inet tern_netpol ingress4 { 10.0.1.100 : jump in_"),
        "{}",
        f.script
    );
    assert!(!f.script.contains("chain"), "{}", f.script);
}

impl Pod {
    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

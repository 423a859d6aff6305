//! The engine against the full compile: after every one of thousands of random changes (pods
//! created, relabelled, moved, given other addresses and ports, deleted; namespaces relabelled
//! and deleted; policies of every peer and port shape created, changed and deleted), the
//! engine's table equals `render(&compile(..))` of the same objects, and what it compiled again
//! was only what the change touched.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::compile::{compile, Dir, World};
use crate::model::{policy_from_json, ClusterPolicy, Namespace, NodeInfo};
use crate::ruleset::{render_logging, LogDenied};

mod cluster;
mod plan;
mod random;
use cluster::{random_cluster_policy, random_node};
use random::{random_pod, random_policy, Rng, NAMESPACES};

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
        let (mut plans, mut objects, mut intervals) = (0, 0, 0);
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
            // So does the table plan (applied in place: no copy of the table).
            if f.plan.as_ref().is_some_and(|p| p.elements_only()) {
                plans += 1;
            }
            if let Some(p) = &f.plan {
                plan::apply_table(&mut kernel, p);
                assert!(kernel == want, "seed {seed} step {step}: {what}");
                objects += usize::from(p.objects() > 0);
                intervals += p.new_interval_sets.len();
            }
            kernel = want;
        }
        assert!(plans > 50, "seed {seed}: {plans} element-only flushes");
        // Without the log rule, policies and new local pods make and remove chains by plan.
        assert!(
            log.is_some() || objects > 20,
            "seed {seed}: {objects} plans with sets or chains"
        );
        // Policies with an ipBlock make their interval sets by plan too.
        assert!(
            log.is_some() || intervals > 30,
            "seed {seed}: {intervals} interval sets made by plan"
        );
    }
}

/// Several changes between two flushes (as the syncer batches what arrives during a
/// transaction): a set patched in place (`engine/patch.rs`) sees a pod join and leave, or two
/// pods trade an address, before it is flushed.
#[test]
fn the_engine_equals_a_full_compile_after_random_batches_of_changes() {
    for seed in 11..=16u64 {
        let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
        let (mut m, mut e) = (Mirror::default(), Engine::new("n1"));
        for step in 0..300 {
            let mut what = Vec::new();
            for _ in 0..=r.below(5) {
                what.push(change(&mut r, &mut m, &mut e));
            }
            e.flush();
            assert_eq!(
                e.table(),
                &m.full("n1", None),
                "seed {seed} step {step}: {what:?}"
            );
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
        ports: Default::default(),
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

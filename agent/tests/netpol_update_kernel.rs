//! The incremental compiler's scripts in a real kernel: a table kept by `Engine::flush` scripts
//! alone lists as the full render of the same objects applied whole. One netns gets the first
//! table replaced and then only each flush's script; another gets each step's full render
//! (`render(&compile(..))`) replaced whole; after every step the two `nft list table` outputs
//! are compared (each block's elements sorted: the kernel lists a hash set's elements in its
//! own order). The steps: pods admitted, relabelled, readdressed next to an ipBlock so that
//! intervals merge and split, deleted; namespaces relabelled; policies created (new chains and
//! sets), changed and deleted (chains and sets no rule names, deleted); ClusterNetworkPolicies
//! of both tiers created, moved in priority and deleted (tier chains jumped to, created before
//! and deleted after the pod chains that jump to them); Nodes moved between zones and
//! addresses. Needs root and nft.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};
use tern_net::netns::NetNs;
use tern_net::nft::Nft;
use tern_netpol::model::{
    namespace_from_json, pod_from_json, policy_from_json, read_cluster_policy, ClusterPolicy,
    ClusterPolicyRead, Namespace, NodeInfo, Pod, Policy,
};
use tern_netpol::ruleset::{self, render_logging, LogDenied};
use tern_netpol::{compile, Engine, World};
use tern_testkit::netns::TestNetns;

fn pod(ns: &str, name: &str, app: &str, node: &str, ips: &[String]) -> Pod {
    let ips: Vec<Value> = ips.iter().map(|i| json!({"ip": i})).collect();
    pod_from_json(&json!({"metadata": {"namespace": ns, "name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "m", "ports": [{"name": "h", "containerPort": 8080}]}]},
        "status": {"podIPs": ips}}))
    .unwrap()
}

/// The policies a step may create or delete: peers by pod, by namespace, by ipBlock with an
/// except; ports by number and by name, both directions.
fn policies() -> Vec<Policy> {
    [
        json!({"metadata": {"namespace": "x", "name": "web"}, "spec": {
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}},
                                  {"ipBlock": {"cidr": "10.9.0.0/16", "except": ["10.9.1.0/24"]}}],
                         "ports": [{"port": 80}]}]}}),
        json!({"metadata": {"namespace": "x", "name": "db"}, "spec": {
            "podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "web"}}}], "ports": [{"port": "h"}]}]}}),
        json!({"metadata": {"namespace": "x", "name": "team"}, "spec": {
            "podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "blue"}}}]}]}}),
        json!({"metadata": {"namespace": "y", "name": "deny"}, "spec": {"podSelector": {}}}),
    ]
    .iter()
    .map(|p| policy_from_json(p).unwrap())
    .collect()
}

/// The ClusterNetworkPolicies a step may create, change the priority of, or delete: both
/// tiers, every action, peers by namespace, by pod, by network and by node, a port range and a
/// named port.
fn cluster_policies() -> Vec<ClusterPolicy> {
    [
        json!({"metadata": {"name": "admin-deny"}, "spec": {"tier": "Admin", "priority": 10,
            "subject": {"namespaces": {"matchLabels": {"team": "blue"}}},
            "ingress": [{"action": "Deny", "from": [{"pods": {"namespaceSelector": {},
                            "podSelector": {"matchLabels": {"app": "cli"}}}}],
                         "protocols": [{"tcp": {"destinationPort": {"range": {"start": 80, "end": 90}}}}]}],
            "egress": [{"action": "Deny", "to": [{"networks": ["10.9.0.0/16", "fd00::2/127"]}]}]}}),
        json!({"metadata": {"name": "admin-pass"}, "spec": {"tier": "Admin", "priority": 5,
            "subject": {"pods": {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "web"}}}},
            "ingress": [{"action": "Pass", "from": [{"namespaces": {"matchLabels": {"team": "red"}}}]},
                        {"action": "Accept", "from": [{"namespaces": {}}],
                         "protocols": [{"destinationNamedPort": "h"}]}],
            "egress": [{"action": "Accept", "to": [{"nodes": {"matchLabels": {"zone": "a"}}}]}]}}),
        json!({"metadata": {"name": "baseline"}, "spec": {"tier": "Baseline", "priority": 1,
            "subject": {"namespaces": {}},
            "ingress": [{"action": "Accept", "from": [{"namespaces": {"matchLabels": {"team": "blue"}}}]},
                        {"action": "Deny", "from": [{"namespaces": {"matchLabels": {"team": "red"}}}]}],
            "egress": [{"action": "Deny", "to": [{"pods": {"namespaceSelector": {},
                            "podSelector": {"matchLabels": {"app": "db"}}}}],
                        "protocols": [{"destinationNamedPort": "h"}]}]}}),
    ]
    .iter()
    .map(|p| match read_cluster_policy(p) {
        ClusterPolicyRead::Ok(p) => p,
        other => panic!("{other:?}"),
    })
    .collect()
}

fn node(zone: &str, ip: &str) -> NodeInfo {
    NodeInfo {
        labels: [("zone".to_owned(), zone.to_owned())].into_iter().collect(),
        addresses: vec![ip.parse().unwrap()],
    }
}

fn namespace(name: &str, team: Option<&str>) -> Namespace {
    let labels = team.map_or(json!({}), |t| json!({"team": t}));
    namespace_from_json(&json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

/// `nft list table` with each block's elements sorted and the blocks in name order.
fn normalized(listing: &str) -> Vec<String> {
    let mut blocks: Vec<String> = Vec::new();
    let mut cur: Option<String> = None;
    for line in listing.lines() {
        let starts = ["\tset ", "\tmap ", "\tchain "]
            .iter()
            .any(|p| line.starts_with(p));
        if starts {
            cur = Some(String::new());
        }
        if let Some(c) = cur.as_mut() {
            c.push(' ');
            c.push_str(line.trim());
            if line == "\t}" {
                blocks.extend(cur.take());
            }
        }
    }
    for b in &mut blocks {
        if let Some(at) = b.find("elements = { ") {
            let rest = &b[at + 13..];
            let end = rest.find(" }").unwrap();
            let mut items: Vec<&str> = rest[..end].split(", ").map(str::trim).collect();
            items.sort_unstable();
            *b = format!(
                "{}elements = {{ {} }}{}",
                &b[..at],
                items.join(", "),
                &rest[end + 2..]
            );
        }
    }
    blocks.sort();
    blocks
}

fn listing(ns: &NetNs, nft: &Nft) -> Vec<String> {
    let l = ns
        .run_in(|| nft.list_table(ruleset::FAMILY, ruleset::TABLE))
        .unwrap()
        .unwrap()
        .expect("the table exists");
    normalized(&l)
}

/// What the cluster holds, beside the engine.
#[derive(Default)]
struct Mirror {
    pods: BTreeMap<String, Pod>,
    namespaces: BTreeMap<String, Namespace>,
    policies: BTreeMap<String, Policy>,
    cluster: BTreeMap<String, ClusterPolicy>,
    nodes: BTreeMap<String, NodeInfo>,
}

impl Mirror {
    fn full(&self, log: Option<LogDenied>) -> ruleset::Table {
        let pods: Vec<Pod> = self.pods.values().cloned().collect();
        let nss: Vec<Namespace> = self.namespaces.values().cloned().collect();
        let pols: Vec<Policy> = self.policies.values().cloned().collect();
        let cluster: Vec<ClusterPolicy> = self.cluster.values().cloned().collect();
        let nodes: Vec<NodeInfo> = self.nodes.values().cloned().collect();
        let plan = compile(&World {
            node: "n1",
            pods: &pods,
            namespaces: &nss,
            policies: &pols,
            cluster_policies: &cluster,
            nodes: &nodes,
        });
        render_logging(&plan, log).0
    }
}

/// One change (a fixed sequence per step number), made to both.
fn step(i: u64, m: &mut Mirror, e: &mut Engine) -> String {
    let r = i.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17);
    let ns = ["x", "y"][(r % 2) as usize];
    match (r >> 8) % 11 {
        0..=3 => {
            let name = format!("p{}", (r >> 16) % 8);
            let key = format!("{ns}/{name}");
            if (r >> 24).is_multiple_of(6) {
                m.pods.remove(&key);
                e.set_pod(&key, None);
                return format!("pod {key} deleted");
            }
            let app = ["web", "cli", "db"][((r >> 28) % 3) as usize];
            let node = ["n1", "n2"][((r >> 32) % 2) as usize];
            // Addresses from a small pool beside the ipBlock's edges: intervals merge and split.
            let v4 = [
                "10.0.1.2",
                "10.0.1.3",
                "10.0.1.4",
                "10.8.255.255",
                "10.9.1.7",
                "10.10.0.0",
            ];
            let mut ips = vec![v4[((r >> 36) % 6) as usize].to_owned()];
            if (r >> 40).is_multiple_of(2) {
                ips.push(format!("fd00::{}", (r >> 44) % 4));
            }
            let p = pod(ns, &name, app, node, &ips);
            m.pods.insert(key.clone(), p.clone());
            e.set_pod(&key, Some(Arc::new(p)));
            format!("pod {key} {app} on {node} at {ips:?}")
        }
        4 => {
            let team = [None, Some("blue"), Some("red")][((r >> 16) % 3) as usize];
            let n = namespace(ns, team);
            m.namespaces.insert(ns.into(), n.clone());
            e.set_namespace(ns, Some(&n));
            format!("namespace {ns} team {team:?}")
        }
        8 | 9 => {
            let mut p = cluster_policies()[((r >> 16) % 3) as usize].clone();
            let name = p.name.clone();
            match (r >> 24) % 3 {
                0 if m.cluster.remove(&name).is_some() => {
                    e.set_cluster_policy(&name, None);
                    return format!("cluster policy {name} deleted");
                }
                1 => p.priority = [0, 7, 20][((r >> 28) % 3) as usize],
                _ => {}
            }
            m.cluster.insert(name.clone(), p.clone());
            e.set_cluster_policy(&name, Some(Arc::new(p.clone())));
            format!("cluster policy {name} at priority {}", p.priority)
        }
        10 => {
            let (name, zone) = (
                ["n1", "n2"][((r >> 16) % 2) as usize],
                ["a", "b"][((r >> 20) % 2) as usize],
            );
            let n = node(
                zone,
                ["192.168.0.1", "10.9.1.7", "fd00::1"][((r >> 24) % 3) as usize],
            );
            m.nodes.insert(name.into(), n.clone());
            e.set_node(name, Some(&n));
            format!("node {name} in zone {zone} at {:?}", n.addresses)
        }
        _ => {
            let p = policies()[((r >> 16) % 4) as usize].clone();
            let key = format!("{}/{}", p.namespace, p.name);
            if m.policies.remove(&key).is_some() {
                e.set_policy(&key, None);
                return format!("policy {key} deleted");
            }
            m.policies.insert(key.clone(), p.clone());
            e.set_policy(&key, Some(Arc::new(p)));
            format!("policy {key} created")
        }
    }
}

#[test]
fn flush_scripts_list_as_the_full_render_applied_whole() {
    if tern_testkit::root::skip() {
        return;
    }
    updates_list_as_replaces(None, "npu");
}

/// The same with denied connections logged: every chain with its log rule, the limit object
/// made once by the first replace and kept by every update.
#[test]
fn with_denied_logged_flush_scripts_list_as_the_full_render_too() {
    if tern_testkit::root::skip() {
        return;
    }
    updates_list_as_replaces(Some(LogDenied::default()), "npl");
}

fn updates_list_as_replaces(log: Option<LogDenied>, stem: &str) {
    let nft = Nft::find().unwrap();
    let (inc_ns, full_ns) = (
        TestNetns::new(&format!("{stem}-inc")),
        TestNetns::new(&format!("{stem}-full")),
    );
    let (inc, full) = (
        NetNs::open(inc_ns.path()).unwrap(),
        NetNs::open(full_ns.path()).unwrap(),
    );
    let (mut m, mut e) = (Mirror::default(), Engine::new("n1").logging(log));
    e.flush();
    inc.run_in(|| nft.apply(&e.table().replace_script()))
        .unwrap()
        .unwrap();
    let (mut updates, mut chains_made, mut sets_dropped) = (0, 0, 0);
    let mut tier_chains = 0;
    for i in 0..240 {
        let what = step(i, &mut m, &mut e);
        let f = e.flush();
        let want = m.full(log);
        assert_eq!(e.table(), &want, "step {i}: {what}");
        if !f.script.is_empty() {
            updates += 1;
            chains_made += usize::from(f.script.contains("\tchain "));
            sets_dropped += usize::from(f.script.contains("delete set "));
            tier_chains += usize::from(f.script.contains("jump a") || f.script.contains("jump b"));
            inc.run_in(|| nft.apply(&f.script))
                .unwrap()
                .unwrap_or_else(|err| {
                    panic!("step {i}: {what}: the kernel refused\n{}\n{err}", f.script)
                });
        }
        full.run_in(|| nft.apply(&want.replace_script()))
            .unwrap()
            .unwrap();
        let listed = listing(&inc, &nft);
        if log.is_some() {
            let logs = listed.iter().filter(|b| b.contains("log prefix")).count();
            // Every per-pod chain ending in NetworkPolicy's drop logs; one a cluster policy's
            // tiers alone judge ends in accept, and the tier chains' Deny is not logged.
            let chains = listed
                .iter()
                .filter(|b| b.starts_with(" chain in_") || b.starts_with(" chain eg_"))
                .filter(|b| !b.ends_with(" accept }"))
                .count();
            assert_eq!(logs, chains, "step {i}: every per-pod chain logs");
        }
        assert_eq!(
            listed,
            listing(&full, &nft),
            "step {i}: {what}: updated and replaced tables differ; the update was\n{}",
            f.script
        );
    }
    // The run exercised what it claims: updates, new chains, sets dropped.
    assert!(
        updates > 40 && chains_made > 5 && sets_dropped > 2 && tier_chains > 5,
        "{updates} {chains_made} {sets_dropped} {tier_chains}"
    );
}

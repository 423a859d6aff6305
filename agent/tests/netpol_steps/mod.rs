//! The changes the kernel tests of the incremental engine make (`netpol_update_kernel.rs`,
//! `netpol_netlink_kernel.rs`): a fixed sequence per step number, made to the engine and to a
//! mirror of the cluster whose full render the kernel's table must list as.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

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

pub fn pod(ns: &str, name: &str, app: &str, node: &str, ips: &[String]) -> Pod {
    let ips: Vec<Value> = ips.iter().map(|i| json!({"ip": i})).collect();
    pod_from_json(&json!({"metadata": {"namespace": ns, "name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "m", "ports": [{"name": "h", "containerPort": 8080}]}]},
        "status": {"podIPs": ips}}))
    .unwrap()
}

/// The policies a step may create or delete: peers by pod, by namespace, by ipBlock with an
/// except; ports by number and by name, both directions.
pub fn policies() -> Vec<Policy> {
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
pub fn cluster_policies() -> Vec<ClusterPolicy> {
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

pub fn node(zone: &str, ip: &str) -> NodeInfo {
    NodeInfo {
        labels: [("zone".to_owned(), zone.to_owned())].into_iter().collect(),
        addresses: vec![ip.parse().unwrap()],
    }
}

pub fn namespace(name: &str, team: Option<&str>) -> Namespace {
    let labels = team.map_or(json!({}), |t| json!({"team": t}));
    namespace_from_json(&json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

/// `nft list table` with each block's elements sorted and the blocks in name order.
pub fn normalized(listing: &str) -> Vec<String> {
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

pub fn listing(ns: &NetNs, nft: &Nft) -> Vec<String> {
    let l = ns
        .run_in(|| nft.list_table(ruleset::FAMILY, ruleset::TABLE))
        .unwrap()
        .unwrap()
        .expect("the table exists");
    normalized(&l)
}

/// What the cluster holds, beside the engine.
#[derive(Default)]
pub struct Mirror {
    pub pods: BTreeMap<String, Pod>,
    pub namespaces: BTreeMap<String, Namespace>,
    pub policies: BTreeMap<String, Policy>,
    pub cluster: BTreeMap<String, ClusterPolicy>,
    pub nodes: BTreeMap<String, NodeInfo>,
}

impl Mirror {
    pub fn full(&self, log: Option<LogDenied>) -> ruleset::Table {
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
pub fn step(i: u64, m: &mut Mirror, e: &mut Engine) -> String {
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

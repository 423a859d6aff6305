//! The NetworkPolicy compiler and table at scale: 1,000 pods (100 on this node, two in each) in 50
//! namespaces, 500 policies (pod selectors, namespace selectors, ipBlocks with except, port
//! ranges, named ports, egress), compiled and rendered; with `--apply NETNS` the table is also
//! applied with `nft -f -` inside that (existing) network namespace and the transaction timed.
//!
//! `cargo run --release -p tern-agent --example netpol_scale [-- --apply NETNS]`
//!
//! `-- --objects FILE --node NAME` compiles the objects of FILE instead (a JSON `v1` List, as
//! `kubectl get -o json` prints it, of Pods, Namespaces and NetworkPolicies; e.g.
//! scripts/netpol-scale's, with their status) for node NAME.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::json;
use tern_netpol::model::{namespace_from_json, pod_from_json, policy_from_json};
use tern_netpol::{compile, ruleset, World};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .map(|i| args[i + 1].clone())
    };
    let apply = arg("--apply");
    if let Some(file) = arg("--objects") {
        let node = arg("--node").expect("--objects needs --node");
        return from_file(&file, &node, apply.as_deref());
    }
    let nss: Vec<_> = (0..50)
        .map(|n| namespace_from_json(&json!({"metadata": {"name": format!("ns{n}"), "labels": {"team": format!("t{}", n % 5), "kubernetes.io/metadata.name": format!("ns{n}")}}})).unwrap())
        .collect();
    let pods: Vec<_> = (0..1000u32)
        .map(|i| {
            let (a, b) = (i / 250, i % 250 + 1);
            let tier = ["web", "db", "cache"][(i % 3) as usize];
            pod_from_json(&json!({"metadata": {"namespace": format!("ns{}", i % 50), "name": format!("p{i}"),
                    "labels": {"app": format!("a{}", i % 20), "tier": tier}},
                "spec": {"nodeName": format!("n{}", (i / 50) % 10), "containers": [{"ports": [{"name": "http", "containerPort": 8080}]}]},
                "status": {"podIPs": [{"ip": format!("10.{a}.{}.{b}", i % 10)}, {"ip": format!("fd00:{a}:{}::{b:x}", i % 10)}]}}))
            .unwrap()
        })
        .collect();
    let pols: Vec<_> = (0..500u32)
        .map(|i| {
            let spec = match i % 4 {
                0 => json!({"podSelector": {"matchLabels": {"app": format!("a{}", i % 20)}},
                    "ingress": [{"from": [{"podSelector": {"matchLabels": {"tier": "web"}}}], "ports": [{"port": 80}, {"port": 8000, "endPort": 8100}]}]}),
                1 => json!({"podSelector": {"matchLabels": {"tier": "db"}},
                    "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": format!("t{}", i % 5)}}}], "ports": [{"port": "http"}]}]}),
                2 => json!({"podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": [format!("a{}", i % 20), "a1"]}]},
                    "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": [format!("10.{}.0.0/16", i % 4)]}}]}]}),
                _ => json!({"podSelector": {}, "policyTypes": ["Egress"],
                    "egress": [{"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"tier": "cache"}}}], "ports": [{"port": "http"}, {"port": 53, "protocol": "UDP"}]}]}),
            };
            policy_from_json(&json!({"metadata": {"namespace": format!("ns{}", i % 50), "name": format!("pol{i}")}, "spec": spec})).unwrap()
        })
        .collect();
    report(
        "pods 1000 (100 local), namespaces 50, policies 500",
        "n0",
        &pods,
        &nss,
        &pols,
        apply.as_deref(),
    );
}

/// The objects of a `v1` List in `file`, compiled for `node`.
fn from_file(file: &str, node: &str, apply: Option<&str>) {
    let list: serde_json::Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    let (mut pods, mut nss, mut pols) = (Vec::new(), Vec::new(), Vec::new());
    for v in list["items"].as_array().unwrap() {
        match v["kind"].as_str() {
            Some("Pod") => pods.push(pod_from_json(v).unwrap()),
            Some("Namespace") => nss.push(namespace_from_json(v).unwrap()),
            Some("NetworkPolicy") => pols.push(policy_from_json(v).unwrap()),
            _ => {}
        }
    }
    let local = pods
        .iter()
        .filter(|p| p.node == node && !p.ips.is_empty())
        .count();
    let what = format!(
        "{file}: pods {} ({local} on {node} with an address), namespaces {}, policies {}",
        pods.len(),
        nss.len(),
        pols.len()
    );
    report(&what, node, &pods, &nss, &pols, apply);
}

/// Compiles, renders, prints the figures and, with `apply`, times `nft -f -` in that netns.
fn report(
    what: &str,
    node: &str,
    pods: &[tern_netpol::model::Pod],
    nss: &[tern_netpol::model::Namespace],
    pols: &[tern_netpol::model::Policy],
    apply: Option<&str>,
) {
    let t = Instant::now();
    let plan = compile(&World {
        node,
        pods,
        namespaces: nss,
        policies: pols,
        ..World::default()
    });
    let compiled = t.elapsed();
    let t = Instant::now();
    let (script, size) = ruleset::replace_script(&plan);
    let rendered = t.elapsed();
    println!(
        "{what}: compile {:.1} ms, render {:.1} ms; script {} bytes; {:?}; policies in force {}",
        compiled.as_secs_f64() * 1e3,
        rendered.as_secs_f64() * 1e3,
        script.len(),
        size,
        plan.policies
    );
    if let Some(ns) = apply {
        for round in 0..3 {
            let t = Instant::now();
            let mut child = Command::new("ip")
                .args(["netns", "exec", ns, "nft", "-f", "-"])
                .stdin(Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(script.as_bytes())
                .unwrap();
            let ok = child.wait().unwrap().success();
            println!(
                "nft -f - (round {round}): {:.1} ms, ok {ok}",
                t.elapsed().as_secs_f64() * 1e3
            );
        }
    }
}

//! The trace against the compiled plans, and its reasons. The cluster: namespaces x, y (both
//! `env=prod`) and z (`env=dev`), pods a, b, c in each (`app=<name>`) over two nodes; w/a in a
//! namespace the World does not list; x/host on the host network. Every pod serves the named
//! port `web` (TCP 80; b's is TCP 81) and `dns` (UDP 53).

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::json;

use super::*;
use crate::compile::World;
use crate::model::{policy_from_json, ClusterPolicy, NamedPort, Namespace, Policy};

mod plans;
mod table;
use plans::{plan_allows, plans, plans_with};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pod(ns: &str, app: &str, node: &str, ips: &[&str]) -> Pod {
    let web = if app == "b" { 81 } else { 80 };
    let named = |name: &str, protocol, port| NamedPort {
        name: name.into(),
        protocol,
        port,
    };
    Pod {
        namespace: ns.into(),
        name: app.into(),
        uid: String::new(),
        labels: Labels::from([("app".into(), app.into())]),
        node: node.into(),
        ips: ips.iter().map(|s| ip(s)).collect(),
        ports: vec![
            named("web", Protocol::Tcp, web),
            named("dns", Protocol::Udp, 53),
        ]
        .into(),
    }
}

fn namespace(name: &str, env: &str) -> Namespace {
    Namespace {
        name: name.into(),
        labels: Labels::from([
            ("kubernetes.io/metadata.name".into(), name.into()),
            ("env".into(), env.into()),
        ]),
    }
}

/// The cluster of the module's doc.
fn cluster() -> (Vec<Pod>, Vec<Namespace>) {
    let mut pods = Vec::new();
    for (n, (ns, net)) in [("x", "10.0.1"), ("y", "10.0.2"), ("z", "10.1.3")]
        .into_iter()
        .enumerate()
    {
        for (i, app) in ["a", "b", "c"].into_iter().enumerate() {
            let node = if (n + i) % 2 == 0 { "node-1" } else { "node-2" };
            pods.push(pod(ns, app, node, &[&format!("{net}.{}", i + 1)]));
        }
    }
    pods.push(pod("w", "a", "node-2", &["10.0.4.1"]));
    pods.push(pod("x", "host", "node-1", &[]));
    let nss = vec![
        namespace("x", "prod"),
        namespace("y", "prod"),
        namespace("z", "dev"),
    ];
    (pods, nss)
}

fn policy(ns: &str, name: &str, spec: serde_json::Value) -> Policy {
    policy_from_json(&json!({"metadata": {"namespace": ns, "name": name}, "spec": spec})).unwrap()
}

fn query(from: Source, to: &str, protocol: Protocol, port: u16) -> Query {
    let (ns, name) = to.split_once('/').unwrap();
    Query {
        from,
        to_namespace: ns.into(),
        to_name: name.into(),
        protocol,
        port,
    }
}

fn from_pod(key: &str) -> Source {
    let (ns, name) = key.split_once('/').unwrap();
    Source::Pod {
        namespace: ns.into(),
        name: name.into(),
    }
}

fn world<'a>(pods: &'a [Pod], nss: &'a [Namespace], pols: &'a [Policy]) -> World<'a> {
    world_with(pods, nss, pols, &[])
}

fn world_with<'a>(
    pods: &'a [Pod],
    nss: &'a [Namespace],
    pols: &'a [Policy],
    cluster: &'a [ClusterPolicy],
) -> World<'a> {
    World {
        node: "",
        pods,
        namespaces: nss,
        policies: pols,
        cluster_policies: cluster,
        nodes: &[],
    }
}

#[test]
fn an_allowing_rule_is_named_with_its_peer_and_port() {
    let (pods, nss) = cluster();
    let pols = [
        policy("y", "deny", json!({"podSelector": {}})),
        policy(
            "y",
            "from-block",
            json!({"podSelector": {"matchLabels": {"app": "b"}},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "none"}}},
                                      {"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.1.0/24"]}}],
                             "ports": [{"protocol": "UDP"}, {"port": "web"}]}]}),
        ),
    ];
    let w = world(&pods, &nss, &pols);
    let none = BTreeMap::new();
    let t = trace(
        &w,
        &none,
        &query(Source::Ip(ip("10.0.9.9")), "y/b", Protocol::Tcp, 81),
    )
    .unwrap();
    assert!(t.allowed() && !t.own && t.from.is_none(), "{t:?}");
    assert_eq!(t.paths.len(), 1);
    let p = &t.paths[0];
    assert_eq!(p.egress, Judgement::NotAPod);
    let Judgement::Allowed { isolated_by, rules } = &p.ingress else {
        panic!("{p:?}");
    };
    let names: Vec<&str> = isolated_by.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["deny", "from-block"]);
    assert_eq!(rules.len(), 1);
    let r = &rules[0];
    assert_eq!(
        (r.policy.name.as_str(), r.direction, r.rule),
        ("from-block", Direction::Ingress, 0)
    );
    assert_eq!((r.peer, r.port), (Some(1), Some(1)));
    // b's `web` is 81: 80 is not it; x's addresses are cut out; y/a is only denied.
    let denied = |from: Source, port| {
        let t = trace(&w, &none, &query(from, "y/b", Protocol::Tcp, port)).unwrap();
        assert!(!t.allowed(), "{t:?}");
        t.paths[0].ingress.clone()
    };
    denied(Source::Ip(ip("10.0.9.9")), 80);
    denied(from_pod("x/a"), 81);
    assert_eq!(
        denied(from_pod("y/a"), 80),
        Judgement::Denied {
            isolated_by: isolated_by.clone()
        }
    );
    let t = trace(&w, &none, &query(from_pod("y/a"), "x/a", Protocol::Tcp, 80)).unwrap();
    assert_eq!(t.from.as_deref(), Some("y/a"));
    assert_eq!(t.paths[0].egress, Judgement::NotIsolated);
    assert_eq!(t.paths[0].ingress, Judgement::NotIsolated);
    // A pod no node runs is in no node's table, as in the compiled plans.
    let mut pods = pods;
    pods.iter_mut()
        .find(|p| p.namespace == "y" && p.name == "a")
        .unwrap()
        .node = "".into();
    let w = world(&pods, &nss, &pols);
    let t = trace(&w, &none, &query(from_pod("x/a"), "y/a", Protocol::Tcp, 80)).unwrap();
    assert_eq!(t.paths[0].ingress, Judgement::NotIsolated);
    let plans = plans(&pods, &nss, &pols);
    assert!(plan_allows(
        &plans,
        &pods[3].ips,
        pods[0].ips[0],
        pods[3].ips[0],
        Protocol::Tcp,
        80
    ));
}

#[test]
fn a_fail_closed_stand_in_is_named_and_allows_nothing() {
    use crate::model::{read_policy, PolicyRead};
    let (pods, nss) = cluster();
    let v = json!({"metadata": {"namespace": "z", "name": "broken"},
        "spec": {"podSelector": {"matchLabels": {"app": "c"}}, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/99"}}]}], "egress": [{}]}});
    let PolicyRead::Closed { policy, error } = read_policy(&v) else {
        panic!("not closed");
    };
    let pols = [(*policy).clone()];
    let closed = BTreeMap::from([("z/broken".to_owned(), error.clone())]);
    let w = world(&pods, &nss, &pols);
    let t = trace(
        &w,
        &closed,
        &query(from_pod("z/c"), "z/a", Protocol::Tcp, 80),
    )
    .unwrap();
    let Judgement::Denied { isolated_by } = &t.paths[0].egress else {
        panic!("{t:?}");
    };
    assert_eq!(isolated_by[0].closed.as_deref(), Some(error.as_str()));
    assert_eq!(t.paths[0].ingress, Judgement::NotIsolated);
    // Its own traffic is never judged.
    let own = trace(
        &w,
        &closed,
        &query(from_pod("z/c"), "z/c", Protocol::Tcp, 80),
    )
    .unwrap();
    assert!(own.own && own.allowed() && own.paths.is_empty());
    let own = trace(
        &w,
        &closed,
        &query(Source::Ip(ip("10.1.3.3")), "z/c", Protocol::Udp, 53),
    );
    assert_eq!(own.unwrap().from.as_deref(), Some("z/c"));
}

#[test]
fn what_cannot_be_traced_says_why() {
    let (pods, nss) = cluster();
    let w = world(&pods, &nss, &[]);
    let none = BTreeMap::new();
    let err = |from: Source, to: &str| {
        trace(&w, &none, &query(from, to, Protocol::Tcp, 80))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(from_pod("x/a"), "x/nope"),
        "no pod x/nope: check the namespace and the name"
    );
    assert!(err(from_pod("x/host"), "x/a").starts_with("pod x/host has no address of its own"));
    assert!(err(from_pod("x/a"), "x/host").starts_with("pod x/host has no address"));
    assert_eq!(
        err(Source::Ip(ip("fd00::1")), "x/a"),
        "fd00::1 and x/a have no address of the same family: no connection between them"
    );
}

#[test]
fn dual_stack_pods_are_traced_per_family() {
    let pods = vec![
        pod("x", "a", "node-1", &["10.0.1.1", "fd00:1::1"]),
        pod("x", "b", "node-2", &["10.0.1.2", "fd00:1::2"]),
    ];
    let nss = vec![namespace("x", "prod")];
    let pols = [policy(
        "x",
        "v4-only",
        json!({"podSelector": {"matchLabels": {"app": "b"}},
            "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}),
    )];
    let w = world(&pods, &nss, &pols);
    let t = trace(
        &w,
        &BTreeMap::new(),
        &query(from_pod("x/a"), "x/b", Protocol::Tcp, 80),
    )
    .unwrap();
    let verdicts: Vec<(IpAddr, IpAddr, bool)> = t
        .paths
        .iter()
        .map(|p| (p.src, p.dst, p.allowed()))
        .collect();
    assert_eq!(
        verdicts,
        [
            (ip("10.0.1.1"), ip("10.0.1.2"), true),
            (ip("fd00:1::1"), ip("fd00:1::2"), false)
        ]
    );
    assert!(!t.allowed());
    let plans = plans(&pods, &nss, &pols);
    for p in &t.paths {
        let b = &pods[1].ips;
        assert_eq!(
            plan_allows(&plans, b, p.src, p.dst, Protocol::Tcp, 80),
            p.allowed()
        );
    }
}

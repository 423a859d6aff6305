//! The compiler tests' objects: pods, namespaces and policies from a few literals, the
//! four-pod cluster most tests judge, one node's plan, a rule's peer addresses.

use std::net::IpAddr;

use serde_json::json;

use crate::addrs::AddrSet;
use crate::compile::{compile, Allow, Plan, World};
use crate::model::{policy_from_json, Labels, Namespace, Pod, Policy};

fn labels(v: &[(&str, &str)]) -> Labels {
    v.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

pub(super) fn pod(ns: &str, name: &str, l: &[(&str, &str)], node: &str, ips: &[&str]) -> Pod {
    Pod {
        namespace: ns.into(),
        name: name.into(),
        uid: String::new(),
        labels: labels(l),
        node: node.into(),
        ips: ips.iter().map(|s| s.parse().unwrap()).collect(),
        ports: Default::default(),
    }
}

fn ns(name: &str, l: &[(&str, &str)]) -> Namespace {
    let mut labels = labels(l);
    labels.insert("kubernetes.io/metadata.name".into(), name.into());
    Namespace {
        name: name.into(),
        labels,
    }
}

pub(super) fn policy(ns: &str, spec: serde_json::Value) -> Policy {
    policy_from_json(&json!({"metadata": {"namespace": ns, "name": "p"}, "spec": spec})).unwrap()
}

pub(super) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The cluster of most tests: node-a holds web (x) and db (x), node-b holds client (x) and
/// other (y, labelled team=blue).
pub(super) fn cluster() -> (Vec<Pod>, Vec<Namespace>) {
    (
        vec![
            pod(
                "x",
                "web",
                &[("app", "web")],
                "node-a",
                &["10.0.1.2", "fd00:1::2"],
            ),
            pod("x", "db", &[("app", "db")], "node-a", &["10.0.1.3"]),
            pod(
                "x",
                "client",
                &[("app", "client")],
                "node-b",
                &["10.0.2.2", "fd00:2::2"],
            ),
            pod("y", "other", &[("app", "client")], "node-b", &["10.0.2.3"]),
        ],
        vec![ns("x", &[]), ns("y", &[("team", "blue")])],
    )
}

pub(super) fn run(pods: &[Pod], nss: &[Namespace], pols: &[Policy]) -> Plan {
    compile(&World {
        node: "node-a",
        pods,
        namespaces: nss,
        policies: pols,
        ..World::default()
    })
}

/// The addresses of the peer set of `a` (an allow that names one) in `plan`.
pub(super) fn peers_in<'a>(plan: &'a Plan, a: &Allow) -> &'a AddrSet {
    match a {
        Allow::Match {
            peers: Some(id), ..
        } => &plan.sets[id].1.addrs,
        other => panic!("not a match with peers: {other:?}"),
    }
}

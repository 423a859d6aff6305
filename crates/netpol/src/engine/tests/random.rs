//! Random Pods, selectors, peers, rules and NetworkPolicies for the engine's random test, from
//! a seeded xorshift: every shape the compiler reads, few enough names that changes collide.

use serde_json::{json, Value};

use std::net::IpAddr;

use crate::model::{policy_from_json, Labels, NamedPort, Pod, Policy, Protocol};

/// xorshift64*: a fixed sequence per seed, no dependency.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub(super) fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
    pub(super) fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

pub(super) const NAMESPACES: [&str; 3] = ["a", "b", "a-b"];
pub(super) const NODES: [&str; 2] = ["n1", "n2"];

pub(super) fn random_pod(r: &mut Rng, ns: &str, name: &str) -> Pod {
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
        ports: ports.into(),
    }
}

pub(super) fn random_selector(r: &mut Rng, key: &str, values: &[&str]) -> Value {
    match r.below(4) {
        0 => json!({}),
        1 => json!({"matchLabels": {key: r.pick(values)}}),
        2 => json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
        _ => {
            json!({"matchExpressions": [{"key": key, "operator": "NotIn", "values": [r.pick(values)]}]})
        }
    }
}

pub(super) fn random_peer(r: &mut Rng) -> Value {
    match r.below(4) {
        0 => json!({"podSelector": random_selector(r, "app", &["web", "db", "cli"])}),
        1 => json!({"namespaceSelector": random_selector(r, "team", &["red", "blue"])}),
        2 => json!({"namespaceSelector": random_selector(r, "team", &["red", "blue"]),
                    "podSelector": random_selector(r, "app", &["web", "db", "cli"])}),
        _ => json!({"ipBlock": {"cidr": r.pick(&["10.0.0.0/29", "10.0.0.8/30", "fd00::/124"]),
                    "except": if r.chance(50) { json!(["10.0.0.2/31"]) } else { json!([]) }}}),
    }
}

pub(super) fn random_rule(r: &mut Rng, to: &str) -> Value {
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

pub(super) fn random_policy(r: &mut Rng, ns: &str, name: &str) -> Policy {
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

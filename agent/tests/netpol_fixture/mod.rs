//! Pods in real network namespaces for the NetworkPolicy kernel tests (`netpol_kernel`,
//! `netpol_self_kernel`, `cnp_kernel`): a pod wired as tern wires it (a netns, a veth, a /32 and
//! a /128, default via 169.254.1.1 / fe80::1, a host route), TCP listeners on ports 80 and 81,
//! the model's `Pod` for it, real connects, and a compiled table applied with the nft tool.
//! [`two_nodes`] joins two such nodes. Each test binary uses part of it.

#![allow(dead_code)]

pub mod two_nodes;

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use serde_json::{json, Value};
use tern_net::netns::NetNs;
use tern_net::nft::Nft;
use tern_netpol::model::{
    namespace_from_json, pod_from_json, policy_from_json, Namespace, Pod, Policy,
};
use tern_testkit::netns::TestNetns;

/// A connection that should be set up gets 3 s (a fresh pod's first IPv6 packets wait for
/// neighbour discovery); one that should not, 600 ms (the fixtures warm the neighbour caches).
pub const OPEN: Duration = Duration::from_millis(3000);
pub const SHUT: Duration = Duration::from_millis(600);

/// One pod: its netns, the model's view of it, its IPv4 and IPv6 addresses.
pub struct PodNs {
    pub ns: TestNetns,
    pub pod: Pod,
    pub ips: [IpAddr; 2],
}

/// Where a new pod goes: its node's netns and name, its host veth, its addresses.
pub struct Placement<'a> {
    pub host: &'a TestNetns,
    pub node_name: &'a str,
    pub host_veth: String,
    pub v4: String,
    pub v6: String,
}

/// Wires pod `namespace/name` (netns named `{prefix}-{name}`) at `at`, listening on 80 and 81;
/// its container port 81 is named "web".
pub fn wire_pod(at: Placement, prefix: &str, namespace: &str, name: &str, labels: Value) -> PodNs {
    let ns = TestNetns::new(&format!("{prefix}-{name}"));
    at.host.wire_routed_pod(&ns, &at.host_veth, &at.v4, &at.v6);
    for port in [80, 81] {
        serve(&ns, ("::", port));
    }
    let pod = pod_from_json(&json!({"metadata": {"namespace": namespace, "name": name, "labels": labels},
        "spec": {"nodeName": at.node_name, "containers": [{"ports": [{"name": "web", "containerPort": 81}]}]},
        "status": {"podIPs": [{"ip": at.v4}, {"ip": at.v6}]}}))
    .unwrap();
    PodNs {
        ns,
        pod,
        ips: [at.v4.parse().unwrap(), at.v6.parse().unwrap()],
    }
}

/// A TCP listener in `ns` that accepts and closes every connection, on a thread of its own.
pub fn serve(ns: &TestNetns, addr: (&str, u16)) {
    let netns = NetNs::open(ns.path()).unwrap();
    let l = netns.run_in(|| TcpListener::bind(addr)).unwrap().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            drop(s);
        }
    });
}

/// Whether a TCP connection from `from`'s netns to `to` is set up within `limit`.
pub fn connects(from: &TestNetns, to: SocketAddr, limit: Duration) -> bool {
    let ns = NetNs::open(from.path()).unwrap();
    ns.run_in(|| TcpStream::connect_timeout(&to, limit).is_ok())
        .unwrap()
}

/// Applies an nft script in `node`'s netns; panics with the script on a refusal.
pub fn apply_script(node: &TestNetns, script: &str) {
    let nft = Nft::find().unwrap();
    let ns = NetNs::open(node.path()).unwrap();
    ns.run_in(|| nft.apply(script))
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}\n{script}"));
}

/// Namespace `name`, labelled with its name as the API server labels every namespace.
pub fn namespace(name: &str) -> Namespace {
    namespace_from_json(
        &json!({"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}}),
    )
    .unwrap()
}

/// NetworkPolicies `p0`, `p1`, ... of namespace `namespace`, one per spec.
pub fn policies(namespace: &str, specs: &[Value]) -> Vec<Policy> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            policy_from_json(
                &json!({"metadata": {"namespace": namespace, "name": format!("p{i}")}, "spec": s}),
            )
            .unwrap()
        })
        .collect()
}

//! A pod's connection to itself under NetworkPolicy, in a real kernel (the two-node fixture of
//! `netpol_fixture`, a kube-proxy-like Service and hairpin). Needs root and nft.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::IpAddr;
use std::time::Duration;

use serde_json::json;

mod netpol_fixture;
use netpol_fixture::two_nodes::Cluster;

/// tern's answer to what the API leaves open (kubernetes/kubernetes#95879): a pod's connection
/// to its own address never leaves its netns and is never judged; through a Service whose
/// endpoint is itself it crosses the node's forward hook and is judged as any other peer, its own
/// address the source (as Calico and Antrea do; Cilium allows it).
#[test]
fn a_pod_reaching_itself_is_not_judged_but_through_a_service_it_is() {
    if tern_testkit::root::skip() {
        return;
    }
    let c = Cluster::new("nps");
    c.service("web");
    c.hairpin("web");
    let own = c.pod("web").ips;
    let svc: [IpAddr; 2] = ["10.96.0.10".parse().unwrap(), "fd96::10".parse().unwrap()];
    for ip in own.iter().chain(&svc) {
        assert!(c.connects("web", *ip, 80), "web -> {ip} before any policy");
    }
    c.apply(&[json!({"podSelector": {"matchLabels": {"app": "web"}}})]);
    for ip in own {
        assert!(
            c.connects("web", ip, 80),
            "web -> its own {ip}: never judged"
        );
    }
    for ip in svc {
        assert!(
            !c.connects_within("web", ip, 80, Duration::from_millis(600)),
            "web -> service {ip} -> web: judged by web's ingress, deny-all"
        );
    }
    c.apply(&[json!({"podSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}]})]);
    for ip in svc {
        assert!(
            c.connects("web", ip, 80),
            "web -> service {ip}: allowed from its own label"
        );
    }
}

use std::sync::Arc;

use serde_json::json;
use tern_net::nflog::IPPROTO_TCP;
use tern_netpol::model::{pod_from_json, policy_from_json, Pod};
use tern_netpol::ruleset::LogDenied;

use super::*;

fn pod(ns: &str, name: &str, node: &str, ip: &str, app: &str) -> Pod {
    pod_from_json(
        &json!({"metadata": {"namespace": ns, "name": name, "labels": {"app": app}},
        "spec": {"nodeName": node}, "status": {"podIPs": [{"ip": ip}]}}),
    )
    .unwrap()
}

/// Node n1: shop/web (10.0.1.2) isolated for ingress by shop/deny-all and shop/web-from-api,
/// and for egress by shop/no-egress; shop/cli (10.0.2.3) on n2.
fn engine() -> Engine<Pod> {
    let mut e = Engine::new("n1").logging(Some(LogDenied::default()));
    for p in [
        pod("shop", "web", "n1", "10.0.1.2", "web"),
        pod("shop", "cli", "n2", "10.0.2.3", "cli"),
    ] {
        e.set_pod(&format!("shop/{}", p.name), Some(Arc::new(p)));
    }
    for (name, spec) in [
        ("deny-all", json!({"podSelector": {}})),
        (
            "web-from-api",
            json!({"podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "api"}}}]}]}),
        ),
        (
            "no-egress",
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"]}),
        ),
        (
            "other",
            json!({"podSelector": {"matchLabels": {"app": "db"}}}),
        ),
    ] {
        let p = policy_from_json(
            &json!({"metadata": {"namespace": "shop", "name": name}, "spec": spec}),
        )
        .unwrap();
        e.set_policy(&format!("shop/{name}"), Some(Arc::new(p)));
    }
    e.flush();
    e
}

fn flow(src: &str, dst: &str, port: u16) -> Flow {
    Flow {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        protocol: IPPROTO_TCP,
        src_port: Some(40000),
        dst_port: Some(port),
    }
}

fn logged(direction: Dir, f: Flow) -> Logged {
    Logged {
        time: SystemTime::UNIX_EPOCH,
        direction,
        flow: f,
    }
}

#[test]
fn an_ingress_denial_names_both_pods_and_the_destinations_policies() {
    let d = describe(
        &engine(),
        logged(Dir::Ingress, flow("10.0.2.3", "10.0.1.2", 80)),
    );
    assert_eq!(d.from, End::Pod("shop/cli".into()));
    assert_eq!(d.to, End::Pod("shop/web".into()));
    assert_eq!(d.policies, ["shop/deny-all", "shop/web-from-api"]);
    assert_eq!(d.direction(), "ingress");
}

#[test]
fn an_egress_denial_names_the_sources_policies_and_an_outside_address() {
    let d = describe(
        &engine(),
        logged(Dir::Egress, flow("10.0.1.2", "192.0.2.9", 443)),
    );
    assert_eq!(d.from, End::Pod("shop/web".into()));
    assert_eq!(d.to, End::Address("192.0.2.9".parse().unwrap()));
    assert_eq!(d.policies, ["shop/no-egress"]);
}

#[test]
fn a_denial_the_store_no_longer_explains_names_no_policy() {
    let mut e = engine();
    e.set_policy("shop/deny-all", None);
    e.set_policy("shop/web-from-api", None);
    let d = describe(&e, logged(Dir::Ingress, flow("10.0.2.3", "10.0.1.2", 80)));
    assert!(d.policies.is_empty(), "{d:?}");
    let mut counts = DeniedCounts::default();
    counts.count(&d);
    assert_eq!(
        counts.0.get(&(String::new(), String::new(), "ingress")),
        Some(&1)
    );
}

#[test]
fn a_retry_within_the_window_is_the_same_flow() {
    let (mut r, t0) = (Recent::default(), Instant::now());
    let f = flow("10.0.2.3", "10.0.1.2", 80);
    assert!(r.is_new(Dir::Ingress, f, t0));
    assert!(!r.is_new(Dir::Ingress, f, t0 + Duration::from_secs(31)));
    assert!(r.is_new(Dir::Egress, f, t0), "the other direction's chain");
    let other_port = Flow {
        src_port: Some(40001),
        ..f
    };
    assert!(r.is_new(Dir::Ingress, other_port, t0), "another connection");
    assert!(r.is_new(Dir::Ingress, f, t0 + REPEAT_WINDOW + Duration::from_secs(1)));
}

#[test]
fn the_flows_remembered_are_bounded() {
    let (mut r, t0) = (Recent::default(), Instant::now());
    for port in 0..(RECENT_CAPACITY as u16 + 10) {
        let f = Flow {
            src_port: Some(port),
            ..flow("10.0.2.3", "10.0.1.2", 80)
        };
        assert!(r.is_new(Dir::Ingress, f, t0));
        assert!(r.seen.len() <= RECENT_CAPACITY);
    }
}

#[test]
fn each_isolating_policy_counts_the_flow_and_the_series_are_bounded() {
    let e = engine();
    let mut counts = DeniedCounts::default();
    let d = describe(&e, logged(Dir::Ingress, flow("10.0.2.3", "10.0.1.2", 80)));
    counts.count(&d);
    counts.count(&d);
    let key = |p: &str| ("shop".to_owned(), p.to_owned(), "ingress");
    assert_eq!(counts.0.get(&key("deny-all")), Some(&2));
    assert_eq!(counts.0.get(&key("web-from-api")), Some(&2));
    assert_eq!(counts.0.len(), 2);
    let mut many = d.clone();
    for i in 0..DeniedCounts::MAX_SERIES + 5 {
        many.policies = vec![format!("ns{i}/p")];
        counts.count(&many);
    }
    assert_eq!(
        counts.0.len(),
        DeniedCounts::MAX_SERIES + 1,
        "one _other series"
    );
    let other = ("_other".to_owned(), "_other".to_owned(), "ingress");
    assert_eq!(counts.0.get(&other), Some(&7));
}

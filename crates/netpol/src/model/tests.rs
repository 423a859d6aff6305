use super::*;
use serde_json::json;

fn labels(v: &[(&str, &str)]) -> Labels {
    v.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn selectors_as_apimachinery_reads_them() {
    let sel: LabelSelector = serde_json::from_value(json!({
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "env", "operator": "NotIn", "values": ["prod"]},
            {"key": "team", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"}
        ]
    }))
    .unwrap();
    let ok = labels(&[("app", "web"), ("tier", "a"), ("team", "x")]);
    assert!(sel.matches(&ok));
    let mut l = ok.clone();
    l.insert("env".into(), "prod".into());
    assert!(!sel.matches(&l), "NotIn prod");
    l = ok.clone();
    l.insert("legacy".into(), "".into());
    assert!(!sel.matches(&l), "DoesNotExist");
    l = ok.clone();
    l.remove("team");
    assert!(!sel.matches(&l), "Exists");
    l = ok.clone();
    l.insert("tier".into(), "c".into());
    assert!(!sel.matches(&l), "In");
    l = ok;
    l.insert("app".into(), "db".into());
    assert!(!sel.matches(&l), "matchLabels");
    assert!(LabelSelector::default().matches(&Labels::new()));
    let odd = LabelSelector {
        match_expressions: vec![Requirement {
            key: "a".into(),
            operator: "Gt".into(),
            values: vec![],
        }],
        ..Default::default()
    };
    assert!(!odd.matches(&labels(&[("a", "1")])));
}

#[test]
fn pods_ips_ports_and_what_is_no_peer() {
    let p = pod_from_json(&json!({
        "metadata": {"namespace": "n", "name": "p", "labels": {"app": "web"}},
        "spec": {"nodeName": "node-a", "containers": [
            {"name": "c", "ports": [{"name": "http", "containerPort": 8080},
                                    {"containerPort": 9000},
                                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "odd", "containerPort": 53, "protocol": "ICMP"}]}],
            "initContainers": [{"name": "s", "ports": [{"name": "side", "containerPort": 7000}]}]},
        "status": {"phase": "Running", "podIP": "10.0.0.5",
                   "podIPs": [{"ip": "10.0.0.5"}, {"ip": "fd00::5"}]}
    }))
    .unwrap();
    assert_eq!(p.ips.len(), 2);
    assert_eq!(p.node, "node-a");
    let names: Vec<_> = p.ports.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["http", "dns", "side"]);
    assert_eq!(p.ports[1].protocol, Protocol::Udp);
    let host = pod_from_json(&json!({"spec": {"hostNetwork": true},
        "status": {"podIP": "10.99.0.1"}}))
    .unwrap();
    assert!(host.ips.is_empty());
    let done =
        pod_from_json(&json!({"status": {"phase": "Succeeded", "podIP": "10.0.0.6"}})).unwrap();
    assert!(done.ips.is_empty());
    let old = pod_from_json(&json!({"status": {"podIP": "10.0.0.7"}})).unwrap();
    assert_eq!(old.ips, ["10.0.0.7".parse::<IpAddr>().unwrap()]);
    // The UID the kubelet passes as K8S_POD_UID: a static pod's mirror has its own.
    let uid = |meta: serde_json::Value| pod_from_json(&json!({"metadata": meta})).unwrap().uid;
    assert_eq!(uid(json!({"uid": "u1"})), "u1");
    assert_eq!(
        uid(
            json!({"uid": "mirror-uid", "annotations": {"kubernetes.io/config.mirror": "static-uid"}})
        ),
        "static-uid"
    );
}

#[test]
fn policies_with_defaults_and_every_peer_and_port_kind() {
    let p = policy_from_json(&json!({
        "metadata": {"namespace": "n", "name": "p"},
        "spec": {"podSelector": {},
            "ingress": [{"from": [
                {"podSelector": {"matchLabels": {"a": "b"}}},
                {"namespaceSelector": {}},
                {"namespaceSelector": {"matchLabels": {"x": "y"}}, "podSelector": {}},
                {"ipBlock": {"cidr": "10.1.0.1/16", "except": ["10.1.2.0/24"]}}],
                "ports": [{"port": 80}, {"protocol": "UDP", "port": 1000, "endPort": 2000},
                          {"port": "http"}, {"protocol": "SCTP"}, {"port": "443"}]}],
            "egress": [{"to": [{"ipBlock": {"cidr": "fd00::/64"}}]}]}
    }))
    .unwrap();
    assert!(p.ingress_isolates && p.egress_isolates);
    let r = &p.ingress[0];
    assert_eq!(r.peers.len(), 4);
    assert!(matches!(
        &r.peers[0],
        Peer::Pods {
            namespaces: None,
            ..
        }
    ));
    assert!(
        matches!(&r.peers[1], Peer::Pods { namespaces: Some(s), .. } if *s == LabelSelector::default())
    );
    assert!(
        matches!(&r.peers[3], Peer::Block { cidr, except } if cidr.to_string() == "10.1.0.0/16" && except.len() == 1)
    );
    assert_eq!(r.ports[0].port, PortRef::Range(80, 80));
    assert_eq!(r.ports[1].port, PortRef::Range(1000, 2000));
    assert_eq!(r.ports[1].protocol, Protocol::Udp);
    assert_eq!(r.ports[2].port, PortRef::Named("http".into()));
    assert_eq!(r.ports[3].port, PortRef::Any);
    assert_eq!(r.ports[4].port, PortRef::Range(443, 443));
    assert_eq!(p.egress[0].peers.len(), 1);

    let only_in = policy_from_json(&json!({"metadata": {"namespace": "n", "name": "q"},
        "spec": {"podSelector": {}}}))
    .unwrap();
    assert!(only_in.ingress_isolates && !only_in.egress_isolates);
    let only_eg = policy_from_json(&json!({"metadata": {"namespace": "n", "name": "q"},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"]}}))
    .unwrap();
    assert!(!only_eg.ingress_isolates && only_eg.egress_isolates);
    let bad =
        policy_from_json(&json!({"spec": {"ingress": [{"from": [{"ipBlock": {"cidr": "x"}}]}]}}));
    assert!(bad.unwrap_err().contains("ipBlock \"x\""));
}

#[test]
fn a_policy_that_cannot_be_read_whole_fails_closed() {
    let read = |spec: serde_json::Value| {
        read_policy(&json!({"metadata": {"namespace": "n", "name": "p"}, "spec": spec}))
    };
    let closed = |spec: serde_json::Value| match read(spec) {
        PolicyRead::Closed { policy, error } => (policy, error),
        other => panic!("not closed: {other:?}"),
    };
    let web = json!({"matchLabels": {"app": "web"}});
    // A port of the wrong type, policyTypes absent, no egress: ingress isolated, nothing allowed.
    let (p, e) = closed(json!({"podSelector": web,
        "ingress": [{"ports": [{"port": true}]}, {}]}));
    assert!(e.contains("IntOrString"), "{e}");
    assert_eq!((p.namespace.as_str(), p.name.as_str()), ("n", "p"));
    assert_eq!(p.pod_selector.match_labels["app"], "web");
    assert!(p.ingress_isolates && !p.egress_isolates);
    assert!(
        p.ingress.is_empty() && p.egress.is_empty(),
        "the readable rule is not kept"
    );
    // A bad CIDR in an egress rule, policyTypes absent: the egress key counts as rules.
    let (p, e) = closed(json!({"podSelector": web,
        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/40"}}]}]}));
    assert!(e.contains("ipBlock"), "{e}");
    assert!(p.ingress_isolates && p.egress_isolates);
    // So does an egress that is not even a list; an empty list does not (the API's defaulting).
    let (p, _) = closed(json!({"podSelector": web, "egress": "all"}));
    assert!(p.ingress_isolates && p.egress_isolates);
    let (p, _) = closed(json!({"podSelector": web, "egress": [],
        "ingress": [{"from": [{"ipBlock": {"cidr": "x"}}]}]}));
    assert!(p.ingress_isolates && !p.egress_isolates);
    // policyTypes named: only those directions.
    let (p, _) = closed(json!({"podSelector": web, "policyTypes": ["Egress"],
        "egress": [{"ports": [{"port": 70000}]}]}));
    assert!(!p.ingress_isolates && p.egress_isolates);
    // policyTypes unreadable: the default.
    let (p, _) = closed(json!({"podSelector": web, "policyTypes": "Egress"}));
    assert!(p.ingress_isolates && !p.egress_isolates);

    // The podSelector, the namespace or the spec unreadable: nothing can be isolated.
    for v in [
        json!({"metadata": {"namespace": "n"}, "spec": {"podSelector": {"matchLabels": ["web"]},
            "ingress": [{"ports": [{"port": true}]}]}}),
        json!({"metadata": {"namespace": "n"}, "spec": {"podSelector": "web"}}),
        json!({"metadata": {"name": "p"}, "spec": {"ingress": [{"ports": [{"port": true}]}]}}),
        json!({"metadata": {"namespace": "n"}, "spec": 7}),
    ] {
        assert!(
            matches!(read_policy(&v), PolicyRead::Unreadable { .. }),
            "{v}"
        );
    }
    // A readable policy is read whole; labels of the wrong type on it do not matter.
    let ok = read_policy(
        &json!({"metadata": {"namespace": "n", "name": "p", "labels": 5},
        "spec": {"podSelector": {}}}),
    );
    assert!(matches!(ok, PolicyRead::Read(p) if p.ingress.is_empty() && p.ingress_isolates));
    // An empty policyTypes is defaulted as an absent one (SetDefaults_NetworkPolicy).
    let p = policy_from_json(&json!({"metadata": {"namespace": "n"},
        "spec": {"policyTypes": [], "egress": [{}]}}))
    .unwrap();
    assert!(p.ingress_isolates && p.egress_isolates);
}

mod cluster;

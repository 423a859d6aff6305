//! Parses the RBAC of deploy/ (and deploy/vxlan/, deploy/cluster-network-policy/) and checks it is no wider than the features
//! need.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod manifests;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use manifests::*;

/// (scope, apiGroup, resource, resourceNames, verb) granted to each subject.
type Grant = (String, String, String, Vec<String>, String);

fn grants(d: &[(String, Value)]) -> BTreeMap<String, BTreeSet<Grant>> {
    let mut roles: BTreeMap<(String, String), (String, &Value)> = BTreeMap::new();
    for r in of_kind(d, "Role") {
        let ns = r["metadata"]["namespace"]
            .as_str()
            .expect("Role has a namespace")
            .to_owned();
        roles.insert(
            (
                "Role".into(),
                r["metadata"]["name"].as_str().unwrap().into(),
            ),
            (ns, &r["rules"]),
        );
    }
    for r in of_kind(d, "ClusterRole") {
        assert!(r.get("aggregationRule").is_none(), "no aggregated roles");
        roles.insert(
            (
                "ClusterRole".into(),
                r["metadata"]["name"].as_str().unwrap().into(),
            ),
            ("cluster".into(), &r["rules"]),
        );
    }
    let mut out: BTreeMap<String, BTreeSet<Grant>> = BTreeMap::new();
    for b in of_kind(d, "RoleBinding")
        .into_iter()
        .chain(of_kind(d, "ClusterRoleBinding"))
    {
        let rr = &b["roleRef"];
        let key = (
            rr["kind"].as_str().unwrap().to_owned(),
            rr["name"].as_str().unwrap().to_owned(),
        );
        let (scope, rules) = roles
            .get(&key)
            .unwrap_or_else(|| panic!("binding to a role not defined here: {key:?}"));
        let scope = match (
            b["kind"].as_str().unwrap(),
            b["metadata"]["namespace"].as_str(),
        ) {
            ("RoleBinding", Some(ns)) => ns.to_owned(),
            ("ClusterRoleBinding", None) => scope.clone(),
            other => panic!("bad binding scope {other:?}"),
        };
        for s in b["subjects"].as_array().unwrap() {
            assert_eq!(
                s["kind"], "ServiceAccount",
                "only service accounts are bound: {s}"
            );
            let who = format!(
                "{}/{}",
                s["namespace"].as_str().unwrap(),
                s["name"].as_str().unwrap()
            );
            for rule in rules.as_array().unwrap() {
                assert!(rule.get("nonResourceURLs").is_none());
                for g in strs(&rule["apiGroups"]) {
                    for res in strs(&rule["resources"]) {
                        for verb in strs(&rule["verbs"]) {
                            for x in [&g, &res, &verb] {
                                assert!(!x.contains('*'), "wildcard in {rule}");
                            }
                            out.entry(who.clone()).or_default().insert((
                                scope.clone(),
                                g.clone(),
                                res.clone(),
                                strs(&rule["resourceNames"]),
                                verb,
                            ));
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn rbac_is_least_privilege() {
    let d = docs();
    let g = grants(&d);
    let want: BTreeMap<String, BTreeSet<Grant>> = [
        (
            "tern/tern-agent".to_owned(),
            [
                (
                    "tern".into(),
                    String::new(),
                    "serviceaccounts/token".into(),
                    vec!["tern-cni".into()],
                    "create".into(),
                ),
                // the preStop uninstall asks whether its DaemonSet is being deleted
                (
                    "tern".into(),
                    "apps".into(),
                    "daemonsets".into(),
                    vec!["tern-agent".into()],
                    "get".into(),
                ),
                (
                    "cluster".into(),
                    String::new(),
                    "nodes".into(),
                    vec![],
                    "get".into(),
                ),
                // run --node-routes: the node list and watch.
                (
                    "cluster".into(),
                    String::new(),
                    "nodes".into(),
                    vec![],
                    "list".into(),
                ),
                (
                    "cluster".into(),
                    String::new(),
                    "nodes".into(),
                    vec![],
                    "watch".into(),
                ),
                // run --network-policy: pods, namespaces, networkpolicies listed and watched.
                (
                    "cluster".into(),
                    String::new(),
                    "pods".into(),
                    vec![],
                    "list".into(),
                ),
                (
                    "cluster".into(),
                    String::new(),
                    "pods".into(),
                    vec![],
                    "watch".into(),
                ),
                (
                    "cluster".into(),
                    String::new(),
                    "namespaces".into(),
                    vec![],
                    "list".into(),
                ),
                (
                    "cluster".into(),
                    String::new(),
                    "namespaces".into(),
                    vec![],
                    "watch".into(),
                ),
                (
                    "cluster".into(),
                    "networking.k8s.io".into(),
                    "networkpolicies".into(),
                    vec![],
                    "list".into(),
                ),
                (
                    "cluster".into(),
                    "networking.k8s.io".into(),
                    "networkpolicies".into(),
                    vec![],
                    "watch".into(),
                ),
                // An Event on a NetworkPolicy it cannot read whole.
                (
                    "cluster".into(),
                    String::new(),
                    "events".into(),
                    vec![],
                    "create".into(),
                ),
            ]
            .into_iter()
            .collect(),
        ),
        (
            "tern/tern-cni".to_owned(),
            [
                // tern's pod lookup on ADD.
                (
                    "cluster".into(),
                    String::new(),
                    "pods".into(),
                    vec![],
                    "get".into(),
                ),
                // tern-ipam's usePodCidr node read.
                (
                    "cluster".into(),
                    String::new(),
                    "nodes".into(),
                    vec![],
                    "get".into(),
                ),
            ]
            .into_iter()
            .collect(),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(g, want);
}

#[test]
fn vxlan_rbac_adds_only_patch_nodes_status() {
    let base = grants(&docs());
    let mut both = docs();
    both.extend(docs_in("deploy/vxlan"));
    let all = grants(&both);
    let added: BTreeSet<Grant> = all["tern/tern-agent"]
        .difference(&base["tern/tern-agent"])
        .cloned()
        .collect();
    let want: BTreeSet<Grant> = [(
        "cluster".into(),
        String::new(),
        "nodes/status".into(),
        vec![],
        "patch".into(),
    )]
    .into_iter()
    .collect();
    assert_eq!(added, want);
    assert_eq!(all["tern/tern-cni"], base["tern/tern-cni"]);
    assert_eq!(all.len(), base.len(), "no other subject gains anything");
}

#[test]
fn cluster_network_policy_rbac_adds_only_list_watch_of_clusternetworkpolicies() {
    let base = grants(&docs());
    let mut both = docs();
    let cnp = docs_in("deploy/cluster-network-policy");
    both.extend(cnp.iter().cloned());
    let all = grants(&both);
    let added: BTreeSet<Grant> = all["tern/tern-agent"]
        .difference(&base["tern/tern-agent"])
        .cloned()
        .collect();
    let grant = |verb: &str| {
        (
            "cluster".to_owned(),
            "policy.networking.k8s.io".to_owned(),
            "clusternetworkpolicies".to_owned(),
            vec![],
            verb.to_owned(),
        )
    };
    assert_eq!(added, [grant("list"), grant("watch")].into_iter().collect());
    // Its own role holds nodes list/watch too (the `nodes` peers), so that it stands alone
    // where the routes' role is deleted; nothing else.
    let own = grants(&cnp);
    let nodes = |verb: &str| {
        (
            "cluster".to_owned(),
            String::new(),
            "nodes".to_owned(),
            vec![],
            verb.to_owned(),
        )
    };
    let want: BTreeSet<Grant> = [grant("list"), grant("watch"), nodes("list"), nodes("watch")]
        .into_iter()
        .collect();
    assert_eq!(own["tern/tern-agent"], want);
    assert_eq!(all["tern/tern-cni"], base["tern/tern-cni"]);
    assert_eq!(all.len(), base.len(), "no other subject gains anything");
}

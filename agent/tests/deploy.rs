//! Parses every manifest in deploy/ and checks the RBAC is no wider than the features need, the
//! DaemonSet has what the agent needs, and the ConfigMap's template passes `install`'s checks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;
use tern_agent::install::{ranges_for, render, validate_tuning};

fn docs() -> Vec<(String, Value)> {
    docs_in("deploy")
}

/// The manifests of one directory of the repository (not its subdirectories, as `kubectl apply
/// -f DIR` reads them).
fn docs_in(rel: &str) -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for p in files
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
    {
        let text = std::fs::read_to_string(&p).unwrap();
        for d in serde_yaml_ng::Deserializer::from_str(&text) {
            let v = Value::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            if v.is_null() {
                continue;
            }
            for k in ["apiVersion", "kind"] {
                assert!(v[k].is_string(), "{}: a document without {k}", p.display());
            }
            assert!(
                v["metadata"]["name"].is_string(),
                "{}: a document without metadata.name",
                p.display()
            );
            out.push((p.file_name().unwrap().to_string_lossy().into_owned(), v));
        }
    }
    out
}

fn of_kind<'a>(d: &'a [(String, Value)], kind: &str) -> Vec<&'a Value> {
    d.iter()
        .filter(|(_, v)| v["kind"] == kind)
        .map(|(_, v)| v)
        .collect()
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|x| x.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

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
fn daemonset_has_what_the_agent_needs() {
    let d = docs();
    let ns = of_kind(&d, "Namespace");
    assert_eq!(ns.len(), 1);
    let sas: BTreeSet<String> = of_kind(&d, "ServiceAccount")
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap().into())
        .collect();
    assert_eq!(
        sas,
        ["tern-agent".to_owned(), "tern-cni".to_owned()]
            .into_iter()
            .collect()
    );
    let ds = of_kind(&d, "DaemonSet");
    assert_eq!(ds.len(), 1);
    let spec = &ds[0]["spec"]["template"]["spec"];
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(spec["serviceAccountName"], "tern-agent");
    let init = &spec["initContainers"][0];
    assert_eq!(
        strs(&init["command"])[..2],
        ["tern-agent".to_owned(), "install".to_owned()]
    );
    let agent = &spec["containers"][0];
    assert_eq!(
        strs(&agent["command"])[..2],
        ["tern-agent".to_owned(), "run".to_owned()]
    );
    // Liveness only on the loop's progress, so an API outage never restarts the agent;
    // readiness on the token.
    assert_eq!(agent["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(agent["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(agent.get("startupProbe").is_none());
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(
            agent[probe]["httpGet"]["host"], "127.0.0.1",
            "the agent listens on loopback only"
        );
        assert_eq!(agent[probe]["httpGet"]["port"], 9412);
    }
    let paths: BTreeSet<String> = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["hostPath"]["path"].as_str().map(str::to_owned))
        .collect();
    for p in ["/opt/cni/bin", "/etc/cni/net.d", "/run/tern"] {
        assert!(paths.contains(p), "hostPath {p} missing");
    }
    for c in [init, agent] {
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert!(c["securityContext"]
            .get("privileged")
            .is_none_or(|p| p == false));
    }
    // The agent's flags parse as tern-agent run would.
    let args: Vec<String> = strs(&agent["command"])[2..].to_vec();
    let env = |k: &str| match k {
        "KUBERNETES_SERVICE_HOST" => Some("10.96.0.1".to_owned()),
        "KUBERNETES_SERVICE_PORT" => Some("443".to_owned()),
        "POD_NAMESPACE" => Some("tern".to_owned()),
        _ => None,
    };
    let cfg = tern_agent::RunConfig::from_args(&args, &env).unwrap();
    assert_eq!(cfg.socket, Path::new("/run/tern/agent.sock"));
    // Prometheus scrapes /metrics where the annotations say, and the agent serves it there (all
    // addresses: the pod IP of a host-network pod is the node's).
    assert_eq!(
        cfg.metrics_socket,
        Path::new(tern_node::report::REPORT_SOCKET)
    );
    let metrics = cfg.metrics_address.expect("--metrics-address");
    assert!(metrics.ip().is_unspecified(), "{metrics}");
    let ann = &ds[0]["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(ann["prometheus.io/scrape"], "true");
    assert_eq!(ann["prometheus.io/path"], "/metrics");
    assert_eq!(ann["prometheus.io/port"], metrics.port().to_string());
    let port = agent["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "metrics")
        .expect("a port named metrics");
    assert_eq!(port["containerPort"], metrics.port());
    assert_ne!(metrics.port(), cfg.listen.port());
    // Node routes are on, for the node the downward API names.
    assert_eq!(cfg.routes.unwrap().node_name, "$(NODE_NAME)");
    assert!(
        cfg.egress.is_none(),
        "egress NAT comes from the ConfigMap, not the flags"
    );
    // Egress NAT is on through ConfigMap tern-egress-nat (envFrom), whose values parse as the
    // flags they stand for.
    let from: Vec<&str> = agent["envFrom"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["configMapRef"]["name"].as_str())
        .collect();
    assert!(from.contains(&"tern-egress-nat"), "{from:?}");
    let nat = of_kind(&d, "ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["name"] == "tern-egress-nat")
        .expect("ConfigMap tern-egress-nat");
    let mut with_nat = args.clone();
    for (flag, key) in [
        ("--egress-nat", "TERN_EGRESS_NAT"),
        ("--cluster-cidrs", "TERN_CLUSTER_CIDRS"),
    ] {
        with_nat.push(flag.into());
        with_nat.push(nat["data"][key].as_str().unwrap().to_owned());
    }
    let egress = tern_agent::RunConfig::from_args(&with_nat, &env)
        .unwrap()
        .egress
        .expect("egress NAT on");
    assert_eq!(
        egress.pod,
        tern_agent::egress::PodRanges::FromNode("$(NODE_NAME)".into())
    );
    assert!(agent["securityContext"]["capabilities"]["add"]
        .as_array()
        .unwrap()
        .contains(&Value::from("NET_ADMIN")));
}

#[test]
fn configmap_template_renders_and_passes_the_allowlist() {
    let d = docs();
    let cm = of_kind(&d, "ConfigMap");
    let template = cm[0]["data"]["conflist.template"].as_str().unwrap();
    let ds = of_kind(&d, "DaemonSet");
    let env = &ds[0]["spec"]["template"]["spec"]["initContainers"][0]["env"];
    let reference = env
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "TERN_CONFLIST_TEMPLATE")
        .unwrap();
    assert_eq!(
        reference["valueFrom"]["configMapKeyRef"]["key"],
        "conflist.template"
    );
    let v = render(
        template,
        Path::new("/etc/cni/net.d/tern-kubeconfig"),
        "n1",
        Some(&ranges_for(&["10.99.0.0/24".into()])),
    )
    .unwrap();
    validate_tuning(&v, &tern_net::sysctl::Allowlist::builtin()).unwrap();
    assert_eq!(v["plugins"][0]["type"], "tern");
    // 1.1.0, so runtimes call STATUS and GC; the IPAM must answer them (Debian's host-local 1.1.1
    // refuses a 1.1.0 config), and tern-ipam is installed with tern.
    assert_eq!(v["cniVersion"], "1.1.0");
    assert_eq!(v["plugins"][0]["ipam"]["type"], "tern-ipam");
    // hostPort and the bandwidth annotations: the reference portmap and bandwidth after
    // tern-tuning, asking the runtime for what each needs, and installed by `tern-agent install`
    // (its default --reference-plugins) from the image.
    let types: Vec<&str> = v["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["tern", "tern-tuning", "portmap", "bandwidth"]);
    assert_eq!(
        v["plugins"][2],
        serde_json::json!({"type": "portmap", "capabilities": {"portMappings": true}, "snat": true})
    );
    assert_eq!(
        v["plugins"][3],
        serde_json::json!({"type": "bandwidth", "capabilities": {"bandwidth": true}})
    );
    assert_eq!(
        tern_agent::install::reference::DEFAULT_REFERENCE_PLUGINS,
        ["portmap", "bandwidth"]
    );
}

/// `kubectl apply -f deploy/` applies the files in name order, document by document: every
/// Namespace comes before the first object placed in it, or a fresh cluster refuses that object.
#[test]
fn namespaces_come_first_in_apply_order() {
    let d = docs();
    let mut made = BTreeSet::new();
    for (file, v) in &d {
        if v["kind"] == "Namespace" {
            made.insert(v["metadata"]["name"].as_str().unwrap().to_owned());
        } else if let Some(ns) = v["metadata"]["namespace"].as_str() {
            assert!(
                made.contains(ns),
                "{file}: {} {} in namespace {ns} comes before that Namespace in name order",
                v["kind"].as_str().unwrap(),
                v["metadata"]["name"].as_str().unwrap()
            );
        }
    }
    assert!(!made.is_empty(), "deploy/ creates no Namespace");
}

//! Parses every manifest in deploy/ and checks the DaemonSet has what the agent needs and the
//! ConfigMap's template passes `install`'s checks (the RBAC: `deploy_rbac`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod manifests;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
use tern_agent::conflist::{ranges_for, render, validate_tuning};

use manifests::*;

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
    // The conflist the init container writes is the one whose ranges follow the Node's podCIDRs.
    let install_args: Vec<String> = strs(&init["command"])[2..].to_vec();
    let install = tern_agent::install::InstallConfig::from_args(&install_args, &env).unwrap();
    assert_eq!(
        cfg.pod_cidrs_conflist.as_deref(),
        Some(install.cni_conf_dir.join(&install.conflist_name).as_path())
    );
    assert!(install.pod_cidrs_from_node);
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
    // The agent enforces NetworkPolicy (--network-policy=true): tern's ADD waits for a new pod's
    // rules, bounded (docs/DESIGN.md, "NetworkPolicy in the agent").
    assert_eq!(
        v["plugins"][0]["networkPolicy"],
        serde_json::json!({"waitSeconds": 10})
    );
    let run = strs(&ds[0]["spec"]["template"]["spec"]["containers"][0]["command"]);
    assert!(
        run.iter().any(|a| a == "--network-policy=true"),
        "the conflist waits on an agent that must enforce NetworkPolicy: {run:?}"
    );
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

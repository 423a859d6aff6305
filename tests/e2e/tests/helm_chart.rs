//! tern's Helm chart, `deploy/helm/tern`, through the helm binary `scripts/build-go helm` builds
//! (helm v4.3.2, tools/go/helm).
//!
//! What it proves: `helm lint --strict` passes; `deploy/*.yaml` is exactly what
//! `cargo xtask render-deploy` renders from the chart's defaults (a drifted file is named, with its
//! diff), and the check does fail on a drifted copy; each value an operator changes reaches the
//! manifests (image, egress NAT ranges, node routes off, metrics address and port, scrape
//! annotations, sysctls, reference plugins, log level, tolerations, resources), and the rendered
//! conflist template is JSON once its placeholders are filled; a wrong value fails `helm
//! template` (as it fails `helm install` and `helm upgrade`, which run the same schema check) with
//! a message naming the key.
//!
//! Needs no root. The helm binary: `$TERN_HELM`, else `$TERN_GO_CACHE/bin/helm/helm` (default
//! cache /var/cache/tern-build). Without it each test returns at once with a line on stderr,
//! unless `TERN_ROOT_TESTS=run` (scripts/test, CI) or `CI` is set: then it fails, naming the
//! command that builds helm.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod helm;

use helm::{chart, helm, template};
use std::process::Command;

use tern_testkit::exec::{output_text, workspace_root};

/// The document of `kind` named `name` in a rendering (from its `kind:` line to the next `---`).
fn doc<'a>(all: &'a str, kind: &str, name: &str) -> &'a str {
    all.split("\n---\n")
        .find(|d| {
            d.lines().any(|l| l == format!("kind: {kind}"))
                && d.lines().any(|l| l == format!("  name: {name}"))
        })
        .unwrap_or_else(|| panic!("no {kind} {name} in:\n{all}"))
}

/// The conflist template of ConfigMap tern-config, its placeholders filled, as JSON.
fn conflist(all: &str) -> serde_json::Value {
    let cm = doc(all, "ConfigMap", "tern-config");
    let body: String = cm
        .lines()
        .skip_while(|l| !l.contains("conflist.template: |"))
        .skip(1)
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let filled = body
        .replace("__KUBECONFIG_FILEPATH__", "/etc/cni/net.d/tern-kubeconfig")
        .replace("__POD_CIDR_RANGES__", r#"[[{"subnet": "10.1.0.0/24"}]]"#);
    serde_json::from_str(&filled).unwrap_or_else(|e| panic!("conflist: {e}:\n{filled}"))
}

fn types(c: &serde_json::Value) -> Vec<String> {
    c["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["type"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn helm_lint_strict_passes() {
    let Some(helm) = helm() else { return };
    let out = Command::new(&helm)
        .args(["lint", "--strict"])
        .arg(chart())
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(out.status.success(), "helm lint --strict: {text}");
    assert!(
        text.contains("1 chart(s) linted, 0 chart(s) failed"),
        "{text}"
    );
}

#[test]
fn deploy_is_the_charts_default_rendering() {
    // tern-xtask's render-deploy --check, in process (its helm is the same as helm()'s)
    let Some(_helm) = helm() else { return };
    let check = |out: &std::path::Path| {
        let args = ["render-deploy", "--check", "--out"].map(String::from);
        tern_xtask::run([&args[..], &[out.display().to_string()]].concat())
    };
    if let Err(e) = check(&workspace_root().join("deploy")) {
        panic!(
            "deploy/ drifted from deploy/helm/tern (run cargo xtask render-deploy):\n{}",
            e.message
        );
    }
    // The check fails on drift: a copy of deploy/ with one line changed is named where it is,
    // with the line.
    let copy = tempfile::tempdir().unwrap();
    std::fs::create_dir(copy.path().join("cluster-network-policy")).unwrap();
    for sub in ["", "cluster-network-policy"] {
        for e in std::fs::read_dir(workspace_root().join("deploy").join(sub)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "yaml") {
                std::fs::copy(&p, copy.path().join(sub).join(p.file_name().unwrap())).unwrap();
            }
        }
    }
    let cm = copy.path().join("configmap.yaml");
    let text = std::fs::read_to_string(&cm).unwrap();
    std::fs::write(&cm, text.replace("\"mtu\": 1500", "\"mtu\": 1400")).unwrap();
    let text = match check(copy.path()) {
        Ok(()) => panic!("a drifted copy passed the check"),
        Err(e) => e.message,
    };
    assert!(
        text.contains(&format!("{} differs", cm.display())) && text.contains("\"mtu\": 1400"),
        "{text}"
    );
    assert!(
        !text.contains("cluster-network-policy"),
        "only the drifted file: {text}"
    );
}

#[test]
fn defaults_render_the_deployed_chain() {
    let Some(helm) = helm() else { return };
    let all = template(&helm, &[]).unwrap();
    // helm install --create-namespace makes the namespace: no Namespace in the chart by default
    assert!(!all.contains("kind: Namespace"), "{all}");
    let c = conflist(&all);
    assert_eq!(c["cniVersion"], "1.1.0");
    assert_eq!(
        types(&c),
        ["tern", "tern-tuning", "portmap", "bandwidth"],
        "{c}"
    );
    assert_eq!(c["plugins"][0]["mtu"], 1500);
    // The agent enforces NetworkPolicy: ADD waits for a new pod's rules.
    assert_eq!(
        c["plugins"][0]["networkPolicy"],
        serde_json::json!({"waitSeconds": 10})
    );
    assert_eq!(
        c["plugins"][1]["sysctl"]["net.ipv4.tcp_keepalive_time"],
        "600"
    );
    assert_eq!(c["plugins"][2]["snat"], true);
    let ds = doc(&all, "DaemonSet", "tern-agent");
    for want in [
        "image: ghcr.io/tern-cni/tern:0.1.0",
        "- \"0.0.0.0:9413\"",
        "- --node-routes",
        "prometheus.io/port: \"9413\"",
        "containerPort: 9413",
        "value: \"info\"",
        "- operator: Exists",
        "memory: 64Mi",
        r#"command: ["tern-agent", "install", "--pod-cidrs-from-node", "true"]"#,
    ] {
        assert!(ds.contains(want), "the DaemonSet lacks {want:?}:\n{ds}");
    }
    let nat = doc(&all, "ConfigMap", "tern-egress-nat");
    assert!(
        nat.contains(r#"TERN_CLUSTER_CIDRS: "10.244.0.0/16,10.96.0.0/12""#),
        "{nat}"
    );
    doc(&all, "ClusterRole", "tern-agent-node-routes");
}

#[test]
fn operator_values_reach_the_manifests() {
    let Some(helm) = helm() else { return };
    let all = template(
        &helm,
        &[
            "--set",
            "image.repository=registry.example/tern,image.tag=0.2.0-rc1,image.pullPolicy=Always",
            "--set",
            "egressNat.clusterCidrs={10.1.0.0/16,fd00:1::/56},egressNat.serviceCidrs={10.2.0.0/16}",
            "--set",
            "nodeRoutes.mode=none,metrics.address=::,metrics.port=9500,metrics.scrapeAnnotations=false",
            "--set",
            "referencePlugins.portmap.enabled=false,logLevel=debug,mtu=1450,networkPolicy.enabled=false",
            "--set",
            "tuning.sysctls.net\\.ipv4\\.tcp_keepalive_time=300",
            "--set",
            "tolerations[0].key=node-role.kubernetes.io/control-plane,tolerations[0].effect=NoSchedule,tolerations[0].operator=Exists",
            "--set",
            "resources.limits.memory=128Mi",
        ],
    )
    .unwrap();
    let c = conflist(&all);
    assert_eq!(types(&c), ["tern", "tern-tuning", "bandwidth"], "{c}");
    assert_eq!(c["plugins"][0]["mtu"], 1450);
    assert!(
        c["plugins"][0].get("networkPolicy").is_none(),
        "no enforcer in the agent: ADD must not wait on it: {c}"
    );
    assert_eq!(
        c["plugins"][1]["sysctl"]["net.ipv4.tcp_keepalive_time"],
        "300"
    );
    let ds = doc(&all, "DaemonSet", "tern-agent");
    for want in [
        "image: registry.example/tern:0.2.0-rc1",
        "imagePullPolicy: Always",
        "- \"[::]:9500\"",
        "containerPort: 9500",
        "value: \"debug\"",
        "key: node-role.kubernetes.io/control-plane",
        "memory: 128Mi",
        r#""--reference-plugins", "bandwidth"]"#,
    ] {
        assert!(ds.contains(want), "the DaemonSet lacks {want:?}:\n{ds}");
    }
    for gone in [
        "--node-routes",
        "--network-policy",
        "prometheus.io/",
        "operator: Exists\n        -",
    ] {
        assert!(
            !ds.contains(gone),
            "the DaemonSet still has {gone:?}:\n{ds}"
        );
    }
    assert!(!all.contains("name: tern-agent-node-routes"), "{all}");
    assert!(!all.contains("name: tern-agent-network-policy"), "{all}");
    let nat = doc(&all, "ConfigMap", "tern-egress-nat");
    assert!(
        nat.contains(r#"TERN_CLUSTER_CIDRS: "10.1.0.0/16,fd00:1::/56,10.2.0.0/16""#),
        "{nat}"
    );
    // no sysctls: no tern-tuning in the chain; neither reference plugin: the install told so
    let all = template(
        &helm,
        &[
            "--set",
            "tuning.sysctls=null",
            "--set",
            "referencePlugins.portmap.enabled=false,referencePlugins.bandwidth.enabled=false",
        ],
    )
    .unwrap();
    assert_eq!(types(&conflist(&all)), ["tern"]);
    assert!(
        doc(&all, "DaemonSet", "tern-agent").contains(r#""--reference-plugins", ""]"#),
        "{all}"
    );
}

#[test]
fn denied_flow_logging_is_off_by_default_and_its_values_reach_the_flags() {
    let Some(helm) = helm() else { return };
    let ds = |all: &str| doc(all, "DaemonSet", "tern-agent").to_owned();
    let off = ds(&template(&helm, &[]).unwrap());
    assert!(!off.contains("--network-policy-log"), "{off}");
    let set = "networkPolicy.logDenied=true,networkPolicy.logDeniedRate=20,networkPolicy.logDeniedGroup=7";
    let on = ds(&template(&helm, &["--set", set]).unwrap());
    for want in [
        "- --network-policy-log-denied=true",
        "- --network-policy-log-rate=20",
        "- --network-policy-log-group=7",
    ] {
        assert!(on.contains(want), "the DaemonSet lacks {want:?}:\n{on}");
    }
    let no_enforcer = ds(&template(
        &helm,
        &["--set", &format!("{set},networkPolicy.enabled=false")],
    )
    .unwrap());
    assert!(!no_enforcer.contains("--network-policy"), "{no_enforcer}");
}

#[test]
fn vxlan_mode_renders_the_flag_and_deploy_vxlans_rbac() {
    let Some(helm) = helm() else { return };
    let all = template(&helm, &["--set", "nodeRoutes.mode=vxlan,mtu=1450"]).unwrap();
    let ds = doc(&all, "DaemonSet", "tern-agent");
    assert!(ds.contains("- --node-routes=vxlan\n"), "{ds}");
    assert!(ds.contains("- --node-name=$(NODE_NAME)"), "{ds}");
    assert!(!ds.contains("- --node-routes\n"), "{ds}");
    assert_eq!(conflist(&all)["plugins"][0]["mtu"], 1450);
    // The routes still need list/watch nodes; the annotation write is deploy/vxlan/'s role.
    doc(&all, "ClusterRoleBinding", "tern-agent-node-routes");
    let plain = std::fs::read_to_string(workspace_root().join("deploy/vxlan/rbac.yaml")).unwrap();
    let rules = |d: &str| -> String {
        d.lines()
            .skip_while(|l| *l != "rules:")
            .take_while(|l| !l.starts_with("---"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let chart_role = doc(&all, "ClusterRole", "tern-agent-vxlan");
    let plain_role = doc(&plain, "ClusterRole", "tern-agent-vxlan");
    assert!(rules(chart_role).contains("nodes/status"), "{chart_role}");
    assert_eq!(rules(chart_role), rules(plain_role));
    assert!(
        doc(&all, "ClusterRoleBinding", "tern-agent-vxlan").contains("name: tern-agent\n"),
        "{all}"
    );
    // host-gw (the default) grants no status patch.
    let default = template(&helm, &[]).unwrap();
    assert!(!default.contains("tern-agent-vxlan"), "{default}");
}

#[test]
fn the_grafana_dashboard_is_a_labelled_configmap_when_asked_for() {
    let Some(helm) = helm() else { return };
    let default = template(&helm, &[]).unwrap();
    assert!(!default.contains("tern-dashboard"), "off by default");
    let all = template(&helm, &["--set", "metrics.dashboard=true"]).unwrap();
    let cm = doc(&all, "ConfigMap", "tern-dashboard");
    assert!(
        cm.contains("  labels:\n    grafana_dashboard: \"1\"\n"),
        "{cm}"
    );
    assert!(cm.contains("  namespace: tern\n"), "{cm}");
    let body: String = cm
        .lines()
        .skip_while(|l| !l.starts_with("  tern.json: |-"))
        .skip(1)
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let d: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("dashboard JSON: {e}\n{body}"));
    assert_eq!(d["uid"], "tern-overview");
    assert!(d["panels"].as_array().is_some_and(|p| p.len() > 10), "{d}");
    let off = template(
        &helm,
        &["--set", "metrics.enabled=false,metrics.dashboard=true"],
    )
    .unwrap();
    assert!(!off.contains("tern-dashboard"), "{off}");
}

#[test]
fn a_wrong_value_fails_with_the_keys_name() {
    let Some(helm) = helm() else { return };
    for (set, words) in [
        (
            "nodeRoutes.mode=ipip",
            &["nodeRoutes", "mode", "host-gw"][..],
        ),
        (
            "egressNat.clusterCidrs={10.244.0.0/33}",
            &["clusterCidrs"][..],
        ),
        ("egressNat.serviceCidrs={10.96.0.0}", &["serviceCidrs"][..]),
        ("metrics.port=70000", &["metrics", "port", "maximum"][..]),
        ("metrics.address=localhost", &["metrics", "address"][..]),
        ("logLevel=verbose", &["logLevel", "info"][..]),
        ("image.pullPolicy=Sometimes", &["pullPolicy"][..]),
        (
            "tuning.sysctls.kernel\\.panic=1",
            &["kernel.panic", "net"][..],
        ),
        (
            "referencePlugins.portmap.enabled=maybe",
            &["portmap", "enabled", "boolean"][..],
        ),
        ("egressNat.clustercidrs={10.0.0.0/8}", &["clustercidrs"][..]),
        ("mtu=70", &["mtu"][..]),
        ("networkPolicy.waitSeconds=0", &["waitSeconds"][..]),
        ("networkPolicy.logDeniedRate=0", &["logDeniedRate"][..]),
    ] {
        let err = template(&helm, &["--set", set])
            .map(|out| format!("rendered:\n{out}"))
            .expect_err(set);
        assert!(
            err.contains("values don't meet the specifications of the schema"),
            "{set}: {err}"
        );
        for w in words {
            assert!(err.contains(w), "{set}: the message lacks {w:?}: {err}");
        }
    }
}

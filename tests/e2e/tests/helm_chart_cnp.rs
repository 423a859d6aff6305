//! ClusterNetworkPolicy in tern's Helm chart (`clusterNetworkPolicy`), through helm as
//! `helm_chart` runs it (skips and fails the same way without the binary).
//!
//! What it proves: off by default (no CRD, no RBAC, no flag: deploy/ is as before); on, the
//! agent gets `--cluster-network-policy=true`, its ClusterRole lists and watches
//! clusternetworkpolicies (and nodes) and nothing else, and the CRD is the pinned module's file
//! of the chosen channel byte for byte but for the `helm.sh/resource-policy: keep` annotation;
//! `installCrd: false` leaves the CRD out; on without `networkPolicy.enabled` fails naming both;
//! a wrong channel fails with the key's name.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod helm;

use helm::{chart, helm, template};

const CRD: &str = "clusternetworkpolicies.policy.networking.k8s.io";

/// The document of `kind` named `name` in a rendering (from its `kind:` line to the next `---`).
fn doc<'a>(all: &'a str, kind: &str, name: &str) -> &'a str {
    all.split("\n---\n")
        .find(|d| {
            d.lines().any(|l| l == format!("kind: {kind}"))
                && d.lines().any(|l| l == format!("  name: {name}"))
        })
        .unwrap_or_else(|| panic!("no {kind} {name} in:\n{all}"))
}

/// The chart's copy of the module's CRD of `channel`.
fn crd_file(channel: &str) -> String {
    std::fs::read_to_string(chart().join(format!("files/clusternetworkpolicies.{channel}.yaml")))
        .unwrap()
}

#[test]
fn off_by_default_on_renders_the_flag_the_rbac_and_the_crd() {
    let Some(helm) = helm() else { return };
    let default = template(&helm, &[]).unwrap();
    assert!(!default.contains("cluster-network-policy"), "{default}");
    assert!(!default.contains("CustomResourceDefinition"), "{default}");

    let all = template(&helm, &["--set", "clusterNetworkPolicy.enabled=true"]).unwrap();
    let ds = doc(&all, "DaemonSet", "tern-agent");
    assert!(ds.contains("- --network-policy=true\n"), "{ds}");
    assert!(ds.contains("- --cluster-network-policy=true\n"), "{ds}");
    let role = doc(&all, "ClusterRole", "tern-agent-cluster-network-policy");
    let rules: Vec<&str> = role.lines().skip_while(|l| *l != "rules:").collect();
    assert_eq!(
        rules,
        [
            "rules:",
            "  - apiGroups: [\"policy.networking.k8s.io\"]",
            "    resources: [\"clusternetworkpolicies\"]",
            "    verbs: [\"list\", \"watch\"]",
            "  - apiGroups: [\"\"]",
            "    resources: [\"nodes\"]",
            "    verbs: [\"list\", \"watch\"]",
        ]
    );
    assert!(
        doc(
            &all,
            "ClusterRoleBinding",
            "tern-agent-cluster-network-policy"
        )
        .contains("name: tern-agent\n"),
        "{all}"
    );
    for channel in ["standard", "experimental"] {
        let all = template(
            &helm,
            &[
                "--set",
                &format!(
                    "clusterNetworkPolicy.enabled=true,clusterNetworkPolicy.channel={channel}"
                ),
            ],
        )
        .unwrap();
        let crd = doc(&all, "CustomResourceDefinition", CRD);
        assert!(crd.contains("    helm.sh/resource-policy: keep\n"), "{crd}");
        assert!(crd.contains(&format!(
            "    policy.networking.k8s.io/channel: {channel}\n"
        )));
        assert!(crd.contains("    policy.networking.k8s.io/bundle-version: v0.3.0\n"));
        // The module's file, the annotation aside (helm's `# Source:` line and `---` around it).
        let module = crd_file(channel);
        let rendered = crd.replacen("    helm.sh/resource-policy: keep\n", "", 1);
        let body = rendered
            .split_once("\napiVersion: apiextensions.k8s.io/v1\n")
            .map_or(rendered.as_str(), |(_, b)| b);
        assert_eq!(
            format!("apiVersion: apiextensions.k8s.io/v1\n{}", body.trim_end()),
            module.trim_end(),
            "{channel}"
        );
    }
}

#[test]
fn without_the_crd_or_without_network_policy() {
    let Some(helm) = helm() else { return };
    let all = template(
        &helm,
        &[
            "--set",
            "clusterNetworkPolicy.enabled=true,clusterNetworkPolicy.installCrd=false",
        ],
    )
    .unwrap();
    assert!(!all.contains("CustomResourceDefinition"), "{all}");
    doc(&all, "ClusterRole", "tern-agent-cluster-network-policy");
    let err = template(
        &helm,
        &[
            "--set",
            "clusterNetworkPolicy.enabled=true,networkPolicy.enabled=false",
        ],
    )
    .expect_err("clusterNetworkPolicy without networkPolicy");
    assert!(
        err.contains("clusterNetworkPolicy.enabled needs networkPolicy.enabled"),
        "{err}"
    );
    let err = template(&helm, &["--set", "clusterNetworkPolicy.channel=beta"]).expect_err("beta");
    assert!(
        err.contains("values don't meet the specifications of the schema")
            && err.contains("channel"),
        "{err}"
    );
}

//! `cnp_baseline_deny`: with TERN_CNP_BASELINE_DENY=1 (and TERN_CLUSTER_CNP=1), a Baseline
//! ClusterNetworkPolicy that denies every pod outside kube-system (the cluster's DNS) all
//! ingress from pods and all egress to pods and to any address, applied after the smoke check
//! and before the specs: what the Netpol specs say of a cluster whose default is deny (README,
//! "ClusterNetworkPolicy conformance"). Waits until a pod of a fresh namespace cannot reach
//! another, so the specs start under it; the policy stays, the namespace goes.

use crate::images::AGNHOST;
use tern_cluster::{Node, Res};

const NAMESPACE: &str = "tern-baseline-check";

const BASELINE_DENY: &str = r#"apiVersion: policy.networking.k8s.io/v1alpha2
kind: ClusterNetworkPolicy
metadata: {name: tern-conformance-baseline-deny}
spec:
  tier: Baseline
  priority: 1000
  subject:
    namespaces:
      matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}]
  ingress:
  - {name: deny-all-from-pods, action: Deny, from: [{namespaces: {}}]}
  egress:
  - {name: deny-all, action: Deny, to: [{namespaces: {}}, {networks: [0.0.0.0/0, "::/0"]}]}
"#;

/// The check: the policy applied, then in force.
pub fn cnp_baseline_deny(node: &Node) -> Res {
    node.kubectl_in(&["apply", "-f", "-"], BASELINE_DENY)?;
    node.kubectl(&["create", "namespace", NAMESPACE])?;
    let in_force = in_force(node);
    let deleted = node.kubectl(&["delete", "namespace", NAMESPACE, "--wait=false"]);
    in_force.and(deleted.map(drop))
}

/// Until client cannot reach server, both in [`NAMESPACE`] (30 s).
fn in_force(node: &Node) -> Res {
    let image = format!("--image={AGNHOST}");
    let ns = ["-n", NAMESPACE];
    let run = |name: &str, args: &[&str]| {
        let mut all = ns.to_vec();
        all.extend(["run", name, &image, "--restart=Never", "--"]);
        all.extend_from_slice(args);
        node.kubectl(&all)
    };
    run("server", &["netexec", "--http-port=80"])?;
    run("client", &["pause"])?;
    let timeout = "--timeout=120s";
    node.kubectl(&[
        ns[0],
        ns[1],
        "wait",
        "--for=condition=Ready",
        "pod/server",
        "pod/client",
        timeout,
    ])?;
    let ip = node.kubectl(&[
        ns[0],
        ns[1],
        "get",
        "pod",
        "server",
        "-o",
        "jsonpath={.status.podIP}",
    ])?;
    let target = format!("{}:80", ip.trim());
    node.wait_for(
        30,
        "the Baseline deny in force (client cannot reach server)",
        || {
            let connect = [
                "exec",
                "client",
                "--",
                "/agnhost",
                "connect",
                "--timeout=2s",
                &target,
            ];
            let mut all = ns.to_vec();
            all.extend(connect);
            node.kubectl(&all).is_err()
        },
    )
}

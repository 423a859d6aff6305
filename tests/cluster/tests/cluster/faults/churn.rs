//! The churn beside a fault: pods added and removed, a label flipped, a policy added and
//! removed, in a loop, on pods and policies of their own (label `churn`), so the probed pairs'
//! verdicts never change. A refused command (the API server down) is counted, not fatal.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tern_cluster::{Node, Res};

/// The churn pods' names (two alive at a time, at most).
const PODS: [&str; 3] = ["churn-0", "churn-1", "churn-2"];

fn pod(node: &Node, name: &str) -> String {
    node.pod_manifest(name).replace(
        "labels: {app: tern-test}",
        "labels: {app: tern-test, churn: pod}",
    )
}

fn policy(i: usize) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
         metadata: {{name: churn-{i}, namespace: default, labels: {{churn: policy}}}}\n\
         spec:\n  podSelector: {{matchLabels: {{churn: pod, side: {}}}}}\n  policyTypes: [Ingress]\n  \
         ingress:\n  - from: [{{podSelector: {{matchLabels: {{churn: pod}}}}}}]\n",
        if i % 2 == 0 { "a" } else { "b" }
    )
}

/// Runs the loop until `stop`; returns how many commands went through.
pub fn run(node: &Node, stop: &AtomicBool) -> usize {
    let mut ok = 0;
    let mut i = 0usize;
    let mut tally = |r: Res<String>| ok += usize::from(r.is_ok());
    while !stop.load(Ordering::Relaxed) {
        let (new, old) = (PODS[i % 3], PODS[(i + 1) % 3]);
        tally(node.kubectl_in(&["apply", "-f", "-"], &pod(node, new)));
        tally(node.kubectl(&["delete", "pod", old, "--ignore-not-found", "--wait=false"]));
        let side = if i % 2 == 0 { "side=a" } else { "side=b" };
        tally(node.kubectl(&["label", "pod", "-l", "churn=pod", side, "--overwrite"]));
        tally(node.kubectl_in(&["apply", "-f", "-"], &policy(i)));
        if i > 0 {
            let name = format!("churn-{}", i - 1);
            tally(node.kubectl(&[
                "delete",
                "networkpolicy",
                &name,
                "--ignore-not-found",
                "--wait=false",
            ]));
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
    ok
}

/// Deletes every churn pod and policy and waits for the pods to go.
pub fn clean_up(node: &Node) -> Res {
    node.kubectl(&[
        "delete",
        "networkpolicy",
        "-l",
        "churn=policy",
        "--ignore-not-found",
    ])?;
    node.kubectl(&[
        "delete",
        "pod",
        "-l",
        "churn=pod",
        "--ignore-not-found",
        "--wait=true",
        "--timeout=90s",
    ])?;
    Ok(())
}

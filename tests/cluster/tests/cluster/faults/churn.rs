//! The churn beside a fault: pods added and removed, a label flipped, a policy added and
//! removed, in a loop, on pods and policies of their own (label `churn`), so the probed pairs'
//! verdicts never change. A refused command (the API server down) is counted, not fatal. A fault
//! may pause it ([`Control::pause`]) to look at the agent with no change of the churn's pending.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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

/// How the fixture and a fault steer the loop.
#[derive(Default)]
pub struct Control {
    stop: AtomicBool,
    pause: AtomicBool,
    parked: AtomicBool,
}

impl Control {
    /// Ends the loop.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Holds the loop between two rounds and returns once it holds (its last command done).
    pub fn pause(&self) {
        self.pause.store(true, Ordering::SeqCst);
        let end = Instant::now() + Duration::from_secs(30);
        while !self.parked.load(Ordering::SeqCst) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Lets the loop go on.
    pub fn resume(&self) {
        self.pause.store(false, Ordering::SeqCst);
    }

    /// Whether the loop ends; waits here while paused.
    fn stopped(&self) -> bool {
        while self.pause.load(Ordering::SeqCst) && !self.stop.load(Ordering::SeqCst) {
            self.parked.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
        }
        self.parked.store(false, Ordering::SeqCst);
        self.stop.load(Ordering::SeqCst)
    }
}

/// Runs the loop until [`Control::stop`]; returns how many commands went through.
pub fn run(node: &Node, control: &Control) -> usize {
    let mut ok = 0;
    let mut i = 0usize;
    let mut tally = |r: Res<String>| ok += usize::from(r.is_ok());
    while !control.stopped() {
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

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
        if i.is_multiple_of(2) { "a" } else { "b" }
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

/// One churn command: refused within 5 s when the API server does not answer (a partition
/// drops its packets: without a deadline a command would hang past the fault).
fn kubectl(node: &Node, args: &[&str], input: Option<&str>) -> bool {
    let mut all = vec!["--request-timeout=5s"];
    all.extend_from_slice(args);
    node.run(&mut node.kubectl_cmd(&all), input).is_ok()
}

/// Runs the loop until [`Control::stop`]; returns how many commands went through.
pub fn run(node: &Node, control: &Control) -> usize {
    let mut ok = 0;
    let mut i = 0usize;
    let mut tally = |args: &[&str], input: Option<&str>| {
        ok += usize::from(kubectl(node, args, input));
    };
    while !control.stopped() {
        let (new, old) = (PODS[i % 3], PODS[(i + 1) % 3]);
        tally(&["apply", "-f", "-"], Some(&pod(node, new)));
        tally(
            &["delete", "pod", old, "--ignore-not-found", "--wait=false"],
            None,
        );
        let side = if i.is_multiple_of(2) {
            "side=a"
        } else {
            "side=b"
        };
        tally(
            &["label", "pod", "-l", "churn=pod", side, "--overwrite"],
            None,
        );
        tally(&["apply", "-f", "-"], Some(&policy(i)));
        if i > 0 {
            let name = format!("churn-{}", i - 1);
            tally(
                &[
                    "delete",
                    "networkpolicy",
                    &name,
                    "--ignore-not-found",
                    "--wait=false",
                ],
                None,
            );
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

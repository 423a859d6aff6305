//! The checks the run makes itself around the upstream specs, each a trial of its own: `smoke`
//! (what a new user tries first, and the guard), `self_through_service` (a pod reaching itself
//! through its Service under a NetworkPolicy, decision 0003), `cross_node_nodeports` (two
//! nodes: each node's NodePorts from a pod on the other), `sysctl_precedence` (the sysctls
//! specs' setting against tern-tuning's) and `cnp_baseline_deny` (a Baseline
//! ClusterNetworkPolicy the specs then run under).
//!
//! Invariant: every command a check runs goes through [`Node::run`] (a non-zero exit is an
//! error, logged to `<out>/<check>.log`), and what a check made is removed however it ends.

mod baseline_deny;
mod nodeports;
mod self_service;
mod smoke;
mod sysctls;

use crate::images::AGNHOST;
use tern_cluster::conformance::mode::Mode;
use tern_cluster::conformance::Verdict;
use tern_cluster::{tail, Node, Res};

use crate::stages::Run;

/// A check: its name (its trial's and its log's) and its body.
type Check = (&'static str, fn(&Node) -> Res);

/// The checks this mode runs before the specs, each a verdict.
pub fn run(run: &Run) -> Vec<Verdict> {
    let mut checks: Vec<Check> = Vec::new();
    if run.mode != Mode::Cnp {
        // what a new user tries first; a pod to itself through its Service under a deny-all
        checks.push(("smoke", smoke::smoke));
        checks.push(("self_through_service", self_service::self_through_service));
        if run.node.two_nodes() {
            // a pod on each node to the other node's NodePort, TCP and UDP, each family
            checks.push(("cross_node_nodeports", nodeports::cross_node_nodeports));
        }
        if run.mode.checks_sysctls() {
            // which value a pod sees when its securityContext and tern-tuning set one sysctl
            checks.push(("sysctl_precedence", sysctls::sysctl_precedence));
        }
        // a Baseline ClusterNetworkPolicy denying everything outside kube-system
        if std::env::var("TERN_CNP_BASELINE_DENY").as_deref() == Ok("1") {
            checks.push(("cnp_baseline_deny", baseline_deny::cnp_baseline_deny));
        }
    }
    checks
        .into_iter()
        .map(|(name, check)| {
            let log = run.out.join(format!("{name}.log"));
            let r = run.node.log_to(&log).and_then(|()| check(run.node));
            let r = r.map_err(|e| format!("{e}\n--- {}:\n{}", log.display(), tail(&log, 30)));
            eprintln!(
                "[conformance] {name}: {}",
                if r.is_ok() { "ok" } else { "FAILED" }
            );
            Verdict::of(name, r)
        })
        .collect()
}

/// Runs `check`, then the kubectl commands `cleanup` (arguments split at spaces) however it
/// ended: the check's error first, else cleanup's.
fn cleaning(node: &Node, check: impl FnOnce() -> Res, cleanup: &[&str]) -> Res {
    let checked = check();
    let mut cleaned = Ok(());
    for args in cleanup {
        let args: Vec<&str> = args.split(' ').collect();
        if let Err(e) = node.kubectl(&args) {
            cleaned = cleaned.and(Err(e));
        }
    }
    checked.and(cleaned)
}

/// A command's output as bash's `$(...)` keeps it: trailing newlines dropped.
fn captured(out: &str) -> &str {
    out.trim_end_matches('\n')
}

/// `addr` as the host part of a URL: an IPv6 address in brackets.
fn url_host(addr: &str) -> String {
    if addr.contains(':') {
        format!("[{addr}]")
    } else {
        addr.to_owned()
    }
}

/// `kubectl exec POD -c main -- CMD` whose request gives up after 20 s (a probe that may hang).
fn exec_within(node: &Node, pod: &str, cmd: &[&str]) -> Res<String> {
    let mut args = vec!["exec", "--request-timeout=20s", pod, "-c", "main", "--"];
    args.extend_from_slice(cmd);
    node.kubectl(&args)
}

/// An agnhost pod NAME in `default` (container `main`, labels `labels`, bound to node `on` when
/// given) running `args` (agnhost's subcommand) or, with `command`, that command.
fn agnhost_pod(name: &str, labels: &str, on: Option<&str>, run: &str) -> String {
    let selector = on.map_or_else(String::new, |n| {
        format!("  nodeSelector: {{kubernetes.io/hostname: {n}}}\n")
    });
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, labels: {{{labels}}}}}\n\
         spec:\n{selector}  containers:\n  - name: main\n    image: {AGNHOST}\n    {run}\n"
    )
}

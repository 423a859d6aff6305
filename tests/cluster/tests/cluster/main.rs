//! The real-cluster tier: tern installed with `kubectl apply -f deploy/` (and, in the last case,
//! with its Helm chart) on a real one-node
//! Kubernetes (etcd, kube-apiserver, controller-manager, scheduler, kubelet over containerd 2's
//! or CRI-O's CRI), pods started by the kubelet. docs/TESTING.md, "The real-cluster tier".
//!
//! A libtest-mimic harness: the cases run in order on one thread (each builds on the ones
//! before, `install` first, as an operator's day does), filtered by name as libtest does, and
//! reported in libtest's format (`test cluster::NAME ... ok`, a `test result:` line).
//!
//! Not part of `cargo test --workspace` (`test = false`): scripts/test runs it after the cargo
//! tiers. Alone (root, after scripts/setup and scripts/build-go):
//! `cargo test -p tern-cluster --test cluster [-- FILTER]`. TERN_CLUSTER_RUNTIME=crio runs the
//! node on CRI-O: names `cluster-crio::NAME`, only `install` and `pods` unless `--include-ignored`.
//! The cluster is dual stack unless TERN_CLUSTER_IP_FAMILY=ipv4 (then `dual_stack` is ignored).
//! TERN_CLUSTER_KEEP=1 leaves the cluster running (tear down: `bash tests/cluster/node.sh down`).
//! TERN_CLUSTER_NODES=2 brings up two nodes (node 2 a podman container, tests/cluster/container.sh;
//! VXLAN node routes unless TERN_CLUSTER_NODE_ROUTES=host-gw) and runs the two-node cases
//! instead: names `cluster-2node::NAME` (two_nodes/, and faults/ with the probes across).
//!
//! Bring-up and teardown are tests/cluster/node.sh (`up`, `down`); each case's commands and their
//! output go to `$KT/cases/NAME.log`, whose tail is the failure message.

mod agent_kill;
mod agent_rollout;
mod cases;
mod chain;
mod cnp;
mod critest;
mod day2;
mod denied_log;
mod dual_stack;
mod faults;
mod helm;
mod lifecycle;
mod netpol;
mod netpol_admit;
mod netpol_latency;
mod node_routes;
mod pod_cidrs;
mod rbac;
mod tokens;
mod trace;
mod two_nodes;
mod uninstall_idle;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use libtest_mimic::{Arguments, Failed, Trial};
use tern_cluster::{errors, tail, Node, Res};

/// A case: a name (as the bash tier named it) and its body.
type Case = (&'static str, fn(&Node) -> Res);

/// Every case, in the order they run.
const CASES: &[Case] = &[
    ("install", cases::install),
    ("pods", cases::pods),
    ("host_port", chain::host_port),
    ("bandwidth", chain::bandwidth),
    ("dual_stack", dual_stack::dual_stack),
    ("critest", critest::critest),
    ("node_routes", node_routes::node_routes),
    ("pod_cidrs_follow", pod_cidrs::pod_cidrs_follow),
    ("network_policy", netpol::network_policy),
    (
        "network_policy_new_pod",
        netpol_admit::network_policy_new_pod,
    ),
    (
        "network_policy_enforcement_latency",
        netpol_latency::enforcement_latency,
    ),
    ("cluster_network_policy", cnp::cluster_network_policy),
    ("rbac", rbac::rbac),
    ("sandbox_recreated", day2::sandbox_recreated),
    ("token_revoked", tokens::token_revoked),
    ("max_token_expiration", tokens::max_token_expiration),
    ("agent_pod_deleted", day2::agent_pod_deleted),
    ("agent_restart", agent_kill::agent_restart),
    (
        "agent_rollout_pod_start",
        agent_rollout::agent_rollout_pod_start,
    ),
    ("fault_agent_sigkill", faults::agent_sigkill),
    ("fault_nft_fails", faults::nft::nft_fails),
    ("fault_apiserver_restart", faults::api::apiserver_restart),
    (
        "fault_apiserver_unreachable",
        faults::api::apiserver_unreachable,
    ),
    ("fault_daemonset_rollout", faults::daemonset_rollout),
    ("apiserver_down", day2::apiserver_down),
    ("signing_key_rotated", tokens::signing_key_rotated),
    ("rollout", day2::rollout),
    ("network_not_ready", lifecycle::network_not_ready),
    ("uninstall", lifecycle::uninstall),
    ("helm", helm::helm),
    ("uninstall_no_pods", uninstall_idle::uninstall_no_pods),
];

/// The two-node cases (TERN_CLUSTER_NODES=2, names `cluster-2node::NAME`), in the order they
/// run: the faults that cross nodes before node 2's Node is deleted and readdressed.
const TWO_NODE_CASES: &[Case] = &[
    ("install", two_nodes::install),
    ("pods_across", two_nodes::pods_across),
    ("guard", two_nodes::guard),
    ("fault_agent_sigkill_node2", faults::agent_sigkill_node2),
    ("fault_daemonset_rollout", faults::daemonset_rollout),
    (
        "network_policy_enforcement_latency",
        netpol_latency::enforcement_latency_across,
    ),
    (
        "fault_apiserver_unreachable_node2",
        faults::api::apiserver_unreachable_node2,
    ),
    (
        "node2_reregistered",
        two_nodes::reregister::node2_reregistered,
    ),
    (
        "node2_readdressed",
        two_nodes::reregister::node2_readdressed,
    ),
    ("teardown", two_nodes::teardown::teardown),
];

/// The cases the CRI-O node runs by default: deploy/ applied, pods wired, ping, nothing left.
const CRIO_CASES: &[&str] = &["install", "pods"];

/// The Go binaries the tier needs (scripts/build-go), relative to `$GOBIN_DIR`.
const GO_BINS: &[&str] = &[
    "kubernetes/kube-apiserver",
    "kubernetes/kubelet",
    "kubernetes/kubectl",
    "etcd/etcd",
    "containerd/containerd",
    "cri-tools/crictl",
    "cri-o/crio",
    "cri-tools/critest",
    "registry/registry",
    "plugins/portmap",
    "plugins/bandwidth",
    "helm/helm",
];

/// Set once `node.sh up` has been called: only then is there anything to tear down (under
/// another run's `$KT` there may well be a cluster that is not this run's).
static STARTED: AtomicBool = AtomicBool::new(false);

fn main() {
    let mut args = Arguments::from_args();
    let two_nodes = std::env::var("TERN_CLUSTER_NODES").as_deref() == Ok("2");
    if two_nodes && std::env::var_os("TERN_CLUSTER_NODE_ROUTES").is_none() {
        // VXLAN node routes, as CI's two-node conformance run has them
        std::env::set_var("TERN_CLUSTER_NODE_ROUTES", "vxlan");
    }
    // In order, one after another: the cases share one cluster and build on each other.
    args.test_threads = Some(1);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let crio_conf = Path::new(env!("CARGO_BIN_EXE_tern-cluster-crio-conf"));
    let node = match Node::load(&root, crio_conf) {
        Ok(n) => Arc::new(n),
        Err(e) => {
            eprintln!("[cluster] {e}");
            std::process::exit(1);
        }
    };
    let (tier, cases) = match (two_nodes, node.runtime.as_str()) {
        (true, _) => ("cluster-2node", TWO_NODE_CASES),
        (false, "crio") => ("cluster-crio", CASES),
        (false, _) => ("cluster", CASES),
    };
    let keep = std::env::var("TERN_CLUSTER_KEEP").as_deref() == Ok("1");
    let up: Arc<std::sync::OnceLock<Res>> = Arc::default();
    let trials: Vec<Trial> = cases
        .iter()
        .map(|&(name, body)| {
            let (node, up) = (Arc::clone(&node), Arc::clone(&up));
            // dual_stack needs the dual-stack cluster (TERN_CLUSTER_IP_FAMILY=ipv4 has none)
            let ignored = (!two_nodes && node.runtime == "crio" && !CRIO_CASES.contains(&name))
                || (name == "dual_stack" && node.var("IP_FAMILY") != "dual")
                || (two_nodes && name == "teardown" && keep);
            Trial::test(format!("{tier}::{name}"), move || {
                let mut first = false;
                let up = up.get_or_init(|| {
                    first = true;
                    bring_up(&node)
                });
                if let Err(e) = up {
                    // the details once, with the first case that ran
                    return Err(match first {
                        true => format!("the cluster did not come up: {e}").into(),
                        false => "the cluster did not come up (see the first case)".into(),
                    });
                }
                run_case(&node, name, body)
            })
            .with_ignored_flag(ignored)
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    if STARTED.load(Ordering::SeqCst) && !keep {
        eprintln!("[cluster] tearing down {}", node.kt.display());
        if let Err(e) = node.sh(&["down"], &[]) {
            eprintln!("[cluster] teardown: {e}");
            std::process::exit(1);
        }
    }
    conclusion.exit()
}

/// Checks the prerequisites and runs `node.sh up` (its output to `$KT/up.log`, printed on
/// failure with the components' logs), once, before the first case that runs.
fn bring_up(node: &Node) -> Res {
    if !is_root() {
        return Err("needs root (the node is this machine)".into());
    }
    if node.two_nodes() && node.runtime != "containerd" {
        return Err("two nodes: containerd only (node 2 runs containerd)".into());
    }
    let gobin = Path::new(node.var("GOBIN_DIR"));
    for b in GO_BINS {
        if !gobin.join(b).is_file() {
            return Err(format!(
                "{} missing: bash scripts/build-go",
                gobin.join(b).display()
            ));
        }
    }
    eprintln!(
        "[cluster] bringing up the control plane and the node under {}",
        node.kt.display()
    );
    let t0 = std::time::Instant::now();
    STARTED.store(true, Ordering::SeqCst);
    // The bring-up is the machine's, not tern's (tern is applied by the first case): one that
    // fails is shown whole, torn down and tried once more.
    if let Err(first) = up(node) {
        eprintln!("[cluster] the bring-up failed; torn down and tried once more:\n{first}");
        node.sh(&["down"], &[])?;
        up(node)?;
    }
    eprintln!("[cluster] cluster up in {:.0}s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// `node.sh up` once, its output kept in `$KT/up.log`; on failure that log's tail and each
/// component's tail and first errors, a kubelet still running asked for its goroutines first.
fn up(node: &Node) -> Res {
    let log = std::env::temp_dir().join(format!("tern-cluster-up-{}.log", std::process::id()));
    node.log_to(&log)?;
    let r = node.sh(&["up"], &[]);
    let kept = node.kt.join("up.log");
    let _ = std::fs::copy(&log, &kept);
    let _ = std::fs::remove_file(&log);
    let Err(e) = r else { return Ok(()) };
    let kubelet_stacks = goroutines(&node.kt.join("kubelet"));
    let mut msg = format!("{e}\n{}", tail(&kept, 40));
    for c in ["etcd", "apiserver", "containerd", "crio", "kubelet"] {
        let l = node.kt.join(c).join("log");
        if l.exists() {
            msg.push_str(&format!("\n--- {c} log:\n{}", tail(&l, 15)));
            let first = errors(&l, 15);
            if !first.is_empty() {
                msg.push_str(&format!("\n--- {c} log, its first errors:\n{first}"));
            }
        }
    }
    if !kubelet_stacks.is_empty() {
        msg.push_str(&format!(
            "\n--- the kubelet's goroutines in a system call or waiting minutes (SIGQUIT):\n{kubelet_stacks}"
        ));
    }
    Err(msg)
}

/// A Go component in `dir` (its `pid` and `log`) still running is sent SIGQUIT, which makes it
/// write every goroutine's stack to its log and exit: the goroutines in a system call or
/// blocked for minutes, each its header and first frames (a silent kubelet says where it is).
fn goroutines(dir: &Path) -> String {
    let Some(pid) = std::fs::read_to_string(dir.join("pid"))
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
    else {
        return String::new();
    };
    let pid = nix::unistd::Pid::from_raw(pid);
    if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGQUIT).is_err() {
        return String::new();
    }
    for _ in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(250));
        if nix::sys::signal::kill(pid, None).is_err() {
            break;
        }
    }
    let text = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        let blocked =
            l.starts_with("goroutine ") && (l.contains("[syscall") || l.contains("minutes"));
        if blocked && out.len() < 120 {
            out.push(format!("    | {l}"));
            out.extend(lines.by_ref().take(6).map(|f| format!("    | {f}")));
        }
    }
    out.join("\n")
}

/// Runs one case with its log at `$KT/cases/NAME.log`; on failure, the message and the log's
/// last 40 lines.
fn run_case(node: &Node, name: &str, body: fn(&Node) -> Res) -> Result<(), Failed> {
    let log = node.kt.join("cases").join(format!("{name}.log"));
    node.log_to(&log)?;
    let t0 = std::time::Instant::now();
    let r = body(node);
    let secs = t0.elapsed().as_secs();
    match r {
        Ok(()) => {
            node.note(&format!("ok ({secs}s)"));
            Ok(())
        }
        Err(e) => {
            node.note(&format!("FAIL: {e}"));
            Err(format!("{e} ({secs}s)\n--- {}:\n{}", log.display(), tail(&log, 40)).into())
        }
    }
}

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

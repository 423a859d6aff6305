//! Kubernetes' own e2e networking conformance specs (k8s.io/kubernetes v1.34.4 test/e2e, written
//! upstream, not here), or SIG Network's ClusterNetworkPolicy suite (mode `cnp`), run against
//! tern on the real-cluster tier brought up as operators run a cluster
//! (the upstream images made by images.rs, then tests/conformance/lib.sh `conformance_up`
//! through tests/cluster/node.sh `up conformance`), and reported in libtest's format: one trial
//! per spec that ran (failed with the suite's message), the suite's own skips as ignored, and
//! the checks around the specs (checks/: `smoke`, `self_through_service`,
//! `cross_node_nodeports`, `sysctl_precedence`, `cnp_baseline_deny`) as trials of their own.
//!
//! Not part of `cargo test --workspace` (`test = false`): scripts/test runs it after the tier;
//! alone, `scripts/conformance [MODE]` (root, after scripts/setup; docs/TESTING.md, "Upstream
//! network conformance"), i.e. `TERN_CONFORMANCE_MODE=MODE cargo test -p tern-cluster --test
//! conformance`. Modes (tern_cluster::conformance::mode):
//! - none: the 45 specs of `--label-filter='Conformance && sig-network'`, or
//!   TERN_CONFORMANCE_FOCUS=REGEX [TERN_CONFORMANCE_SKIP=REGEX]: ginkgo --focus/--skip instead;
//! - `dualstack`: `[Feature:IPv6DualStack]` (no SCTP: this kernel has none); `netpol`: `Netpol`,
//!   enforced by tern-agent --network-policy from deploy/; `network`: the wider single-node
//!   `[sig-network]` set; `multinode` (TERN_CLUSTER_NODES=2): the specs that need two nodes and
//!   Netpol in one run; `sysctls`: [sig-node] Sysctls after `sysctl_precedence`; `crio` (the
//!   CRI-O node): Networking Granular Checks: Pods and HostPort after `sysctl_precedence`;
//! - `cnp`: SIG Network's ClusterNetworkPolicy suite (sigs.k8s.io/network-policy-api v0.3.0,
//!   `conformance.test`) with TERN_CLUSTER_CNP=1; TERN_CNP_RUN, TERN_CNP_TIMEOUT (40m),
//!   TERN_CNP_FLAG=0, TERN_CNP_CHANNEL, TERN_CNP_FEATURES; a whole run writes
//!   docs/conformance/network-policy-api-v0.3.0.yaml.
//!
//! Knobs: TERN_CLUSTER_NODES=2 (node 2, tests/cluster/container.sh; with TERN_CLUSTER_NODE_ROUTES=vxlan
//! on another subnet), TERN_CLUSTER_IP_FAMILY=ipv4, TERN_CONFORMANCE_PROCS (ginkgo's processes,
//! 2), TERN_CONFORMANCE_TIMEOUT (90m), TERN_KUBE_PROXY_MODE (nftables|iptables),
//! TERN_CLUSTER_CNP=1 with TERN_CNP_BASELINE_DENY=1 (a Baseline deny before the specs),
//! TERN_CLUSTER_KEEP=1 (leave the cluster up; `bash tests/cluster/node.sh down`).
//!
//! Every run writes target/conformance/<UTC>/ (cnp: target/conformance-cnp/<UTC>/): images.log,
//! up.log, each check's log, the suite's log and reports (report.json, junit.xml; suite.log,
//! report.yaml), summary.txt. Everything runs before the first trial is reported: the trials
//! only tell.

mod checks;
mod images;
mod stages;
mod suites;

use std::path::Path;

use libtest_mimic::{Arguments, Trial};
use tern_cluster::conformance::mode::Mode;
use tern_cluster::conformance::{Outcome, Verdict};
use tern_cluster::Node;

fn main() {
    let mut args = Arguments::from_args();
    args.test_threads = Some(1);
    let mode = match Mode::parse(&std::env::var("TERN_CONFORMANCE_MODE").unwrap_or_default()) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("[conformance] {e}");
            std::process::exit(2);
        }
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = std::fs::canonicalize(&root).unwrap_or(root);
    let crio_conf = set_env(mode);
    let node = match Node::load(&root, &crio_conf) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("[conformance] {e}");
            std::process::exit(1);
        }
    };
    let prefix = match mode {
        Mode::Cnp => "conformance_cnp",
        _ => "conformance",
    };
    if args.list {
        // The trials are the checks and the specs a run selects, known once ginkgo ran: a list
        // must not bring the cluster up.
        eprintln!("[conformance] trials are known only after a run; nothing listed");
        libtest_mimic::run(&args, Vec::new()).exit();
    }
    let verdicts = stages::run(&node, mode);
    let trials: Vec<Trial> = verdicts
        .into_iter()
        .map(|Verdict { name, outcome }| {
            let ignored = matches!(outcome, Outcome::Ignored(_));
            Trial::test(format!("{prefix}::{name}"), move || match outcome {
                Outcome::Failed(why) => Err(why.into()),
                Outcome::Passed | Outcome::Ignored(_) => Ok(()),
            })
            .with_ignored_flag(ignored)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit()
}

/// The environment tests/cluster/lib.sh reads, set before `node.sh vars`: the API server on
/// the node's address, the cluster's DNS, the kubelet on its standard port 10250 ("Proxy version
/// v1 should proxy logs on node with explicit kubelet port" hard-codes it); CRI-O for `crio`;
/// with two nodes node 1 named as the machine, since the 2-node specs compare the hostname a
/// hostNetwork pod answers with (node 1's is the machine's) with its Node's name. Returns the
/// CRI-O config renderer's path (TERN_CRIO_CONF, or the one built with this test).
fn set_env(mode: Mode) -> std::path::PathBuf {
    std::env::set_var("TERN_CLUSTER_API_ADDR", "10.99.219.1");
    std::env::set_var("TERN_CLUSTER_DNS", "10.99.220.10");
    std::env::set_var("TERN_CLUSTER_KUBELET_PORT", "10250");
    if mode == Mode::Crio {
        std::env::set_var("TERN_CLUSTER_RUNTIME", "crio");
    }
    if mode == Mode::Cnp {
        std::env::set_var("TERN_CLUSTER_CNP", "1");
    }
    let two_nodes = std::env::var("TERN_CLUSTER_NODES").as_deref() == Ok("2");
    if two_nodes && std::env::var_os("TERN_CLUSTER_NODE_NAME").is_none() {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        std::env::set_var("TERN_CLUSTER_NODE_NAME", host.trim());
    }
    std::env::var_os("TERN_CRIO_CONF").map_or_else(
        || env!("CARGO_BIN_EXE_tern-cluster-crio-conf").into(),
        Into::into,
    )
}

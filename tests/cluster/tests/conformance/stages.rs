//! The run's stages in order: prerequisites, bring-up (node.sh `up conformance`), the checks
//! around the specs (checks/, each a verdict), the suite, teardown, and summary.txt. A stage that
//! fails is a failed verdict; bring-up failing ends the run (after teardown), a check failing
//! does not.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tern_cluster::conformance::mode::Mode;
use tern_cluster::conformance::{counts, Verdict};
use tern_cluster::{fail, tail, Node, Res};

use crate::{checks, images, suites};

/// The Go programs the run needs (scripts/build-go e2e coredns), under `$GOBIN_DIR`.
const GO_BINS: &[&str] = &[
    "kubernetes/kube-apiserver",
    "kubernetes/kubelet",
    "kubernetes/kubectl",
    "etcd/etcd",
    "containerd/containerd",
    "cri-tools/crictl",
    "plugins/portmap",
    "plugins/bandwidth",
    "e2e/e2e.test",
    "e2e/ginkgo",
    "e2e/kube-proxy",
    "e2e/agnhost",
    "coredns/coredns",
];

/// Where a run writes, and what it has said so far.
pub struct Run<'a> {
    pub node: &'a Node,
    pub mode: Mode,
    /// target/conformance/<UTC>/ (cnp: target/conformance-cnp/<UTC>/).
    pub out: PathBuf,
    pub t0: Instant,
    /// summary.txt's lines.
    pub summary: Vec<String>,
}

/// Runs every stage; the verdicts in the order they were reached.
pub fn run(node: &Node, mode: Mode) -> Vec<Verdict> {
    let dir = match mode {
        Mode::Cnp => "conformance-cnp",
        _ => "conformance",
    };
    let out = node.root.join("target").join(dir).join(utc_stamp());
    let mut run = Run {
        node,
        mode,
        out,
        t0: Instant::now(),
        summary: Vec::new(),
    };
    let mut verdicts = Vec::new();
    if let Err(e) = std::fs::create_dir_all(&run.out).map_err(|e| e.to_string()) {
        return vec![Verdict::of("prerequisites", Err(e))];
    }
    if let Err(e) = prerequisites(&run) {
        return vec![Verdict::of("prerequisites", Err(e))];
    }
    let keep = std::env::var("TERN_CLUSTER_KEEP").as_deref() == Ok("1");
    let up = bring_up(&run);
    let up_ok = up.is_ok();
    verdicts.push(Verdict::of("bring_up", up));
    if up_ok {
        let checks = checks::run(&run);
        let stop = checks
            .iter()
            .any(|v| v.name == "cnp_baseline_deny" && v.failed());
        verdicts.extend(checks);
        run.summary.push(format!(
            "runtime {}; kube-proxy mode {}; IP family {}; checks: {}",
            node.runtime,
            std::env::var("TERN_KUBE_PROXY_MODE").unwrap_or_else(|_| "nftables".into()),
            node.var("IP_FAMILY"),
            verdicts
                .iter()
                .map(|v| format!("{} {}", v.name, if v.failed() { "FAILED" } else { "ok" }))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if !stop {
            let specs = match mode {
                Mode::Cnp => suites::cnp(&mut run),
                _ => suites::ginkgo(&mut run),
            };
            summarize(&mut run, &specs);
            verdicts.extend(specs);
        }
    }
    if !keep {
        let down = stage(&run, "down", &["down"], &[]);
        if down.is_err() {
            verdicts.push(Verdict::of("teardown", down));
        }
    }
    write_summary(&run);
    verdicts
}

/// Root, mmdebstrap, the mode's needs, and the Go programs (built when missing:
/// `scripts/build-go e2e coredns`, cached).
fn prerequisites(run: &Run) -> Res {
    let node = run.node;
    if !nix::unistd::Uid::effective().is_root() {
        return fail("needs root (the node is this machine)");
    }
    if Command::new("mmdebstrap")
        .arg("--version")
        .output()
        .is_err()
    {
        return fail("mmdebstrap missing: apt-get install mmdebstrap");
    }
    match run.mode {
        Mode::DualStack if node.var("CLUSTER_CIDR6").is_empty() => {
            return fail("dualstack: the cluster is IPv4 only (TERN_CLUSTER_IP_FAMILY)")
        }
        Mode::MultiNode if node.var("TWO_NODES") != "1" => {
            return fail("multinode: needs TERN_CLUSTER_NODES=2")
        }
        _ => {}
    }
    let mut what = vec!["e2e", "coredns"];
    let mut bins = GO_BINS.to_vec();
    if run.mode == Mode::Cnp {
        what.push("netpol-api");
        bins.push("netpol-api/conformance.test");
    }
    let status = Command::new("bash")
        .arg(node.root.join("scripts/build-go"))
        .args(&what)
        .status()
        .map_err(|e| format!("scripts/build-go: {e}"))?;
    if !status.success() {
        return fail(format!("scripts/build-go {} failed", what.join(" ")));
    }
    let gobin = Path::new(node.var("GOBIN_DIR"));
    for b in bins {
        if !gobin.join(b).is_file() {
            return fail(format!(
                "{} missing: bash scripts/build-go",
                gobin.join(b).display()
            ));
        }
    }
    Ok(())
}

/// The images ([`images::make`], logged to `images.log`), then node.sh `up conformance` (a
/// previous instance under `$KT` torn down first; refused over another tern install), which
/// imports them; on failure the log's tail and the components' logs.
fn bring_up(run: &Run) -> Res {
    let log = run.out.join("images.log");
    run.node.log_to(&log)?;
    let list = images::make(
        run.node,
        std::env::var("TERN_CLUSTER_CNP").as_deref() == Ok("1"),
    )
    .map_err(|e| {
        format!(
            "making the images: {e}\n--- {}:\n{}",
            log.display(),
            tail(&log, 30)
        )
    })?;
    let up = up(run, &list.to_string_lossy());
    // the archives not kept in the cache are in the node's store now (node 2 pulls from it)
    if let Some(made) = list.parent() {
        let _ = std::fs::remove_dir_all(made);
    }
    up
}

/// node.sh `up conformance` with the images of `list`; on failure the log's tail and the
/// components' logs.
fn up(run: &Run, list: &str) -> Res {
    eprintln!(
        "[conformance] bringing up the tier under {} (log: {})",
        run.node.kt.display(),
        run.out.join("up.log").display()
    );
    let t0 = Instant::now();
    if let Err(e) = stage(
        run,
        "up",
        &["up", "conformance"],
        &[("TERN_CONFORMANCE_IMAGES", list)],
    ) {
        let mut msg = e;
        for c in ["apiserver", "kubelet", "kube-proxy", "containerd", "crio"] {
            let l = run.node.kt.join(c).join("log");
            if l.exists() {
                msg.push_str(&format!("\n--- {c} log:\n{}", tail(&l, 15)));
            }
        }
        return Err(msg);
    }
    eprintln!("[conformance] tier up in {}s", t0.elapsed().as_secs());
    Ok(())
}

/// `node.sh ARGS` with its output in `<out>/<log>.log`; on failure the error and the log's
/// last 30 lines.
fn stage(run: &Run, log: &str, args: &[&str], env: &[(&str, &str)]) -> Res {
    let path = run.out.join(format!("{log}.log"));
    run.node.log_to(&path)?;
    run.node
        .sh(args, env)
        .map(|_| ())
        .map_err(|e| format!("{e}\n--- {}:\n{}", path.display(), tail(&path, 30)))
}

/// The totals line of summary.txt, and the failures by name.
fn summarize(run: &mut Run, specs: &[Verdict]) {
    let (passed, failed, ignored) = counts(specs);
    run.summary.push(format!(
        "specs run {}: passed {passed}, failed {failed}; skipped by the suite {ignored}; total {}s",
        passed + failed,
        run.t0.elapsed().as_secs()
    ));
    for v in specs.iter().filter(|v| v.failed()) {
        run.summary.push(format!("  FAILED {}", v.name));
    }
}

fn write_summary(run: &Run) {
    let text = run.summary.join("\n") + "\n";
    print!("{text}");
    println!("results: {}", run.out.display());
    if let Err(e) = std::fs::write(run.out.join("summary.txt"), text) {
        eprintln!("[conformance] summary.txt: {e}");
    }
}

/// The time now as `20261206T210554Z` (the results' directory name).
fn utc_stamp() -> String {
    Command::new("date")
        .args(["-u", "+%Y%m%dT%H%M%SZ"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|_| std::process::id().to_string())
}

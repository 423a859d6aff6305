//! The upstream suites, run on the cluster the stages brought up: ginkgo over `e2e.test` (its
//! JSON and JUnit reports in the run's directory) or SIG Network's `conformance.test` (mode
//! `cnp`, its ConformanceReport kept in docs/conformance/ after a whole run), each turned into
//! verdicts by the tern-cluster library.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use tern_cluster::conformance::{ginkgo as report, gotest, Verdict};

use crate::stages::Run;
use tern_cluster::tail;

/// ginkgo with the mode's filter (TERN_CONFORMANCE_PROCS, default 2; TERN_CONFORMANCE_TIMEOUT,
/// default 90m): one verdict per spec it reports, and one for the run itself when ginkgo failed
/// without a failed spec to say why (a suite-level failure, no report).
pub fn ginkgo(run: &mut Run) -> Vec<Verdict> {
    let node = run.node;
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let filter = run.mode.ginkgo_filter(
        env("TERN_CONFORMANCE_FOCUS").as_deref(),
        env("TERN_CONFORMANCE_SKIP").as_deref(),
    );
    let e2e = Path::new(node.var("GOBIN_DIR")).join("e2e");
    let procs = env("TERN_CONFORMANCE_PROCS").unwrap_or_else(|| "2".into());
    let mut cmd = Command::new(e2e.join("ginkgo"));
    cmd.args(["--no-color", &format!("--procs={procs}")])
        .arg(format!(
            "--timeout={}",
            env("TERN_CONFORMANCE_TIMEOUT").unwrap_or_else(|| "90m".into())
        ))
        .args(&filter)
        .arg(format!("--output-dir={}", run.out.display()))
        .args(["--json-report=report.json", "--junit-report=junit.xml"])
        .arg(e2e.join("e2e.test"))
        .arg("--")
        .arg(format!(
            "--kubeconfig={}",
            node.kt.join("pki/admin.kubeconfig").display()
        ))
        .arg("--provider=local")
        .arg(format!("--kubectl-path={}/kubectl", node.var("K8S_BIN")))
        .arg(format!("--report-dir={}", run.out.display()))
        .args(["--disable-log-dump=true", "--dump-logs-on-failure=false"]);
    // the suite counts the nodes only from --num-nodes (-1 with provider local): without it every
    // spec that needs 2 nodes skips itself, whatever the cluster has
    if node.var("TWO_NODES") == "1" {
        cmd.arg("--num-nodes=2");
    }
    let log = run.out.join("e2e.log");
    eprintln!(
        "[conformance] running e2e.test {} (procs {procs}; log: {})",
        filter.join(" "),
        log.display()
    );
    let t1 = Instant::now();
    let status = logged(&mut cmd, &log);
    run.summary.push(format!(
        "e2e.test {}: {status}, e2e {}s",
        filter.join(" "),
        t1.elapsed().as_secs()
    ));
    guard_rejections(run);
    let mut verdicts = match std::fs::read_to_string(run.out.join("report.json")) {
        Ok(json) => report::verdicts(&json).unwrap_or_else(|e| vec![Verdict::of("report", Err(e))]),
        Err(e) => vec![Verdict::of("report", Err(format!("no report.json ({e})")))],
    };
    if status != "exit 0" && !verdicts.iter().any(Verdict::failed) {
        let why = format!(
            "ginkgo {status}\n--- {}:\n{}",
            log.display(),
            tail(&log, 30)
        );
        verdicts.push(Verdict::of("e2e.test", Err(why)));
    }
    verdicts
}

/// The guard's rejections of pods' traffic off the machine, for summary.txt (guard.nft).
fn guard_rejections(run: &mut Run) {
    let out = Command::new("nft")
        .args(["list", "table", "inet", "tern_kt_guard"])
        .output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let _ = std::fs::write(run.out.join("guard.nft"), &text);
    let words: Vec<&str> = text.split_whitespace().collect();
    let packets: u64 = words
        .windows(2)
        .filter(|w| w[0] == "packets")
        .filter_map(|w| w[1].parse::<u64>().ok())
        .sum();
    run.summary.push(format!("guard rejections: {packets}"));
}

/// SIG Network's ClusterNetworkPolicy suite as upstream's reports/README.md runs it: every
/// profile (ClusterNetworkPolicy), its experimental features unless TERN_CNP_FEATURES="";
/// TERN_CNP_RUN (a -test.run regex), TERN_CNP_TIMEOUT (default 40m). A whole run with the flag
/// on (no TERN_CNP_RUN, TERN_CNP_FLAG not 0) writes docs/conformance/network-policy-api-v0.3.0.yaml.
pub fn cnp(run: &mut Run) -> Vec<Verdict> {
    let node = run.node;
    let features = std::env::var("TERN_CNP_FEATURES").unwrap_or_else(|_| {
        "ClusterNetworkPolicyNamedPorts,ClusterNetworkPolicyEgressNodePeers".into()
    });
    let test_run = std::env::var("TERN_CNP_RUN").ok().filter(|v| !v.is_empty());
    let whole = test_run.is_none() && std::env::var("TERN_CNP_FLAG").as_deref() != Ok("0");
    let channel = std::env::var("TERN_CNP_CHANNEL").unwrap_or_else(|_| "experimental".into());
    let nodes = if node.var("TWO_NODES") == "1" { 2 } else { 1 };
    let version = Command::new("git")
        .args([
            "-C",
            &node.root.to_string_lossy(),
            "describe",
            "--always",
            "--dirty",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|_| "unknown".into());
    let report = run.out.join("report.yaml");
    let mut cmd =
        Command::new(Path::new(node.var("GOBIN_DIR")).join("netpol-api/conformance.test"));
    cmd.current_dir(&run.out)
        .env("KUBECONFIG", node.kt.join("pki/admin.kubeconfig"))
        .args(["-test.v", "-test.timeout"])
        .arg(std::env::var("TERN_CNP_TIMEOUT").unwrap_or_else(|_| "40m".into()))
        .args(["-test.run", test_run.as_deref().unwrap_or("TestConformanceProfiles")])
        .args(["--conformance-profiles=ClusterNetworkPolicy", "--organization=tern-cni"])
        .args(["--project=tern", "--url=https://github.com/tern-cni/tern"])
        .arg(format!("--version={version}"))
        .arg("--contact=https://github.com/tern-cni/tern/issues")
        .arg(format!(
            "--additional-info=scripts/conformance cnp on the real-cluster tier ({nodes} node(s), {}, CRD channel {channel})",
            node.var("IP_FAMILY")
        ))
        .arg(format!("--report-output={}", report.display()));
    if !features.is_empty() {
        cmd.arg(format!("--supported-features={features}"))
            .arg("--all-features");
    }
    let log = run.out.join("suite.log");
    eprintln!(
        "[conformance] running conformance.test (log: {})",
        log.display()
    );
    let t1 = Instant::now();
    let status = logged(&mut cmd, &log);
    run.summary.push(format!(
        "conformance.test: {status}, suite {}s; nodes {nodes}; CRD channel {channel}; features {}",
        t1.elapsed().as_secs(),
        if features.is_empty() {
            "standard only"
        } else {
            features.as_str()
        }
    ));
    keep_report(run, &report, whole);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let mut verdicts = gotest::verdicts(&text);
    if status != "exit 0" && !verdicts.iter().any(Verdict::failed) {
        let why = format!(
            "conformance.test {status}\n--- {}:\n{}",
            log.display(),
            tail(&log, 20)
        );
        verdicts.push(Verdict::of("conformance.test", Err(why)));
    }
    verdicts
}

/// The suite's ConformanceReport: to docs/conformance/ after a whole run with the flag on (the
/// suite counts tests left out by -test.run as passed), its profiles in summary.txt.
fn keep_report(run: &mut Run, report: &Path, whole: bool) {
    let Ok(yaml) = std::fs::read_to_string(report) else {
        run.summary.push(format!(
            "no report.yaml: see {}",
            run.out.join("suite.log").display()
        ));
        return;
    };
    if whole {
        let kept = run
            .node
            .root
            .join("docs/conformance/network-policy-api-v0.3.0.yaml");
        let copied = std::fs::create_dir_all(run.node.root.join("docs/conformance"))
            .and_then(|()| std::fs::write(&kept, &yaml));
        run.summary.push(match copied {
            Ok(()) => "report: docs/conformance/network-policy-api-v0.3.0.yaml".into(),
            Err(e) => format!("report: writing {} failed: {e}", kept.display()),
        });
    } else {
        run.summary.push(format!(
            "report: {} (TERN_CNP_RUN or TERN_CNP_FLAG=0: not a report to keep; tests left out count as passed in it)",
            report.display()
        ));
    }
    let profiles = yaml.lines().skip_while(|l| !l.starts_with("profiles:"));
    run.summary.extend(profiles.map(|l| format!("  {l}")));
}

/// Runs `cmd` with its stdout and stderr in `log`: "exit N", or why it did not run.
fn logged(cmd: &mut Command, log: &Path) -> String {
    let files = File::create(log).and_then(|f| Ok((f.try_clone()?, f)));
    let (out, err) = match files {
        Ok(f) => f,
        Err(e) => return format!("not run: {}: {e}", log.display()),
    };
    let status = cmd.stdin(Stdio::null()).stdout(out).stderr(err).status();
    match status {
        Ok(s) => s
            .code()
            .map_or_else(|| format!("killed ({s})"), |c| format!("exit {c}")),
        Err(e) => format!("not run: {e}"),
    }
}

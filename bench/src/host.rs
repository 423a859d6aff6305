//! What every run prints first (the machine, its load, the commit) and the containerd and CRI-O
//! rows of the default run, which are binaries of their own (tests/cri) run from here.

use std::path::Path;
use std::process::Command;

use crate::opts::beside_self;
use crate::Res;

/// The 1, 5 and 15 minute load averages.
pub(crate) fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split(' ')
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Stdout of PROGRAM ARGS, trimmed; "unknown" when it cannot run or fails.
fn output_of(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into())
}

/// "machine: N cores, kernel K, CPU; load L (1/5/15 min); commit C": other work on the machine
/// skews every figure, so each run says what the machine was doing.
pub(crate) fn header() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')))
        .map(|(_, m)| m.trim().to_owned())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let root = tern_testkit::exec::workspace_root();
    let commit = output_of(
        "git",
        &[
            "-C",
            &root.display().to_string(),
            "rev-parse",
            "--short",
            "HEAD",
        ],
    );
    format!(
        "machine: {cores} cores, kernel {}, {cpu}; load {} (1/5/15 min); commit {commit}",
        output_of("uname", &["-r"]),
        load()
    )
}

/// The file sizes of the plugins compared, one line.
pub(crate) fn binary_sizes(ref_dir: &Path) -> String {
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let ours = ["tern", "tern-tuning"].map(|b| format!("{b} {} bytes", size(&beside_self(b))));
    let refs =
        ["tuning", "ptp", "host-local"].map(|b| format!("{b} {} bytes", size(&ref_dir.join(b))));
    format!("binaries: {}; {}", ours.join("; "), refs.join("; "))
}

/// Builds tests/cnitool (the libcni driver the churn and the libcni bench run) from its Go
/// source: cheap when it is current (Go's build cache).
pub(crate) fn build_cnitool() -> Res<()> {
    let script = tern_testkit::exec::workspace_root().join("tests/cnitool/build.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Which CRI rows to run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum CriRows {
    /// containerd, then CRI-O.
    Both,
    /// CRI-O alone.
    Crio,
}

/// Runs `tern-cri-bench` (unless CRI-O alone) and `tern-crio-bench` (after building CRI-O with
/// scripts/build-go) with ARGS, both built beside this binary, linking the plugins from here
/// (`TERN_BIN_DIR`: a bench binary cannot infer it as tests do).
pub(crate) fn cri_rows(which: CriRows, args: &[String]) -> Res<()> {
    let bins = beside_self("");
    let run = |program: &str| -> Res<()> {
        let status = Command::new(beside_self(program))
            .args(args)
            .env("TERN_BIN_DIR", &bins)
            .status()
            .map_err(|e| format!("{program}: {e} (cargo build --release -p tern-cri?)"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("{program}: {status}"))
        }
    };
    if which == CriRows::Both {
        run("tern-cri-bench")?;
    }
    let root = tern_testkit::exec::workspace_root();
    let built = Command::new("flock")
        .arg("/run/tern-build-go.lock")
        .arg("bash")
        .arg(root.join("scripts/build-go"))
        .arg("cri-o")
        .stdout(std::io::stderr())
        .status()
        .map_err(|e| format!("scripts/build-go cri-o: {e}"))?;
    if !built.success() {
        return Err(format!("scripts/build-go cri-o: {built}"));
    }
    run("tern-crio-bench")
}

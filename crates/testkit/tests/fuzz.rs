//! The fuzz targets (fuzz/, its own workspace, built only by cargo-fuzz: libFuzzer and
//! AddressSanitizer), each run for a bounded time from its seed corpus (fuzz/seeds/<target>), one
//! libtest trial per target: a crash, leak or timeout fails it, its input kept in
//! target/fuzz-artifacts/<target>/ with the log and the command that replays it.
//!
//! Not part of `cargo test --workspace` (`test = false`): scripts/test runs it last.
//! Alone: `cargo test -p tern-testkit --test fuzz [-- TARGET]`; TERN_FUZZ_SECONDS sets the time
//! per target (default 15). New corpus entries go to a temp dir, never into the repository.
//!
//! The toolchain is stable: cargo-fuzz passes nightly-only flags (-Zsanitizer=address and the
//! sanitizer-coverage passes), which a stable rustc accepts with RUSTC_BOOTSTRAP=1, set for these
//! builds only.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};

use libtest_mimic::{Arguments, Failed, Trial};

fn main() {
    let mut args = Arguments::from_args();
    // each target takes a core for its whole time: one at a time, as before
    args.test_threads = Some(1);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = std::fs::canonicalize(&root).unwrap_or(root);
    let fuzz = root.join("fuzz");
    let secs = std::env::var("TERN_FUZZ_SECONDS").unwrap_or_else(|_| "15".into());
    let targets = match cargo_fuzz(&fuzz, &["list"]).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        // one failing trial says why, so the run still ends with a result line
        _ => String::from("cargo-fuzz"),
    };
    let built: Arc<OnceLock<Result<(), String>>> = Arc::default();
    let trials = targets
        .lines()
        .map(|t| {
            let (t, root, secs, built) =
                (t.to_owned(), root.clone(), secs.clone(), Arc::clone(&built));
            Trial::test(format!("fuzz::{t}"), move || {
                built.get_or_init(|| build(&root)).clone()?;
                run_target(&root, &t, &secs)
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit()
}

/// `cargo fuzz ARGS` in fuzz/ (RUSTC_BOOTSTRAP=1, cargo's bin dir on the PATH).
fn cargo_fuzz(fuzz: &Path, args: &[&str]) -> Command {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let path = format!(
        "{home}/.cargo/bin:{}",
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new("cargo");
    c.arg("fuzz")
        .args(args)
        .current_dir(fuzz)
        .env("PATH", path)
        .env("RUSTC_BOOTSTRAP", "1");
    c
}

/// `cargo fuzz build`, once, its log in target/fuzz-build.log.
fn build(root: &Path) -> Result<(), String> {
    let log = root.join("target/fuzz-build.log");
    let err = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let status = cargo_fuzz(&root.join("fuzz"), &["build"])
        .stdout(Stdio::null())
        .stderr(err)
        .status()
        .map_err(|e| format!("cargo fuzz (scripts/setup installs cargo-fuzz): {e}"))?;
    if !status.success() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!(
            "cargo fuzz build failed ({status}; log: target/fuzz-build.log)\n{}",
            tail.join("\n")
        ));
    }
    Ok(())
}

/// One target for `secs` seconds from its seeds, new entries in a temp corpus.
fn run_target(root: &Path, target: &str, secs: &str) -> Result<(), Failed> {
    let work = tempfile::Builder::new()
        .prefix(&format!("tern-fuzz-{target}-"))
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let corpus = work.path().join("corpus");
    std::fs::create_dir(&corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
    let log = work.path().join("log");
    let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let seeds = format!("seeds/{target}");
    let status = cargo_fuzz(&root.join("fuzz"), &["run", target])
        .arg(&corpus)
        .arg(&seeds)
        .args([
            "--",
            &format!("-max_total_time={secs}"),
            "-timeout=10",
            "-rss_limit_mb=2048",
        ])
        .arg("-print_final_stats=1")
        .arg(format!("-artifact_prefix={}/", work.path().display()))
        .stdout(out)
        .stderr(err)
        .status()
        .map_err(|e| format!("cargo fuzz run {target}: {e}"))?;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let execs = text
        .lines()
        .filter_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
        .last()
        .map_or("?", str::trim);
    if status.success() {
        let units = std::fs::read_dir(&corpus).map_or(0, Iterator::count);
        eprintln!("fuzz {target}: {execs} executions in {secs}s, {units} new corpus entries");
        return Ok(());
    }
    let keep = root.join("target/fuzz-artifacts").join(target);
    let kept = keep_artifacts(work.path(), &keep);
    let why: Vec<&str> = text
        .lines()
        .skip_while(|l| {
            !(l.starts_with("==") || l.contains("panicked at") || l.starts_with("SUMMARY"))
        })
        .take(60)
        .collect();
    Err(format!(
        "{status} after {execs} executions; {kept}; replay: (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run {target} {}/<file>)\n{}",
        keep.display(),
        why.join("\n")
    )
    .into())
}

/// Copies the crashing inputs (crash-, leak-, timeout-, oom-) and the log from `work` to `keep`.
fn keep_artifacts(work: &Path, keep: &Path) -> String {
    let copy = || -> std::io::Result<usize> {
        std::fs::create_dir_all(keep)?;
        let mut n = 0;
        for e in std::fs::read_dir(work)? {
            let p = e?.path();
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if ["crash-", "leak-", "timeout-", "oom-", "log"]
                .iter()
                .any(|k| name.starts_with(k))
            {
                std::fs::copy(&p, keep.join(&name))?;
                n += 1;
            }
        }
        Ok(n)
    };
    match copy() {
        Ok(n) => format!("{n} file(s) (inputs and log) kept in {}", keep.display()),
        Err(e) => format!("keeping the input in {} failed: {e}", keep.display()),
    }
}

//! The helm binary and `helm template` of tern's chart, for `helm_chart.rs`.

use std::path::PathBuf;
use std::process::Command;

use tern_testkit::exec::{output_text, workspace_root};

/// The helm binary, or `None` when the test should skip (module docs).
pub fn helm() -> Option<PathBuf> {
    let path = std::env::var_os("TERN_HELM").map_or_else(
        || {
            let cache = std::env::var_os("TERN_GO_CACHE")
                .map_or_else(|| PathBuf::from("/var/cache/tern-build"), PathBuf::from);
            cache.join("bin/helm/helm")
        },
        PathBuf::from,
    );
    if path.is_file() {
        return Some(path);
    }
    let must = std::env::var("TERN_ROOT_TESTS").as_deref() == Ok("run")
        || std::env::var("CI").is_ok_and(|c| !c.is_empty() && c != "0" && c != "false");
    assert!(
        !must,
        "{} missing: bash scripts/build-go helm",
        path.display()
    );
    eprintln!(
        "[helm_chart] {} missing (bash scripts/build-go helm): skipped",
        path.display()
    );
    None
}

pub fn chart() -> PathBuf {
    workspace_root().join("deploy/helm/tern")
}

/// `helm template tern CHART -n tern ARGS`: Ok(stdout) or Err(stdout and stderr).
pub fn template(helm: &PathBuf, args: &[&str]) -> Result<String, String> {
    let out = Command::new(helm)
        .args(["template", "tern"])
        .arg(chart())
        .args(["--namespace", "tern"])
        .args(args)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(output_text(&out))
    }
}

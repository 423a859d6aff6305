//! `tern-cluster-runc-clamp ARGS...`: the real-cluster tier's CRI-O runs runc through this
//! (tests/cluster/crio.sh): it edits the bundle's config.json (`--bundle DIR` or `-b DIR` among
//! ARGS) as containerd's settings do and CRI-O has none for, then execs /usr/sbin/runc ARGS.
//! - `process.oomScoreAdj` raised to this process's own (containerd's restrict_oom_score_adj):
//!   root here may not lower it (no CAP_SYS_RESOURCE), and the kubelet asks -997 for critical
//!   pods like tern-agent;
//! - `linux.resources.hugepageLimits` dropped when no hugetlb hierarchy is mounted (containerd's
//!   tolerate_missing_hugetlb_controller): CRI-O reads /proc/cgroups, which lists hugetlb here
//!   though it is not mounted, and runc then fails to join it.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitCode};

use serde_json::Value;

/// The bundle's config edited: `own` is this process's oom_score_adj; `hugetlb` whether a
/// hugetlb hierarchy is mounted. Whether anything changed.
fn clamp(config: &mut Value, own: i64, hugetlb: bool) -> bool {
    let mut changed = false;
    if let Some(adj) = config.pointer_mut("/process/oomScoreAdj") {
        if adj.as_i64().is_some_and(|a| a < own) {
            *adj = own.into();
            changed = true;
        }
    }
    if !hugetlb {
        let resources = config
            .pointer_mut("/linux/resources")
            .and_then(Value::as_object_mut);
        changed |= resources.is_some_and(|r| r.remove("hugepageLimits").is_some());
    }
    changed
}

/// The value after `--bundle` or `-b` in `args`.
fn bundle(args: &[String]) -> Option<&str> {
    let at = args.iter().position(|a| a == "--bundle" || a == "-b")?;
    args.get(at + 1).map(String::as_str)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(dir) = bundle(&args) {
        let path = Path::new(dir).join("config.json");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if let Ok(mut config) = serde_json::from_str::<Value>(&text) {
            let own = std::fs::read_to_string("/proc/self/oom_score_adj")
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            let hugetlb = Path::new("/sys/fs/cgroup/hugetlb").is_dir()
                || Path::new("/sys/fs/cgroup/cgroup.controllers").is_file();
            if clamp(&mut config, own, hugetlb) {
                if let Err(e) = std::fs::write(&path, config.to_string()) {
                    eprintln!("tern-cluster-runc-clamp: {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    let e = Command::new("/usr/sbin/runc").args(&args).exec();
    eprintln!("tern-cluster-runc-clamp: exec /usr/sbin/runc: {e}");
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_lower_oom_score_adj_is_raised_and_hugepages_dropped_without_hugetlb() {
        let mut c = json!({"process": {"oomScoreAdj": -997}, "linux": {"resources": {"hugepageLimits": [], "cpu": {}}}});
        assert!(clamp(&mut c, -500, false));
        assert_eq!(
            c,
            json!({"process": {"oomScoreAdj": -500}, "linux": {"resources": {"cpu": {}}}})
        );
    }

    #[test]
    fn what_needs_no_clamp_is_left_as_it_is() {
        let c0 = json!({"process": {"oomScoreAdj": 100}, "linux": {"resources": {"hugepageLimits": []}}});
        let mut c = c0.clone();
        assert!(!clamp(&mut c, -500, true));
        assert_eq!(c, c0);
        let mut none = json!({"process": {}});
        assert!(!clamp(&mut none, 0, false));
    }

    #[test]
    fn the_bundle_is_the_value_after_its_flag() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            bundle(&args(&["create", "--bundle", "/b", "id"])),
            Some("/b")
        );
        assert_eq!(bundle(&args(&["create", "-b", "/c", "id"])), Some("/c"));
        assert_eq!(bundle(&args(&["state", "id"])), None);
    }
}

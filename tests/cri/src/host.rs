//! What a private runtime leaves visible on the host, read without changing anything: cgroup
//! directories and the PIDs in them, processes naming a directory, mount points, routes into a
//! pod range, libcni's result cache. The drop guards and the tiers' checks both read it here.

use std::path::{Path, PathBuf};

pub use tern_testkit::tern_host_veth;

/// libcni's result cache (containerd's go-cni and CRI-O both keep libcni's default cache dir).
pub const LIBCNI_CACHE: &str = "/var/lib/cni/results";

/// Cgroup mount points: every `cgroup` (v1 hierarchy) and `cgroup2` mount.
fn cgroup_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() > 2 && (f[2] == "cgroup" || f[2] == "cgroup2")).then(|| f[1].to_owned())
        })
        .collect()
}

/// The directories of cgroupfs parent `parent` that exist, one per hierarchy.
pub fn cgroup_dirs(parent: &str) -> Vec<PathBuf> {
    cgroup_mounts()
        .into_iter()
        .map(|m| Path::new(&m).join(parent.trim_start_matches('/')))
        .filter(|p| p.is_dir())
        .collect()
}

/// PIDs in any cgroup under `parent`, any hierarchy.
pub fn cgroup_pids(parent: &str) -> Vec<i32> {
    fn walk(dir: &Path, out: &mut Vec<i32>) {
        if let Ok(s) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            out.extend(s.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        }
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                walk(&e.path(), out);
            }
        }
    }
    let mut out = Vec::new();
    for d in cgroup_dirs(parent) {
        walk(&d, &mut out);
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// PIDs (not ours) whose command line satisfies `pred` (its arguments, split at NUL).
pub(crate) fn pids_whose_cmdline(pred: impl Fn(&[&[u8]]) -> bool) -> Vec<i32> {
    let me = std::process::id();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if u32::try_from(pid).ok() == Some(me) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if pred(&args) {
            out.push(pid);
        }
    }
    out
}

/// PIDs (not ours) whose command line names a path under `dir`: conmon and runc carry their
/// state paths there.
pub fn pids_naming(dir: &Path) -> Vec<i32> {
    let needle = format!("{}/", dir.display());
    pids_whose_cmdline(|args| {
        args.iter()
            .any(|a| String::from_utf8_lossy(a).contains(&needle))
    })
}

/// Every mount point of this mount namespace (`/proc/self/mounts`, octal escapes undone for
/// spaces only; our paths have none).
pub fn mount_points() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .map(|m| m.replace("\\040", " "))
        .collect()
}

/// Mount points under directory `dir`.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = format!("{}/", dir.display());
    mount_points()
        .into_iter()
        .filter(|m| m.starts_with(&prefix))
        .collect()
}

/// Routes in the root netns into `subnet` (any prefix inside it): `(dev, dst)` pairs; none when
/// `ip` fails (this also serves the drop guard, which must not panic).
pub fn host_routes_into(subnet: &str) -> Vec<(String, String)> {
    tern_testkit::netns::routes_into(subnet).unwrap_or_default()
}

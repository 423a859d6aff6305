//! What every private runtime's drop guard removes from the host after its processes are gone:
//! routes and veths of its pod ranges, mounts and files under its directory, its cgroups and
//! libcni cache entries of its sandboxes.
//!
//! Invariant: only what is derived from the instance (its directory, cgroup parent, pod ranges
//! and sandbox IDs) is touched; every repair is reported, never silent.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::host::{cgroup_dirs, host_routes_into, mounts_under, tern_host_veth, LIBCNI_CACHE};

/// An instance's footprint on the host.
pub(crate) struct Footprint<'a> {
    /// The instance directory (removed, after everything mounted under it).
    pub dir: &'a Path,
    /// The cgroupfs parent of its sandboxes.
    pub cgroup_parent: &'a str,
    /// Its pod ranges.
    pub subnets: &'a [String],
    /// Every sandbox ID it ran.
    pub sandboxes: &'a [String],
}

/// Removes what `f` left (a failed DEL, a killed runtime), in order: host routes into its ranges
/// (and the tern/veth links they use), the sandboxes' host veths, mounts under its directory
/// (deepest first; a mount already gone is not a problem), the directory, its cgroups (leaves
/// first) and libcni cache entries naming a sandbox. Appends what it had to repair or could not
/// remove to `problems`.
pub(crate) fn remove_host_leftovers(f: &Footprint<'_>, problems: &mut Vec<String>) {
    for subnet in f.subnets {
        for (dev, dst) in host_routes_into(subnet) {
            problems.push(format!("host route {dst} dev {dev} left: removed"));
            let _ = Command::new("ip")
                .args(["route", "del", &dst, "dev", &dev])
                .output();
            if dev.starts_with("tern") || dev.starts_with("veth") {
                let _ = Command::new("ip").args(["link", "del", &dev]).output();
            }
        }
    }
    for id in f.sandboxes {
        let veth = tern_host_veth(id, "eth0");
        if Path::new("/sys/class/net").join(&veth).exists() {
            problems.push(format!("host veth {veth} left: removed"));
            let _ = Command::new("ip").args(["link", "del", &veth]).output();
        }
    }
    let mut mounts = mounts_under(f.dir);
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    mounts.dedup();
    for m in mounts {
        if let Err(e) = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH) {
            // EINVAL: no longer a mount point (stacked mounts went with the first detach).
            if e != nix::errno::Errno::EINVAL {
                problems.push(format!("umount {m}: {e}"));
            }
        }
    }
    if f.dir.exists() {
        if let Err(e) = std::fs::remove_dir_all(f.dir) {
            problems.push(format!("remove {}: {e}", f.dir.display()));
        }
    }
    for dir in cgroup_dirs(f.cgroup_parent) {
        remove_cgroup_tree(&dir, problems);
    }
    for e in std::fs::read_dir(LIBCNI_CACHE)
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if f.sandboxes.iter().any(|id| name.contains(id.as_str())) {
            problems.push(format!("libcni cache entry {name} left: removed"));
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// rmdir of a cgroup and its children, leaves first (a cgroup dir is removed with rmdir, its
/// control files go with it). A cgroup whose last task just died may be busy for a moment:
/// retried for up to 2 s.
fn remove_cgroup_tree(dir: &Path, problems: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().is_dir() {
            remove_cgroup_tree(&e.path(), problems);
        }
    }
    let start = Instant::now();
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) if start.elapsed() > Duration::from_secs(2) => {
                problems.push(format!("rmdir cgroup {}: {e}", dir.display()));
                return;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

//! The drop guard's checks, whichever runtime: what a guard must remove, captured while a
//! sandbox runs, and the two ways a guard is exercised (a failed check unwinding through it, the
//! runtime SIGKILLed under it).

use std::path::PathBuf;

use serde_json::Value;
use tern_cri::client::PodRef;
use tern_cri::host::{
    cgroup_dirs, cgroup_pids, host_routes_into, mounts_under, pids_naming, tern_host_veth,
};
use tern_cri::Runtime;

use super::{alive, cache_entries, link_exists, run_and_check, IFNAME};

/// What a guard must have removed, captured while everything runs.
pub struct Footprint {
    pub dir: PathBuf,
    pub pid: u32,
    pub sandbox_pids: Vec<i32>,
    pub cgroups: Vec<PathBuf>,
    pub cgroup_parent: String,
    pub id: String,
    pub veth: String,
    pub netns: PathBuf,
    pub net: String,
    pub subnet: String,
}

impl Footprint {
    /// Runs and checks one sandbox ("guarded") on `c`'s default chain, then captures the rest.
    pub fn capture<R: Runtime>(c: &mut R, chain: &Value, subnet: &str) -> Footprint {
        let pod = PodRef::new("default", "guarded", "uid-guarded");
        let w = run_and_check(c, chain, &pod, subnet);
        let cgroups = cgroup_dirs(c.cgroup_parent());
        assert!(
            !cgroups.is_empty(),
            "no cgroup made under {}",
            c.cgroup_parent()
        );
        Footprint {
            dir: c.dir().to_path_buf(),
            pid: c.pid().unwrap(),
            sandbox_pids: cgroup_pids(c.cgroup_parent()),
            cgroups,
            cgroup_parent: c.cgroup_parent().to_owned(),
            veth: tern_host_veth(&w.id, IFNAME),
            id: w.id,
            netns: w.netns,
            net: chain["name"].as_str().unwrap().to_owned(),
            subnet: subnet.to_owned(),
        }
    }

    /// Nothing of it is left: the runtime and every process of its directory or cgroups gone,
    /// no cgroup, directory, mount, netns, host veth, route or libcni cache entry.
    pub fn assert_all_gone(&self) {
        let pid = i32::try_from(self.pid).unwrap();
        assert!(!alive(pid), "runtime {pid} still running");
        for p in &self.sandbox_pids {
            assert!(!alive(*p), "sandbox process {p} still running");
        }
        assert!(
            pids_naming(&self.dir).is_empty(),
            "{:?}",
            pids_naming(&self.dir)
        );
        for cg in &self.cgroups {
            assert!(!cg.exists(), "cgroup {} left", cg.display());
        }
        assert!(cgroup_dirs(&self.cgroup_parent).is_empty());
        assert!(!self.dir.exists(), "{} left", self.dir.display());
        let mounts = mounts_under(&self.dir);
        assert!(mounts.is_empty(), "mounts left: {mounts:?}");
        assert!(!self.netns.exists(), "netns {} left", self.netns.display());
        assert!(!link_exists(&self.veth), "host veth {} left", self.veth);
        assert!(
            host_routes_into(&self.subnet).is_empty(),
            "{:?}",
            host_routes_into(&self.subnet)
        );
        assert!(
            cache_entries(&self.net).is_empty(),
            "{:?}",
            cache_entries(&self.net)
        );
    }
}

/// A check fails while the sandbox of `f` runs on `c`: the guard drops during unwinding and
/// removes everything.
pub fn assert_guard_after_failed_check<R: Runtime>(c: R, f: &Footprint) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _c = c;
        panic!("a failed check (deliberate)");
    }));
    assert!(r.is_err());
    f.assert_all_gone();
}

/// The runtime of `c` is SIGKILLed while the sandbox of `f` runs: no CRI for the guard, no CNI
/// DEL. The guard must have had to repair something saying `repaired` and removes everything.
pub fn assert_guard_after_runtime_died<R: Runtime>(mut c: R, f: &Footprint, repaired: &str) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(f.pid).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let problems = c.teardown();
    assert!(
        problems.iter().any(|p| p.contains(repaired)),
        "the guard did not have to repair a {repaired}: {problems:?}"
    );
    drop(c);
    f.assert_all_gone();
}

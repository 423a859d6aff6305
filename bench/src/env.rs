//! The run's throwaway world: host netns, pod netns, work dirs (tmpfs under `/run`) and the API
//! server stand-in; all removed on drop.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicUsize;

use tern_apiserver::ApiServer;
use tern_kube::token::BearerToken;
use tern_net::netns::NetNs;

use crate::Res;

/// Runs `ip args...`, failing with its stderr.
pub(crate) fn ip(args: &[&str]) -> Res<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Everything the run creates; `Drop` removes it all.
pub(crate) struct Env {
    pub(crate) tag: String,
    pub(crate) host: String,
    pub(crate) host_ns: NetNs,
    pub(crate) work: PathBuf,
    /// Per-attachment state on tmpfs, where the plugins keep it by default (tern's `stateDir`
    /// `/run/cni/tern`, both tuning plugins' `dataDir` `/run/cni/tuning`).
    pub(crate) run_work: PathBuf,
    /// Whether the bench mounted a tmpfs on `run_work` (this host's `/run` is not one).
    pub(crate) run_mounted: bool,
    pub(crate) pods: Vec<String>,
    /// The API server stand-in, listening on loopback inside the host netns (started by
    /// [`Env::start_api`]); stopped from inside that netns on drop.
    pub(crate) api: Option<ApiServer>,
    /// Pod GETs the stand-in saw during lookup ADD phases, and those ADDs (checked equal per phase).
    pub(crate) lookup_gets: AtomicUsize,
    pub(crate) lookup_adds: AtomicUsize,
}

impl Env {
    pub(crate) fn new() -> Res<Env> {
        let tag = format!("tern-bench-{}", std::process::id());
        let host = format!("{tag}-host");
        // Fresh directories only: a leftover of a run killed midway under a reused PID (or
        // anything else by that name) is never reused, mounted over or removed by this run.
        let fresh = |dir: &Path| -> Res<()> {
            std::fs::create_dir(dir).map_err(|e| {
                format!(
                    "mkdir {}: {e} (a run killed midway leaves it: see the usage notes)",
                    dir.display()
                )
            })
        };
        let work = std::env::temp_dir().join(&tag);
        fresh(&work)?;
        let run_work = Path::new("/run").join(&tag);
        if let Err(e) = fresh(&run_work) {
            let _ = std::fs::remove_dir_all(&work);
            return Err(e);
        }
        // Both directories are this run's own from here: on failure, undo what was made.
        let mut mounted = false;
        let made = ensure_tmpfs(&run_work).and_then(|m| {
            mounted = m;
            ip(&["netns", "add", &host])
        });
        if let Err(e) = made {
            remove_run_work(&run_work, mounted);
            let _ = std::fs::remove_dir_all(&work);
            return Err(e);
        }
        let run_mounted = mounted;
        // A node-like host: lo up and an uplink with a default route (so 169.254.1.1, tern's
        // gateway, is covered by a route as on a real node). No dummy links on these kernels.
        let setup = || -> Res<NetNs> {
            ip(&["-n", &host, "link", "set", "lo", "up"])?;
            ip(&[
                "-n", &host, "link", "add", "uplink0", "type", "veth", "peer", "name", "uplink1",
            ])?;
            ip(&["-n", &host, "link", "set", "uplink0", "up"])?;
            ip(&["-n", &host, "link", "set", "uplink1", "up"])?;
            ip(&[
                "-n",
                &host,
                "addr",
                "add",
                "10.250.0.1/24",
                "dev",
                "uplink0",
            ])?;
            ip(&["-n", &host, "route", "add", "default", "via", "10.250.0.2"])?;
            NetNs::open(format!("/run/netns/{host}")).map_err(|e| e.to_string())
        };
        let host_ns = match setup() {
            Ok(ns) => ns,
            Err(e) => {
                let _ = ip(&["netns", "del", &host]);
                let _ = std::fs::remove_dir_all(&work);
                remove_run_work(&run_work, run_mounted);
                return Err(e);
            }
        };
        Ok(Env {
            tag,
            host,
            host_ns,
            work,
            run_work,
            run_mounted,
            pods: Vec::new(),
            api: None,
            lookup_gets: AtomicUsize::new(0),
            lookup_adds: AtomicUsize::new(0),
        })
    }

    /// Starts the API server stand-in in the host netns and writes a kubeconfig for it (a bearer
    /// token it issued, its CA) to `<work>/kubeconfig`, returned.
    pub(crate) fn start_api(&mut self) -> Res<PathBuf> {
        let api = self
            .host_ns
            .run_in(ApiServer::start)
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("API server stand-in: {e}"))?;
        let token = api.issue_token("kube-system", "tern-cni", 24 * 3600);
        let kc = tern_kube::kubeconfig::render(
            &api.url(),
            api.ca_pem().as_bytes(),
            &BearerToken::new(token),
        );
        let path = self.work.join("kubeconfig");
        std::fs::write(&path, kc).map_err(|e| format!("write {}: {e}", path.display()))?;
        self.api = Some(api);
        Ok(path)
    }

    /// Registers pod `default/<cid>` with a fresh UID in the stand-in and returns the `CNI_ARGS`
    /// a runtime would pass for it.
    pub(crate) fn pod_args(&self, cid: &str) -> Res<String> {
        let api = self.api.as_ref().ok_or("API server stand-in not started")?;
        let uid = tern_apiserver::uuid();
        api.set_pod("default", cid, &uid, &[], false);
        Ok(format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={cid};K8S_POD_UID={uid}"
        ))
    }

    /// GETs of pods the stand-in has seen since the last call, and the paths not seen exactly
    /// once among them. Resets its log.
    pub(crate) fn take_pod_gets(&self) -> (usize, Vec<String>) {
        let Some(api) = &self.api else {
            return (0, Vec::new());
        };
        let mut per: HashMap<String, usize> = HashMap::new();
        for r in api.requests() {
            if r.method == "GET" && r.path.starts_with("/api/v1/namespaces/default/pods/") {
                *per.entry(r.path).or_default() += 1;
            }
        }
        api.reset_counts();
        let total = per.values().sum();
        (
            total,
            per.into_iter()
                .filter(|(_, n)| *n != 1)
                .map(|(p, _)| p)
                .collect(),
        )
    }

    /// Gives every pod netns in `names` an `eth0` (one end of a veth pair whose other end stays
    /// in the pod too), untimed: what a meta plugin alone finds after the main plugin's ADD.
    pub(crate) fn add_ifaces(&self, names: &[String]) -> Res<()> {
        for n in names {
            ip(&[
                "-n", n, "link", "add", "eth0", "type", "veth", "peer", "name", "peer0",
            ])?;
            ip(&["-n", n, "link", "set", "eth0", "up"])?;
        }
        Ok(())
    }

    /// Creates `n` fresh pod netns (outside any timed region) and returns their names.
    pub(crate) fn make_pods(&mut self, n: usize) -> Res<Vec<String>> {
        let base = self.pods.len();
        let mut names = Vec::with_capacity(n);
        for i in base..base + n {
            let name = format!("{}-pod{i}", self.tag);
            ip(&["netns", "add", &name])?;
            self.pods.push(name.clone());
            names.push(name);
        }
        Ok(names)
    }

    pub(crate) fn drop_pods(&mut self, names: &[String]) {
        for n in names {
            let _ = ip(&["netns", "del", n]);
        }
        self.pods.retain(|p| !names.contains(p));
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(api) = self.api.take() {
            // Its shutdown connects to its own loopback address, which exists only there.
            let _ = self.host_ns.run_in(move || drop(api));
        }
        for p in std::mem::take(&mut self.pods) {
            let _ = ip(&["netns", "del", &p]);
        }
        let _ = ip(&["netns", "del", &self.host]);
        let _ = std::fs::remove_dir_all(&self.work);
        remove_run_work(&self.run_work, self.run_mounted);
    }
}

/// Makes `dir` live on tmpfs, as `/run` does on every systemd node (where tern keeps its
/// `stateDir` and the tuning plugins their `dataDir`): mounts a private tmpfs there unless it
/// already is one. Returns whether it mounted. Without it, a host whose `/run` is on disk (some
/// containers and VMs) charges the plugins a journalled create and rename per ADD that no node
/// pays (≈0.2 ms per tern ADD, measured on such a host).
pub(crate) fn ensure_tmpfs(dir: &Path) -> Res<bool> {
    let fs = nix::sys::statfs::statfs(dir).map_err(|e| format!("statfs {}: {e}", dir.display()))?;
    if fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC {
        return Ok(false);
    }
    mount_tmpfs(dir)?;
    println!(
        "bench: {} is not tmpfs on this host: mounted a tmpfs on {} for the plugins' state, as on a node",
        dir.parent().unwrap_or(dir).display(),
        dir.display()
    );
    Ok(true)
}

/// Mounts a private 64 MiB tmpfs on `dir` (undone by [`remove_run_work`]).
pub(crate) fn mount_tmpfs(dir: &Path) -> Res<()> {
    nix::mount::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some("mode=0755,size=64m"),
    )
    .map_err(|e| format!("mount tmpfs on {}: {e}", dir.display()))
}

/// Removes the bench's directory under `/run`, unmounting the tmpfs the bench put there.
pub(crate) fn remove_run_work(dir: &Path, mounted: bool) {
    if mounted {
        let _ = nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH);
    }
    let _ = std::fs::remove_dir_all(dir);
}

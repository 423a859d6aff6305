//! A private CRI-O (built by `scripts/build-go cri-o`) that wires pod sandboxes with our chain.
//!
//! Everything lives under `/tmp/tern-crio-<tag>-<pid>` (see `crio_conf`: config, storage,
//! socket, netns pins at `ns/netns/<uuid>`, runc and conmon state, CNI `bin/` and `net.d/`, the
//! plugins' data dirs, the log); sandbox cgroups under the cgroupfs parent `/tern-crio-<tag>-<pid>`.
//!
//! Invariants:
//! - CRI-O runs in the root netns and mount namespace, so each user picks a pod range nothing
//!   else here uses. libcni's result cache is CRI-O's default (`/var/lib/cni/results`: no
//!   setting for it); teardown removes our entries.
//! - Sandboxes are created as kubelet creates them without `shareProcessNamespace` (PID per
//!   container): with CRI-O's default `drop_infra_ctr` there is no infra container.
//! - The drop guard ([`Crio::teardown`]) works from any state, also after a panic or a SIGKILL:
//!   StopPodSandbox + RemovePodSandbox for every sandbox (the CNI DEL), CRI-O stopped by its PID,
//!   any process naming our directory (conmon, runc) or in our cgroups killed by PID, then the
//!   host leftovers removed (`cleanup`: routes, veths, mounts, directory, cgroups, cache).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

pub use crate::cleanup::pids_naming;
use crate::cleanup::{remove_host_leftovers, Footprint};
use crate::client::{CriClient, PodRef};
use crate::containerd::{cgroup_pids, is_not_found, link_cni_bin, mkdir, tail};
pub use crate::crio_conf::go_bin_dir;
use crate::crio_conf::{self, podman};
use crate::image::{build_pause_archive, run, PAUSE_IMAGE};
use crate::proto::{LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption};
use crate::CriError;

/// How long CRI-O may take to serve the CRI with its network ready after start.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long CRI-O may take to exit after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// What a private CRI-O is started with.
#[derive(Clone, Debug)]
pub struct Options {
    /// A short tag for the directory and cgroup names (letters, digits, `-`).
    pub tag: String,
    /// Pod ranges the conflist uses: teardown removes host routes into them.
    pub subnets: Vec<String>,
    /// Plugins (by type, e.g. `tern`) wrapped by a tracer that appends each call's CNI
    /// environment and stdin to `<dir>/cni-trace.jsonl` before running the plugin.
    pub trace: Vec<String>,
}

/// A running private CRI-O; dropping it tears everything down.
pub struct Crio {
    dir: PathBuf,
    cgroup_parent: String,
    subnets: Vec<String>,
    child: Option<Child>,
    client: Option<CriClient>,
    sandboxes: Vec<String>,
}

/// The per-instance directory for `tag`: `/tmp/tern-crio-<tag>-<pid>`.
pub fn instance_dir(tag: &str) -> PathBuf {
    PathBuf::from(format!("/tmp/tern-crio-{tag}-{}", std::process::id()))
}

impl Crio {
    /// Prepares the directory, writes the conflist `conflist(dir)` returns (its `name` becomes
    /// `cni_default_network`), imports the pause image into the private storage, starts CRI-O
    /// and waits until its CRI answers and reports `NetworkReady`.
    ///
    /// # Errors
    /// Any step's [`CriError`]; everything made so far is torn down before returning.
    pub fn start(opts: &Options, conflist: impl FnOnce(&Path) -> Value) -> Result<Crio, CriError> {
        let dir = instance_dir(&opts.tag);
        let _ = std::fs::remove_dir_all(&dir);
        let mut c = Crio {
            dir,
            cgroup_parent: format!("/tern-crio-{}-{}", opts.tag, std::process::id()),
            subnets: opts.subnets.clone(),
            child: None,
            client: None,
            sandboxes: Vec::new(),
        };
        // On error `c` drops here and tears down what exists.
        c.prepare(opts, conflist)?;
        c.import_pause_image()?;
        c.spawn()?;
        Ok(c)
    }

    /// The instance directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// CRI-O's CRI socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("crio.sock")
    }

    /// Where `pinns` pins the pod network namespaces (`<namespaces_dir>/netns`).
    pub fn netns_dir(&self) -> PathBuf {
        self.dir.join("ns/netns")
    }

    /// The tracer's log: one JSON object per plugin call (see [`Options::trace`]).
    pub fn trace_log(&self) -> PathBuf {
        crate::trace::log_path(&self.dir)
    }

    /// The cgroupfs parent of every sandbox this instance runs.
    pub fn cgroup_parent(&self) -> &str {
        &self.cgroup_parent
    }

    /// CRI-O's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The CRI client (connected during start).
    ///
    /// # Errors
    /// [`CriError::Shape`] when CRI-O is not running.
    pub fn cri(&mut self) -> Result<&mut CriClient, CriError> {
        self.client.as_mut().ok_or(CriError::Shape {
            what: "instance",
            detail: "CRI-O is not running".into(),
        })
    }

    /// `RunPodSandbox` for `pod` as kubelet sends it (network and IPC per pod, PID per
    /// container), recording the ID for teardown; returns the sandbox ID.
    ///
    /// # Errors
    /// The CRI call's [`CriError`].
    pub fn run_sandbox(&mut self, pod: &PodRef) -> Result<String, CriError> {
        let mut config = pod.sandbox_config(&self.cgroup_parent);
        if let Some(linux) = config.linux.as_mut() {
            linux.security_context = Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: NamespaceMode::Pod as i32,
                    pid: NamespaceMode::Container as i32,
                    ipc: NamespaceMode::Pod as i32,
                    target_id: String::new(),
                }),
                ..LinuxSandboxSecurityContext::default()
            });
        }
        let id = self.cri()?.run_pod_sandbox(config, "")?;
        self.sandboxes.push(id.clone());
        Ok(id)
    }

    /// Every sandbox ID [`Crio::run_sandbox`] returned.
    pub fn sandbox_ids(&self) -> &[String] {
        &self.sandboxes
    }

    /// The network namespace path CRI-O gave sandbox `id`, from the verbose status's runtime
    /// spec (`linux.namespaces[type=network].path`, as containerd's).
    ///
    /// # Errors
    /// The CRI call's [`CriError`], or [`CriError::Shape`] when the info lacks the path.
    pub fn netns_path(&mut self, id: &str) -> Result<PathBuf, CriError> {
        let st = self.cri()?.pod_sandbox_status(id, true)?;
        crate::containerd::netns_from_info(&st.info)
    }

    /// SIGKILLs CRI-O (no shutdown, no CNI DEL) and forgets the client; [`Crio::restart`]
    /// starts it again on the same directory.
    pub fn kill(&mut self) {
        self.client = None;
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts CRI-O again on the same configuration and storage (it restores its sandboxes).
    ///
    /// # Errors
    /// As [`Crio::start`]'s last step.
    pub fn restart(&mut self) -> Result<(), CriError> {
        self.kill();
        self.spawn()
    }

    fn prepare(
        &mut self,
        opts: &Options,
        conflist: impl FnOnce(&Path) -> Value,
    ) -> Result<(), CriError> {
        let d = self.dir.clone();
        for sub in [
            "bin",
            "net.d",
            "conf.d",
            "storage",
            "run",
            "ns",
            "runc",
            "exits",
            "attach",
            "pods",
            "hooks.d",
            "cdi",
            "tmp",
            "ipam",
            "tern-state",
            "tuning",
            "image",
        ] {
            mkdir(&d.join(sub))?;
        }
        let bin = d.join("bin");
        link_cni_bin(&bin)?;
        crate::trace::wrap(&bin, &opts.trace, &self.trace_log())?;
        crio_conf::write_config(&d, &conflist(&d), &go_bin_dir("cri-o").join("pinns"))
    }

    /// Builds the pause image archive and loads it into the private storage with podman (the
    /// same containers/storage format), named [`PAUSE_IMAGE`]: there is no registry to pull
    /// from, and CRI-O creates every sandbox's storage from the pause image.
    fn import_pause_image(&mut self) -> Result<(), CriError> {
        let archive = build_pause_archive(&self.dir.join("image"))?;
        let archive_ref = format!("oci-archive:{}", archive.display());
        run(podman(&self.dir).args(["pull", "-q", &archive_ref]))?;
        let id = run(podman(&self.dir).args(["images", "-q", "--no-trunc"]))?;
        let id = id.lines().next().unwrap_or_default().trim().to_owned();
        run(podman(&self.dir).args(["tag", &id, PAUSE_IMAGE]))?;
        Ok(())
    }

    fn spawn(&mut self) -> Result<(), CriError> {
        let log_path = self.dir.join("crio.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(CriError::io("open", &log_path))?;
        let log2 = log.try_clone().map_err(CriError::io("dup", &log_path))?;
        let crio = go_bin_dir("cri-o").join("crio");
        let child = Command::new(&crio)
            .arg("--config")
            .arg(self.dir.join("crio.conf"))
            .arg("--config-dir")
            .arg(self.dir.join("conf.d"))
            .args(["--log-level", "info"])
            .env(
                "CONTAINERS_REGISTRIES_CONF",
                self.dir.join("registries.conf"),
            )
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|source| CriError::Spawn {
                program: format!("{} (bash scripts/build-go cri-o)", crio.display()),
                source,
            })?;
        self.child = Some(child);
        let start = Instant::now();
        let sock = self.socket();
        let mut not_ready = String::from("no answer");
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(CriError::Exited {
                        status,
                        log: tail(&log_path, 40),
                        log_path,
                    });
                }
            }
            if self.client.is_none() && sock.exists() {
                if let Ok(mut c) = CriClient::connect(&sock) {
                    c.set_timeout(Duration::from_secs(5));
                    if c.version().is_ok() {
                        self.client = Some(c);
                    }
                }
            }
            if let Some(c) = self.client.as_mut() {
                if let Ok(conds) = c.status() {
                    match conds.iter().find(|k| k.r#type == "NetworkReady") {
                        Some(k) if k.status => {
                            c.set_timeout(crate::client::CALL_TIMEOUT);
                            return Ok(());
                        }
                        Some(k) => not_ready = format!("{}: {}", k.reason, k.message),
                        None => not_ready = "no NetworkReady condition".into(),
                    }
                }
            }
            if start.elapsed() > START_TIMEOUT {
                return Err(CriError::Timeout {
                    what: format!(
                        "CRI-O's CRI with NetworkReady on {} (last: {not_ready}; log {}: {})",
                        sock.display(),
                        log_path.display(),
                        tail(&log_path, 20)
                    ),
                    secs: START_TIMEOUT.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Tears everything down (see the module doc); returns what could not be removed or had to
    /// be repaired (empty when all was clean). Idempotent; [`Drop`] calls it.
    pub fn teardown(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        // 1. Sandboxes through the CRI: StopPodSandbox runs the CNI DEL.
        if let Some(mut c) = self.client.take() {
            c.set_timeout(Duration::from_secs(30));
            let mut ids: Vec<String> = c
                .list_pod_sandbox()
                .map(|l| l.into_iter().map(|s| s.id).collect())
                .unwrap_or_default();
            for id in &self.sandboxes {
                if !ids.contains(id) {
                    ids.push(id.clone());
                }
            }
            for id in &ids {
                if let Err(e) = c.stop_pod_sandbox(id) {
                    if !is_not_found(&e) {
                        problems.push(format!("StopPodSandbox {id}: {e}"));
                    }
                }
                if let Err(e) = c.remove_pod_sandbox(id) {
                    if !is_not_found(&e) {
                        problems.push(format!("RemovePodSandbox {id}: {e}"));
                    }
                }
                if !self.sandboxes.contains(id) {
                    self.sandboxes.push(id.clone());
                }
            }
        }
        // 2. CRI-O by its PID.
        if let Some(mut child) = self.child.take() {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
            let start = Instant::now();
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if start.elapsed() < STOP_TIMEOUT => {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    _ => {
                        problems.push("CRI-O ignored SIGTERM: killed".into());
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
        // 3. Processes left behind (conmon, runc, a sandbox's), by PID.
        for pid in pids_naming(&self.dir)
            .into_iter()
            .chain(cgroup_pids(&self.cgroup_parent))
        {
            problems.push(format!("process {pid} left running: killed"));
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        // 4. Routes, veths, mounts, the directory, cgroups, cache entries.
        remove_host_leftovers(
            &Footprint {
                dir: &self.dir,
                cgroup_parent: &self.cgroup_parent,
                subnets: &self.subnets,
                sandboxes: &self.sandboxes,
            },
            &mut problems,
        );
        problems
    }
}

impl Drop for Crio {
    fn drop(&mut self) {
        let problems = self.teardown();
        if !problems.is_empty() {
            eprintln!("tern-cri teardown of {}:", self.dir.display());
            for p in problems {
                eprintln!("  {p}");
            }
        }
    }
}

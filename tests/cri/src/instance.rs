//! The [`Instance`] under both private runtimes (directory, process, CRI client, sandboxes):
//! starting the runtime and waiting for its CRI, and the drop guard's common steps.
//!
//! Invariant: every process signalled is one this instance started or found by its own
//! directory or cgroup; every sandbox it ran is recorded before the call returns, so teardown
//! finds it even when a check fails right after.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tern_testkit::exec::{bin_dir, ref_plugin_dir};

use crate::cleanup::{remove_host_leftovers, Footprint};
use crate::client::CriClient;
use crate::proto::PodSandboxConfig;
use crate::CriError;

/// How long a runtime may take to exit after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// The tern binaries linked into the CNI bin dir when built.
const TERN_PLUGINS: [&str; 4] = ["tern", "tern-tuning", "tern-ipam", "tern-lookup"];

/// What every private runtime keeps: its directory, cgroup parent, pod ranges, process, CRI
/// client and the sandboxes it ran.
pub struct Instance {
    /// The runtime's name in messages (`containerd`, `CRI-O`).
    pub(crate) name: &'static str,
    pub(crate) dir: PathBuf,
    pub(crate) cgroup_parent: String,
    pub(crate) subnets: Vec<String>,
    pub(crate) child: Option<Child>,
    pub(crate) client: Option<CriClient>,
    pub(crate) sandboxes: Vec<String>,
}

impl Instance {
    /// An instance not started yet: `dir` (removed first if a previous run left it) and cgroup
    /// parent `/<prefix>-<tag>-<pid>`.
    pub(crate) fn new(
        name: &'static str,
        dir: PathBuf,
        prefix: &str,
        tag: &str,
        subnets: &[String],
    ) -> Instance {
        let _ = std::fs::remove_dir_all(&dir);
        Instance {
            name,
            dir,
            cgroup_parent: format!("/{prefix}-{tag}-{}", std::process::id()),
            subnets: subnets.to_vec(),
            child: None,
            client: None,
            sandboxes: Vec::new(),
        }
    }

    pub(crate) fn cri(&mut self) -> Result<&mut CriClient, CriError> {
        let name = self.name;
        self.client.as_mut().ok_or_else(|| CriError::Shape {
            what: "instance",
            detail: format!("{name} is not running"),
        })
    }

    /// `RunPodSandbox` of `config` on `handler` (`""`: the default), the ID recorded.
    pub(crate) fn run_sandbox(
        &mut self,
        config: PodSandboxConfig,
        handler: &str,
    ) -> Result<String, CriError> {
        let id = self.cri()?.run_pod_sandbox(config, handler)?;
        self.sandboxes.push(id.clone());
        Ok(id)
    }

    /// Starts `cmd` with stdout and stderr appended to `log`, then waits up to `timeout`
    /// until its CRI on `sock` answers `Version` and `ready` (asked on each poll) says yes; the
    /// client is kept with [`crate::client::CALL_TIMEOUT`]. `hint` says how to get the program.
    ///
    /// # Errors
    /// [`CriError::Spawn`], [`CriError::Exited`] with the log's tail, or [`CriError::Timeout`]
    /// with what `ready` last said.
    pub(crate) fn spawn(
        &mut self,
        cmd: &mut Command,
        log_path: PathBuf,
        hint: &str,
        sock: &Path,
        timeout: Duration,
        mut ready: impl FnMut(&mut CriClient) -> Result<(), String>,
    ) -> Result<(), CriError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(CriError::io("open", &log_path))?;
        let log2 = log.try_clone().map_err(CriError::io("dup", &log_path))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|source| CriError::Spawn {
                program: format!("{} ({hint})", cmd.get_program().to_string_lossy()),
                source,
            })?;
        self.child = Some(child);
        let start = Instant::now();
        let mut last = String::from("no answer");
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(CriError::Exited {
                        program: self.name,
                        status,
                        log: tail(&log_path, 40),
                        log_path,
                    });
                }
            }
            if self.client.is_none() && sock.exists() {
                if let Ok(mut c) = CriClient::connect(sock) {
                    c.set_timeout(Duration::from_secs(5));
                    if c.version().is_ok() {
                        self.client = Some(c);
                    }
                }
            }
            if let Some(c) = self.client.as_mut() {
                match ready(c) {
                    Ok(()) => {
                        c.set_timeout(crate::client::CALL_TIMEOUT);
                        return Ok(());
                    }
                    Err(why) => last = why,
                }
            }
            if start.elapsed() > timeout {
                return Err(CriError::Timeout {
                    what: format!(
                        "{}'s CRI on {} (last: {last}; log {}: {})",
                        self.name,
                        sock.display(),
                        log_path.display(),
                        tail(&log_path, 20)
                    ),
                    secs: timeout.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILLs the runtime (no shutdown, no CNI DEL) and forgets the client.
    pub(crate) fn kill(&mut self) {
        self.client = None;
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Teardown, first steps: every sandbox the runtime lists or we ran is stopped (the CNI
    /// DEL) and removed through the CRI; then the runtime is stopped by its PID (SIGTERM, then
    /// SIGKILL after [`STOP_TIMEOUT`]).
    pub(crate) fn stop(&mut self, problems: &mut Vec<String>) {
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
                        problems.push(format!("{} ignored SIGTERM: killed", self.name));
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
    }

    /// Teardown, last step: routes, veths, mounts, the directory, cgroups, cache entries
    /// (see [`remove_host_leftovers`]).
    pub(crate) fn remove_leftovers(&self, problems: &mut Vec<String>) {
        remove_host_leftovers(
            &Footprint {
                dir: &self.dir,
                cgroup_parent: &self.cgroup_parent,
                subnets: &self.subnets,
                sandboxes: &self.sandboxes,
            },
            problems,
        );
    }
}

/// SIGKILLs each PID, reporting it as `<what> <pid> left running: killed`.
pub(crate) fn kill_left(pids: Vec<i32>, what: &str, problems: &mut Vec<String>) {
    for pid in pids {
        problems.push(format!("{what} {pid} left running: killed"));
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// Prints what a drop guard's teardown of `dir` had to repair (a drop cannot return it).
pub(crate) fn report(dir: &Path, problems: &[String]) {
    if !problems.is_empty() {
        eprintln!("tern-cri teardown of {}:", dir.display());
        for p in problems {
            eprintln!("  {p}");
        }
    }
}

pub(crate) fn mkdir(p: &Path) -> Result<(), CriError> {
    std::fs::create_dir_all(p).map_err(CriError::io("create dir", p))
}

/// Makes `subs` under `d`.
pub(crate) fn mkdirs(d: &Path, subs: &[&str]) -> Result<(), CriError> {
    subs.iter().try_for_each(|s| mkdir(&d.join(s)))
}

/// Fills the CNI bin dir `bin` with symlinks: tern's binaries (those built), then every
/// reference plugin (loopback, host-local, ptp, tuning...) whose name is still free.
///
/// # Errors
/// [`CriError::Io`] when the reference plugin dir cannot be read or a link cannot be made.
pub(crate) fn link_cni_bin(bin: &Path) -> Result<(), CriError> {
    for name in TERN_PLUGINS {
        let src = bin_dir().join(name);
        if src.is_file() {
            let dst = bin.join(name);
            std::os::unix::fs::symlink(&src, &dst).map_err(CriError::io("symlink", &dst))?;
        }
    }
    let refs = ref_plugin_dir();
    let rd = std::fs::read_dir(&refs).map_err(CriError::io("read dir", &refs))?;
    for e in rd.flatten() {
        let dst = bin.join(e.file_name());
        if !dst.exists() {
            std::os::unix::fs::symlink(e.path(), &dst).map_err(CriError::io("symlink", &dst))?;
        }
    }
    Ok(())
}

/// Whether a CRI error says the sandbox does not exist (already removed).
pub(crate) fn is_not_found(e: &CriError) -> bool {
    matches!(e, CriError::Rpc { status, .. } if status.code() == tonic::Code::NotFound)
}

/// The last `n` lines of a file.
pub(crate) fn tail(path: &Path, n: usize) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

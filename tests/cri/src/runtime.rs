//! The [`Runtime`] trait the private containerd and CRI-O are driven through, the [`Options`]
//! both start with, and reading a sandbox's netns from either's status.

use std::path::{Path, PathBuf};
use std::process::Child;

use serde_json::Value;

use crate::client::{CriClient, PodRef};
use crate::instance::Instance;
use crate::CriError;

/// What a private runtime (containerd or CRI-O) is started with.
#[derive(Clone, Debug)]
pub struct Options {
    /// A short tag for the directory and cgroup names (letters, digits, `-`).
    pub tag: String,
    /// Pod ranges the conflists use (`10.99.202.0/24`): teardown removes host routes into them.
    pub subnets: Vec<String>,
    /// Plugins (by type, e.g. `tern`) wrapped by the tracer ([`crate::trace`]), which appends each
    /// call's CNI environment and stdin to `<dir>/cni-trace.jsonl` before running the plugin.
    pub trace: Vec<String>,
}

/// A private CRI runtime (containerd or CRI-O) running in its own directory; dropping it tears
/// everything down.
pub trait Runtime {
    /// The state both runtimes keep.
    fn instance(&self) -> &Instance;
    /// The same, mutable.
    fn instance_mut(&mut self) -> &mut Instance;
    /// The runtime's CRI socket.
    fn socket(&self) -> PathBuf;
    /// The directory the runtime must put pod netns files under.
    fn netns_root(&self) -> PathBuf;
    /// `RunPodSandbox` for `pod` on runtime handler `handler` (`""`: the default), as kubelet
    /// sends it to this runtime, recording the ID for teardown; returns the sandbox ID.
    ///
    /// # Errors
    /// The CRI call's [`CriError`].
    fn run_sandbox_on(&mut self, pod: &PodRef, handler: &str) -> Result<String, CriError>;
    /// Tears everything down (see the runtime's module doc); returns what could not be removed
    /// or had to be repaired (empty when all was clean). Idempotent; [`Drop`] calls it.
    fn teardown(&mut self) -> Vec<String>;

    /// [`Runtime::run_sandbox_on`] the default handler.
    ///
    /// # Errors
    /// The CRI call's [`CriError`].
    fn run_sandbox(&mut self, pod: &PodRef) -> Result<String, CriError> {
        self.run_sandbox_on(pod, "")
    }

    /// The instance directory.
    fn dir(&self) -> &Path {
        &self.instance().dir
    }

    /// The cgroupfs parent of every sandbox this instance runs.
    fn cgroup_parent(&self) -> &str {
        &self.instance().cgroup_parent
    }

    /// The runtime's PID while it runs.
    fn pid(&self) -> Option<u32> {
        self.instance().child.as_ref().map(Child::id)
    }

    /// Every sandbox ID the instance ran.
    fn sandbox_ids(&self) -> &[String] {
        &self.instance().sandboxes
    }

    /// The CRI client (connected during start).
    ///
    /// # Errors
    /// [`CriError::Shape`] when the runtime is not running.
    fn cri(&mut self) -> Result<&mut CriClient, CriError> {
        self.instance_mut().cri()
    }

    /// The network namespace path the runtime gave sandbox `id`, from the verbose status's
    /// runtime spec (`linux.namespaces[type=network].path`).
    ///
    /// # Errors
    /// The CRI call's [`CriError`], or [`CriError::Shape`] when the info lacks the path.
    fn netns_path(&mut self, id: &str) -> Result<PathBuf, CriError> {
        let st = self.cri()?.pod_sandbox_status(id, true)?;
        netns_from_info(&st.info)
    }
}

/// The network namespace path in a verbose `PodSandboxStatus` info map (containerd and CRI-O
/// both put the sandbox's OCI runtime spec under `info`: `runtimeSpec.linux.namespaces`).
///
/// # Errors
/// [`CriError::Shape`] without an `info` key or a network namespace path, [`CriError::Json`]
/// when `info` is not JSON.
pub(crate) fn netns_from_info(
    info: &std::collections::HashMap<String, String>,
) -> Result<PathBuf, CriError> {
    let info = info.get("info").ok_or(CriError::Shape {
        what: "PodSandboxStatus info",
        detail: "no \"info\" key (verbose)".into(),
    })?;
    let v: Value = serde_json::from_str(info)?;
    v["runtimeSpec"]["linux"]["namespaces"]
        .as_array()
        .and_then(|a| a.iter().find(|n| n["type"] == "network"))
        .and_then(|n| n["path"].as_str())
        .map(PathBuf::from)
        .ok_or(CriError::Shape {
            what: "PodSandboxStatus info",
            detail: format!("no network namespace path in {v}"),
        })
}

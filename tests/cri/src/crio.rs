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
//! - The drop guard ([`Runtime::teardown`]) works from any state, also after a panic or a SIGKILL:
//!   StopPodSandbox + RemovePodSandbox for every sandbox (the CNI DEL), CRI-O stopped by its PID,
//!   any process naming our directory (conmon, runc) or in our cgroups killed by PID, then the
//!   host leftovers removed (`cleanup`: routes, veths, mounts, directory, cgroups, cache).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::client::PodRef;
pub use crate::crio_conf::go_bin_dir;
use crate::crio_conf::{self, podman};
use crate::host::{cgroup_pids, pids_naming};
use crate::image::{build_pause_archive, run, PAUSE_IMAGE};
use crate::instance::{kill_left, link_cni_bin, mkdirs, report, Instance};
use crate::proto::{LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption};
pub use crate::runtime::Options;
use crate::runtime::Runtime;
use crate::CriError;

/// How long CRI-O may take to serve the CRI with its network ready after start.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running private CRI-O; dropping it tears everything down.
pub struct Crio {
    inst: Instance,
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
        let mut c = Crio {
            inst: Instance::new("CRI-O", dir, "tern-crio", &opts.tag, &opts.subnets),
        };
        // On error `c` drops here and tears down what exists.
        c.prepare(opts, conflist)?;
        c.import_pause_image()?;
        c.spawn()?;
        Ok(c)
    }

    /// Where `pinns` pins the pod network namespaces (`<namespaces_dir>/netns`).
    pub fn netns_dir(&self) -> PathBuf {
        self.inst.dir.join("ns/netns")
    }

    /// The tracer's log: one JSON object per plugin call (see [`Options::trace`]).
    pub fn trace_log(&self) -> PathBuf {
        crate::trace::log_path(&self.inst.dir)
    }

    /// SIGKILLs CRI-O (no shutdown, no CNI DEL) and forgets the client; [`Crio::restart`]
    /// starts it again on the same directory.
    pub fn kill(&mut self) {
        self.inst.kill();
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
        let d = self.inst.dir.clone();
        let subs = [
            "bin", "net.d", "conf.d", "storage", "run", "ns", "runc", "exits", "attach", "pods",
            "hooks.d", "cdi", "tmp", "image",
        ];
        mkdirs(&d, &subs)?;
        mkdirs(&d, &crate::chains::DATA_DIRS)?;
        let bin = d.join("bin");
        link_cni_bin(&bin)?;
        crate::trace::wrap(&bin, &opts.trace, &self.trace_log())?;
        crio_conf::write_config(&d, &conflist(&d), &go_bin_dir("cri-o").join("pinns"))
    }

    /// Builds the pause image archive and loads it into the private storage with podman (the
    /// same containers/storage format), named [`PAUSE_IMAGE`]: there is no registry to pull
    /// from, and CRI-O creates every sandbox's storage from the pause image.
    fn import_pause_image(&mut self) -> Result<(), CriError> {
        let d = &self.inst.dir;
        let archive = build_pause_archive(&d.join("image"))?;
        let archive_ref = format!("oci-archive:{}", archive.display());
        run(podman(d).args(["pull", "-q", &archive_ref]))?;
        let id = run(podman(d).args(["images", "-q", "--no-trunc"]))?;
        let id = id.lines().next().unwrap_or_default().trim().to_owned();
        run(podman(d).args(["tag", &id, PAUSE_IMAGE]))?;
        Ok(())
    }

    /// Starts CRI-O and waits for its CRI with `NetworkReady`.
    fn spawn(&mut self) -> Result<(), CriError> {
        let d = self.inst.dir.clone();
        let sock = self.socket();
        self.inst.spawn(
            Command::new(go_bin_dir("cri-o").join("crio"))
                .arg("--config")
                .arg(d.join("crio.conf"))
                .arg("--config-dir")
                .arg(d.join("conf.d"))
                .args(["--log-level", "info"])
                .env("CONTAINERS_REGISTRIES_CONF", d.join("registries.conf")),
            d.join("crio.log"),
            "bash scripts/build-go cri-o",
            &sock,
            START_TIMEOUT,
            |c| {
                let conds = c.status().map_err(|e| e.to_string())?;
                match conds.iter().find(|k| k.r#type == "NetworkReady") {
                    Some(k) if k.status => Ok(()),
                    Some(k) => Err(format!("{}: {}", k.reason, k.message)),
                    None => Err("no NetworkReady condition".into()),
                }
            },
        )
    }
}

impl Runtime for Crio {
    fn instance(&self) -> &Instance {
        &self.inst
    }

    fn instance_mut(&mut self) -> &mut Instance {
        &mut self.inst
    }

    /// CRI-O's CRI socket.
    fn socket(&self) -> PathBuf {
        self.inst.dir.join("crio.sock")
    }

    /// [`Crio::netns_dir`].
    fn netns_root(&self) -> PathBuf {
        self.netns_dir()
    }

    /// As kubelet sends it: network and IPC per pod, PID per container (so CRI-O's default
    /// `drop_infra_ctr` runs no infra container).
    fn run_sandbox_on(&mut self, pod: &PodRef, handler: &str) -> Result<String, CriError> {
        let mut config = pod.sandbox_config(&self.inst.cgroup_parent);
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
        self.inst.run_sandbox(config, handler)
    }

    fn teardown(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        // 1.-2. Sandboxes through the CRI (StopPodSandbox runs the CNI DEL), then CRI-O.
        self.inst.stop(&mut problems);
        // 3. Processes left behind (conmon, runc, a sandbox's), by PID.
        let mut left = pids_naming(&self.inst.dir);
        left.extend(cgroup_pids(&self.inst.cgroup_parent));
        kill_left(left, "process", &mut problems);
        // 4. Routes, veths, mounts, the directory, cgroups, cache entries.
        self.inst.remove_leftovers(&mut problems);
        problems
    }
}

impl Drop for Crio {
    fn drop(&mut self) {
        let problems = self.teardown();
        report(&self.inst.dir, &problems);
    }
}

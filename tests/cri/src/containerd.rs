//! A private containerd 1.6 whose CRI plugin wires pod sandboxes with CNI chains we give it.
//!
//! Everything lives under one directory, `/tmp/tern-cri-<tag>-<pid>`: `config.toml`, the gRPC and
//! ttrpc sockets, `root/` and `state/` (the pod netns files too: `netns_mounts_under_state_dir`),
//! runc's state root, the CNI `bin/` (tern's binaries and Debian's reference plugins, symlinked)
//! and one conflist directory per network, the plugins' data dirs (`ipam/`, `tern-state/`,
//! `tuning/`), the pause image scratch and containerd's log. Sandbox cgroups go under the cgroupfs
//! parent `/tern-cri-<tag>-<pid>` (every hierarchy).
//!
//! Invariants:
//! - containerd runs in the machine's root netns and mount namespace (its CRI plugin needs both);
//!   the CNI chains therefore change the root netns (routes, host veths, tern's `ip_forward` and
//!   proxy ARP): each user picks a pod range nothing else on the machine uses, and teardown
//!   removes every route into it and every link those routes use.
//! - The drop guard ([`Runtime::teardown`]) works from any state, also after a panic: it
//!   stops and removes every sandbox through the CRI (so the CNI DEL runs), stops containerd by
//!   its PID (SIGTERM, then SIGKILL), kills by PID any shim or sandbox process it left, unmounts
//!   everything under the directory, removes the directory, the cgroups, the shim sockets under
//!   `/run/containerd/s` (and `/run/containerd` when no instance of this process had found it
//!   there), libcni result cache entries of our sandboxes, and host routes and links into our
//!   ranges. Processes are signalled only by PIDs found to belong to this instance.
//! - Two facts of these machines: root lacks CAP_SYS_RESOURCE, so `restrict_oom_score_adj`
//!   is on (otherwise runc fails with a misleading pipe error); cgroups are cgroupfs
//!   (`SystemdCgroup = false`). AppArmor is disabled for sandboxes (no apparmor_parser here).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::client::PodRef;
use crate::containerd_conf::{config_toml, runtime_section, snapshotter};
use crate::host::{cgroup_pids, pids_whose_cmdline};
use crate::image::{build_pause_archive, run, PAUSE_IMAGE};
use crate::instance::{kill_left, link_cni_bin, mkdir, mkdirs, report, Instance};
pub use crate::runtime::Options;
use crate::runtime::Runtime;
use crate::CriError;

/// The containerd namespace the CRI plugin uses.
pub const K8S_NAMESPACE: &str = "k8s.io";
/// How long containerd may take to serve the CRI after start.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The shim socket directory of containerd 1.6 (`runtime/v2/shim.SocketAddress`: not
/// configurable; socket name = sha256 of `<grpc address>/<namespace>/<id>`).
const SHIM_SOCKET_DIR: &str = "/run/containerd/s";

/// Instances alive in this process, and whether `/run/containerd` existed before the first.
static RUN_DIR: Mutex<(usize, bool)> = Mutex::new((0, false));

/// A CNI network for the CRI plugin: the default one, or one per extra runtime handler
/// (containerd 1.6's per-runtime `cni_conf_dir`).
#[derive(Clone, Debug)]
pub struct Network {
    /// `None`: the default network (handler `runc`); `Some(h)`: runtime handler `h`.
    pub handler: Option<String>,
    /// The conflist.
    pub conflist: serde_json::Value,
}

/// A running private containerd; dropping it tears everything down.
pub struct Containerd {
    inst: Instance,
    counted: bool,
}

/// The per-instance directory for `tag`: `/tmp/tern-cri-<tag>-<pid>`.
pub fn instance_dir(tag: &str) -> PathBuf {
    PathBuf::from(format!("/tmp/tern-cri-{tag}-{}", std::process::id()))
}

impl Containerd {
    /// Prepares the directory and CNI bin dir, then calls `networks` with the directory (so the
    /// conflists can name their data dirs under it: see [`crate::chains::ipam_dir`] and
    /// friends), writes them, starts containerd, waits until its CRI answers `Version`, and
    /// imports the pause image.
    ///
    /// # Errors
    /// Any step's [`CriError`]; everything made so far is torn down before returning.
    pub fn start(
        opts: &Options,
        networks: impl FnOnce(&Path) -> Vec<Network>,
    ) -> Result<Containerd, CriError> {
        let dir = instance_dir(&opts.tag);
        {
            let mut g = RUN_DIR.lock().unwrap_or_else(|e| e.into_inner());
            if g.0 == 0 {
                g.1 = Path::new("/run/containerd").exists();
            }
            g.0 += 1;
        }
        let mut c = Containerd {
            inst: Instance::new("containerd", dir, "tern-cri", &opts.tag, &opts.subnets),
            counted: true,
        };
        // On error `c` drops here and tears down what exists.
        c.prepare(networks)?;
        let dir = c.inst.dir.clone();
        crate::trace::wrap(&dir.join("bin"), &opts.trace, &crate::trace::log_path(&dir))?;
        let sock = c.socket();
        c.inst.spawn(
            Command::new("containerd")
                .arg("--config")
                .arg(dir.join("config.toml")),
            dir.join("containerd.log"),
            "apt-get install containerd",
            &sock,
            START_TIMEOUT,
            |_| Ok(()),
        )?;
        c.import_pause_image()?;
        Ok(c)
    }

    fn prepare(&mut self, networks: impl FnOnce(&Path) -> Vec<Network>) -> Result<(), CriError> {
        let d = self.inst.dir.clone();
        let subs = ["bin", "root", "state", "runc", "tmp", "image"];
        mkdirs(&d, &subs)?;
        mkdirs(&d, &crate::chains::DATA_DIRS)?;
        // The CRI plugin always runs `loopback` for `lo`.
        link_cni_bin(&d.join("bin"))?;
        let mut handlers = String::new();
        let mut have_default = false;
        for net in networks(&d) {
            let (conf_dir, name) = match &net.handler {
                None => {
                    have_default = true;
                    (d.join("net.d"), "default".to_owned())
                }
                Some(h) => {
                    handlers.push_str(&runtime_section(&d, h, Some(&d.join(format!("net.d-{h}")))));
                    (d.join(format!("net.d-{h}")), h.clone())
                }
            };
            mkdir(&conf_dir)?;
            let file = conf_dir.join(format!("10-{name}.conflist"));
            std::fs::write(&file, serde_json::to_vec_pretty(&net.conflist)?)
                .map_err(CriError::io("write conflist", &file))?;
        }
        if !have_default {
            mkdir(&d.join("net.d"))?;
        }
        let file = d.join("config.toml");
        std::fs::write(&file, config_toml(&d, &handlers))
            .map_err(CriError::io("write config", &file))
    }

    /// Builds the pause image archive and imports it into the `k8s.io` namespace with `ctr`,
    /// unpacked for the configured snapshotter.
    fn import_pause_image(&mut self) -> Result<(), CriError> {
        let archive = build_pause_archive(&self.inst.dir.join("image"))?;
        let ctr = |args: &[&str]| {
            let mut c = Command::new("ctr");
            c.arg("--address")
                .arg(self.socket())
                .args(["--namespace", K8S_NAMESPACE])
                .args(args);
            c
        };
        run(ctr(&["images", "import", "--snapshotter", &snapshotter()]).arg(&archive))?;
        let list = run(&mut ctr(&["images", "list", "--quiet"]))?;
        if !list.lines().any(|l| l == PAUSE_IMAGE) {
            return Err(CriError::Shape {
                what: "ctr images list",
                detail: format!("{PAUSE_IMAGE} not among {list:?} after import"),
            });
        }
        Ok(())
    }
}

impl Runtime for Containerd {
    fn instance(&self) -> &Instance {
        &self.inst
    }

    fn instance_mut(&mut self) -> &mut Instance {
        &mut self.inst
    }

    /// containerd's gRPC (CRI) socket.
    fn socket(&self) -> PathBuf {
        self.inst.dir.join("containerd.sock")
    }

    /// containerd's state dir (`netns_mounts_under_state_dir`).
    fn netns_root(&self) -> PathBuf {
        self.inst.dir.join("state")
    }

    fn run_sandbox_on(&mut self, pod: &PodRef, handler: &str) -> Result<String, CriError> {
        let config = pod.sandbox_config(&self.inst.cgroup_parent);
        self.inst.run_sandbox(config, handler)
    }

    fn teardown(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        // 1.-2. Sandboxes through the CRI (StopPodSandbox runs the CNI DEL), then containerd.
        self.inst.stop(&mut problems);
        // 3. Shims and sandbox processes left behind, by PID.
        let sock = self.socket().to_string_lossy().into_owned();
        kill_left(shim_pids(&sock), "shim", &mut problems);
        let left = cgroup_pids(&self.inst.cgroup_parent);
        kill_left(left, "sandbox process", &mut problems);
        // 4. Routes, veths, mounts, the directory, cgroups, cache entries; then shim sockets.
        self.inst.remove_leftovers(&mut problems);
        for id in &self.inst.sandboxes {
            let s = Path::new(SHIM_SOCKET_DIR).join(shim_socket_name(&sock, K8S_NAMESPACE, id));
            if s.exists() {
                let _ = std::fs::remove_file(&s);
            }
        }
        // 5. /run/containerd, when it was not there before the first instance of this process.
        if self.counted {
            self.counted = false;
            let mut g = RUN_DIR.lock().unwrap_or_else(|e| e.into_inner());
            g.0 = g.0.saturating_sub(1);
            if g.0 == 0 && !g.1 {
                let _ = std::fs::remove_dir(SHIM_SOCKET_DIR);
                let _ = std::fs::remove_dir("/run/containerd");
            }
        }
        problems
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let problems = self.teardown();
        report(&self.inst.dir, &problems);
    }
}

/// containerd 1.6's shim socket name for `id`: hex sha256 of `<address>/<ns>/<id>`.
pub fn shim_socket_name(address: &str, ns: &str, id: &str) -> String {
    Sha256::digest(format!("{address}/{ns}/{id}").as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// PIDs of containerd shims started for the containerd at `address` (`-address <address>` on
/// their command line).
pub fn shim_pids(address: &str) -> Vec<i32> {
    pids_whose_cmdline(|args| {
        let is_shim = args
            .first()
            .is_some_and(|a| String::from_utf8_lossy(a).contains("containerd-shim"));
        is_shim
            && args
                .windows(2)
                .any(|w| w[0] == b"-address" && w[1] == address.as_bytes())
    })
}

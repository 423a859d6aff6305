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
//! - The drop guard ([`Containerd::teardown`]) works from any state, also after a panic: it
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
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tern_testkit::exec::{bin_dir, ref_plugin_dir};

use crate::cleanup::{remove_host_leftovers, Footprint};
use crate::client::{CriClient, PodRef};
use crate::image::{build_pause_archive, run, PAUSE_IMAGE};
use crate::CriError;

/// The containerd namespace the CRI plugin uses.
pub const K8S_NAMESPACE: &str = "k8s.io";
/// How long containerd may take to serve the CRI after start.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long containerd may take to exit after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// The shim socket directory of containerd 1.6 (`runtime/v2/shim.SocketAddress`: not
/// configurable; socket name = sha256 of `<grpc address>/<namespace>/<id>`).
const SHIM_SOCKET_DIR: &str = "/run/containerd/s";
/// libcni's result cache (go-cni in containerd 1.6 keeps libcni's default cache dir).
pub const LIBCNI_CACHE: &str = "/var/lib/cni/results";
/// The tern binaries linked into the CNI bin dir when built.
const TERN_PLUGINS: [&str; 4] = ["tern", "tern-tuning", "tern-ipam", "tern-lookup"];

/// Instances alive in this process, and whether `/run/containerd` existed before the first.
static RUN_DIR: Mutex<(usize, bool)> = Mutex::new((0, false));

/// A CNI network for the CRI plugin: the default one, or one per extra runtime handler
/// (containerd 1.6's per-runtime `cni_conf_dir`).
#[derive(Clone, Debug)]
pub struct Network {
    /// `None`: the default network (handler `runc`); `Some(h)`: runtime handler `h`.
    pub handler: Option<String>,
    /// The conflist.
    pub conflist: Value,
}

/// What a private containerd is started with.
#[derive(Clone, Debug)]
pub struct Options {
    /// A short tag for the directory and cgroup names (letters, digits, `-`).
    pub tag: String,
    /// Pod ranges the conflists use (`10.99.202.0/24`): teardown removes host routes into them.
    pub subnets: Vec<String>,
    /// Plugins (by type) wrapped by the tracer ([`crate::trace`]); log in the instance dir.
    pub trace: Vec<String>,
}

/// A running private containerd; dropping it tears everything down.
pub struct Containerd {
    dir: PathBuf,
    cgroup_parent: String,
    subnets: Vec<String>,
    child: Option<Child>,
    client: Option<CriClient>,
    sandboxes: Vec<String>,
    counted: bool,
}

/// The per-instance directory for `tag`: `/tmp/tern-cri-<tag>-<pid>`.
pub fn instance_dir(tag: &str) -> PathBuf {
    PathBuf::from(format!("/tmp/tern-cri-{tag}-{}", std::process::id()))
}

pub(crate) fn mkdir(p: &Path) -> Result<(), CriError> {
    std::fs::create_dir_all(p).map_err(CriError::io("create dir", p))
}

impl Containerd {
    /// Prepares the directory and CNI bin dir, then calls `networks` with the directory (so the
    /// conflists can name their data dirs under it: see [`Containerd::ipam_dir`] and friends),
    /// writes them, starts containerd, waits until its CRI answers `Version`, and imports the
    /// pause image.
    ///
    /// # Errors
    /// Any step's [`CriError`]; everything made so far is torn down before returning.
    pub fn start(
        opts: &Options,
        networks: impl FnOnce(&Path) -> Vec<Network>,
    ) -> Result<Containerd, CriError> {
        let dir = instance_dir(&opts.tag);
        let _ = std::fs::remove_dir_all(&dir);
        {
            let mut g = RUN_DIR.lock().unwrap_or_else(|e| e.into_inner());
            if g.0 == 0 {
                g.1 = Path::new("/run/containerd").exists();
            }
            g.0 += 1;
        }
        let mut c = Containerd {
            dir,
            cgroup_parent: format!("/tern-cri-{}-{}", opts.tag, std::process::id()),
            subnets: opts.subnets.clone(),
            child: None,
            client: None,
            sandboxes: Vec::new(),
            counted: true,
        };
        // On error `c` drops here and tears down what exists.
        c.prepare(networks)?;
        crate::trace::wrap(
            &c.dir.join("bin"),
            &opts.trace,
            &crate::trace::log_path(&c.dir),
        )?;
        c.spawn()?;
        c.import_pause_image()?;
        Ok(c)
    }

    /// The instance directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// containerd's gRPC (CRI) socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    /// host-local / tern-ipam `dataDir` for conflists (`<dir>/ipam`).
    pub fn ipam_dir(dir: &Path) -> PathBuf {
        dir.join("ipam")
    }

    /// tern's `stateDir` for conflists (`<dir>/tern-state`).
    pub fn tern_state_dir(dir: &Path) -> PathBuf {
        dir.join("tern-state")
    }

    /// tern-tuning's / tuning's `dataDir` for conflists (`<dir>/tuning`).
    pub fn tuning_dir(dir: &Path) -> PathBuf {
        dir.join("tuning")
    }

    /// The cgroupfs parent of every sandbox this instance runs.
    pub fn cgroup_parent(&self) -> &str {
        &self.cgroup_parent
    }

    /// containerd's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The CRI client (connected during start).
    ///
    /// # Errors
    /// [`CriError::Shape`] when containerd was never started.
    pub fn cri(&mut self) -> Result<&mut CriClient, CriError> {
        self.client.as_mut().ok_or(CriError::Shape {
            what: "instance",
            detail: "containerd is not running".into(),
        })
    }

    /// `RunPodSandbox` for `pod` (on runtime handler `handler`, or the default), recording the ID
    /// for teardown; returns the sandbox ID.
    ///
    /// # Errors
    /// The CRI call's [`CriError`].
    pub fn run_sandbox(&mut self, pod: &PodRef, handler: Option<&str>) -> Result<String, CriError> {
        let config = pod.sandbox_config(&self.cgroup_parent);
        let id = self
            .cri()?
            .run_pod_sandbox(config, handler.unwrap_or_default())?;
        self.sandboxes.push(id.clone());
        Ok(id)
    }

    /// Every sandbox ID [`Containerd::run_sandbox`] returned.
    pub fn sandbox_ids(&self) -> &[String] {
        &self.sandboxes
    }

    /// The network namespace path containerd gave sandbox `id`, from the verbose status's
    /// runtime spec (`linux.namespaces[type=network].path`).
    ///
    /// # Errors
    /// The CRI call's [`CriError`], or [`CriError::Shape`] when the info lacks the path.
    pub fn netns_path(&mut self, id: &str) -> Result<PathBuf, CriError> {
        let st = self.cri()?.pod_sandbox_status(id, true)?;
        netns_from_info(&st.info)
    }

    fn prepare(&mut self, networks: impl FnOnce(&Path) -> Vec<Network>) -> Result<(), CriError> {
        let d = self.dir.clone();
        for sub in [
            "bin",
            "root",
            "state",
            "runc",
            "tmp",
            "ipam",
            "tern-state",
            "tuning",
            "image",
        ] {
            mkdir(&d.join(sub))?;
        }
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
        let config = config_toml(&d, &handlers);
        let file = d.join("config.toml");
        std::fs::write(&file, config).map_err(CriError::io("write config", &file))
    }

    fn spawn(&mut self) -> Result<(), CriError> {
        let log_path = self.dir.join("containerd.log");
        let log = std::fs::File::create(&log_path).map_err(CriError::io("create", &log_path))?;
        let log2 = log.try_clone().map_err(CriError::io("dup", &log_path))?;
        let child = Command::new("containerd")
            .arg("--config")
            .arg(self.dir.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|source| CriError::Spawn {
                program: "containerd (apt-get install containerd)".into(),
                source,
            })?;
        self.child = Some(child);
        let start = Instant::now();
        let sock = self.socket();
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
            if sock.exists() {
                if let Ok(mut c) = CriClient::connect(&sock) {
                    c.set_timeout(Duration::from_secs(5));
                    if c.version().is_ok() {
                        c.set_timeout(crate::client::CALL_TIMEOUT);
                        self.client = Some(c);
                        return Ok(());
                    }
                }
            }
            if start.elapsed() > START_TIMEOUT {
                return Err(CriError::Timeout {
                    what: format!(
                        "containerd's CRI on {} (log {}: {})",
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

    /// Builds the pause image archive and imports it into the `k8s.io` namespace with `ctr`,
    /// unpacked for the configured snapshotter.
    fn import_pause_image(&mut self) -> Result<(), CriError> {
        let archive = build_pause_archive(&self.dir.join("image"))?;
        run(Command::new("ctr")
            .arg("--address")
            .arg(self.socket())
            .args([
                "--namespace",
                K8S_NAMESPACE,
                "images",
                "import",
                "--snapshotter",
            ])
            .arg(snapshotter())
            .arg(&archive))?;
        let list = run(Command::new("ctr")
            .arg("--address")
            .arg(self.socket())
            .args(["--namespace", K8S_NAMESPACE, "images", "list", "--quiet"]))?;
        if !list.lines().any(|l| l == PAUSE_IMAGE) {
            return Err(CriError::Shape {
                what: "ctr images list",
                detail: format!("{PAUSE_IMAGE} not among {list:?} after import"),
            });
        }
        Ok(())
    }

    /// Tears everything down (see the module doc); returns what could not be removed (empty
    /// when all is clean). Idempotent; [`Drop`] calls it.
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
        // 2. containerd by its PID.
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
                        problems.push("containerd ignored SIGTERM: killed".into());
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
        // 3. Shims and sandbox processes left behind, by PID.
        let sock = self.socket().to_string_lossy().into_owned();
        for pid in shim_pids(&sock) {
            problems.push(format!("shim {pid} left running: killed"));
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        for pid in cgroup_pids(&self.cgroup_parent) {
            problems.push(format!("sandbox process {pid} left running: killed"));
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        // 4. Routes, veths, mounts, the directory, cgroups, cache entries; then shim sockets.
        remove_host_leftovers(
            &Footprint {
                dir: &self.dir,
                cgroup_parent: &self.cgroup_parent,
                subnets: &self.subnets,
                sandboxes: &self.sandboxes,
            },
            &mut problems,
        );
        for id in &self.sandboxes {
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
        if !problems.is_empty() {
            eprintln!("tern-cri teardown of {}:", self.dir.display());
            for p in problems {
                eprintln!("  {p}");
            }
        }
    }
}

/// The snapshotter: `$TERN_CRI_SNAPSHOTTER`, else `overlayfs` (`native` works too).
pub fn snapshotter() -> String {
    std::env::var("TERN_CRI_SNAPSHOTTER").unwrap_or_else(|_| "overlayfs".into())
}

/// The runc runtime section for handler `name`, with its own CNI conf dir when given.
fn runtime_section(d: &Path, name: &str, cni_conf_dir: Option<&Path>) -> String {
    let d = d.display();
    let conf = cni_conf_dir
        .map(|c| {
            format!(
                "          cni_conf_dir = \"{}\"\n          cni_max_conf_num = 1\n",
                c.display()
            )
        })
        .unwrap_or_default();
    format!(
        r#"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{name}]
          runtime_type = "io.containerd.runc.v2"
{conf}          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{name}.options]
            BinaryName = "runc"
            Root = "{d}/runc"
            SystemdCgroup = false
"#
    )
}

/// containerd's config.toml (version 2) for directory `d`, with extra runtime sections.
fn config_toml(d: &Path, extra_runtimes: &str) -> String {
    let runc = runtime_section(d, "runc", None);
    let snap = snapshotter();
    let d = d.display();
    format!(
        r#"# Written by tern's containerd tier (tests/cri): a private instance, nothing shared.
version = 2
root = "{d}/root"
state = "{d}/state"
temp = "{d}/tmp"
plugin_dir = ""
oom_score = 0
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "{d}/containerd.sock"

[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{PAUSE_IMAGE}"
    restrict_oom_score_adj = true
    disable_apparmor = true
    enable_selinux = false
    netns_mounts_under_state_dir = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    disable_tcp_service = true

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "{d}/bin"
      conf_dir = "{d}/net.d"
      max_conf_num = 1

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "{snap}"
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
{runc}{extra_runtimes}"#
    )
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

/// containerd 1.6's shim socket name for `id`: hex sha256 of `<address>/<ns>/<id>`.
pub fn shim_socket_name(address: &str, ns: &str, id: &str) -> String {
    Sha256::digest(format!("{address}/{ns}/{id}").as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub use tern_testkit::tern_host_veth;

/// PIDs of containerd shims started for the containerd at `address` (`-address <address>` on
/// their command line).
pub fn shim_pids(address: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_shim = args
            .first()
            .map(|a| String::from_utf8_lossy(a).contains("containerd-shim"))
            .unwrap_or(false);
        let ours = args
            .windows(2)
            .any(|w| w[0] == b"-address" && w[1] == address.as_bytes());
        if is_shim && ours {
            out.push(pid);
        }
    }
    out
}

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

/// rmdir of a cgroup and its children, leaves first (a cgroup dir is removed with rmdir, its
/// control files go with it). A cgroup whose last task just died may be busy for a moment:
/// retried for up to 2 s.
pub(crate) fn remove_cgroup_tree(dir: &Path, problems: &mut Vec<String>) {
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

/// Routes in the root netns into `subnet` (any prefix inside it): `(dev, dst)` pairs; none when
/// `ip` fails (this also serves the drop guard, which must not panic).
pub fn host_routes_into(subnet: &str) -> Vec<(String, String)> {
    tern_testkit::netns::routes_into(subnet).unwrap_or_default()
}

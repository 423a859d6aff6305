//! nerdctl on a private containerd 2, everything under one directory `/tmp/tern-nerdctl-<pid>`:
//! containerd's config, root, state and sockets, nerdctl's data root, the CNI plugin dir (tern's
//! binaries and Debian's reference plugins, symlinked) and conflist dir, host-local's `dataDir`
//! and tern's `stateDir`. Container cgroups go under the cgroupfs parent `/tern-nerdctl-<pid>`.
//!
//! Invariants:
//! - containerd and the containers' networks live in the machine's root netns (nerdctl's OCI hook
//!   runs CNI there), so the pod range, [`SUBNET`], is one nothing else on the machine uses.
//! - The drop guard works from any state, also after a panic: `nerdctl rm -f` of every container
//!   (its OCI hook runs the CNI DEL), containerd stopped by its PID (SIGTERM, then SIGKILL), shims
//!   of this containerd killed by PID, host routes into the range and the tern links they use
//!   removed, every mount under the directory unmounted, the directory and the cgroups removed.
//! - Nothing of the machine's own containerd is used: the socket, root and state are ours; only the
//!   shim sockets land in `/run/containerd/s` (containerd 2 does not let us choose), and a shim
//!   removes its own when its container is deleted.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::Ipv4Addr;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tern_testkit::exec::{bin_dir, ref_plugin_dir};

/// The pod range of this test: 10.99.208.0/24.
pub const SUBNET: &str = "10.99.208.0/24";

pub const SUBNET_PREFIX: &str = "10.99.208.";

/// The network's name: the example conflist's own, as the README's `nerdctl run --net tern` uses.
pub const NETWORK: &str = "tern";

pub const IMAGE: &str = "localhost/tern-busybox:nerdctl";

/// The containerd namespace nerdctl works in.
pub const NAMESPACE: &str = "tern-e2e";

/// Deadline for any one nerdctl command (`timeout(1)` kills it).
pub const NERDCTL_TIMEOUT_SECS: u32 = 120;

/// How long containerd may take to answer on its socket after start.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A Go program scripts/build-go built: `$var`, else `$TERN_GO_CACHE/bin/<rel>`.
pub fn go_bin(var: &str, rel: &str) -> PathBuf {
    let p = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        let cache =
            std::env::var("TERN_GO_CACHE").unwrap_or_else(|_| "/var/cache/tern-build".into());
        Path::new(&cache).join("bin").join(rel)
    });
    assert!(
        p.exists(),
        "{} missing: run `bash scripts/build-go` (or set {var})",
        p.display()
    );
    p
}

/// A command's output as text, and a command run whatever its status (tern_testkit::exec).
pub use tern_testkit::exec::{output_text as text, run_output as run};

/// A private containerd 2 and the nerdctl flags that point at it.
pub struct Nerdctl {
    pub dir: PathBuf,
    pub nerdctl: PathBuf,
    containerd: Option<Child>,
}

impl Nerdctl {
    /// Lays out the directory, links the CNI plugins, writes the conflist (`conflist`, with this
    /// test's range and data dirs), starts containerd and waits for its socket to answer.
    pub fn start(conflist: &Path) -> Nerdctl {
        let dir = PathBuf::from(format!("/tmp/tern-nerdctl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in [
            "bin",
            "net.d",
            "containerd/root",
            "containerd/state",
            "nerdctl",
            "ipam",
            "state",
            "image",
        ] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let nerdctl = go_bin("TERN_NERDCTL", "nerdctl/nerdctl");
        let containerd_dir = go_bin("TERN_CONTAINERD_DIR", "containerd");
        let mut n = Nerdctl {
            dir,
            nerdctl,
            containerd: None,
        };
        n.link_plugins();
        n.write_conflist(conflist);
        n.start_containerd(&containerd_dir);
        n
    }

    /// CNI plugin dir: tern's binaries, then every reference plugin (host-local, loopback...).
    fn link_plugins(&self) {
        for b in ["tern", "tern-tuning", "tern-ipam", "tern-lookup"] {
            let src = bin_dir().join(b);
            assert!(
                src.is_file(),
                "{} is not built: cargo build --release --workspace (or scripts/setup)",
                src.display()
            );
            symlink(&src, self.dir.join("bin").join(b)).unwrap();
        }
        for e in std::fs::read_dir(ref_plugin_dir()).unwrap().flatten() {
            let target = self.dir.join("bin").join(e.file_name());
            if !target.exists() {
                symlink(e.path(), target).unwrap();
            }
        }
    }

    /// The conflist as shipped, with this test's range, host-local `dataDir` and tern `stateDir`
    /// (the only changes: its name stays `tern`, tern-tuning stays in the chain).
    fn write_conflist(&self, src: &Path) {
        let mut conf: Value = serde_json::from_slice(&std::fs::read(src).unwrap()).unwrap();
        assert_eq!(conf["name"], NETWORK, "{}", src.display());
        let plugins = conf["plugins"].as_array_mut().unwrap();
        assert_eq!(plugins[0]["type"], "tern", "{}", src.display());
        plugins[0]["stateDir"] = json!(self.dir.join("state"));
        plugins[0]["ipam"]["ranges"] = json!([[{ "subnet": SUBNET }]]);
        plugins[0]["ipam"]["dataDir"] = json!(self.dir.join("ipam"));
        std::fs::write(
            self.dir.join("net.d/10-tern.conflist"),
            serde_json::to_vec_pretty(&conf).unwrap(),
        )
        .unwrap();
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd/containerd.sock")
    }

    fn start_containerd(&mut self, containerd_dir: &Path) {
        let c = self.dir.join("containerd");
        let d = c.display();
        // The CRI plugin is not used (nerdctl talks to containerd's own API): disabled, so it
        // loads no CNI config of its own.
        std::fs::write(
            c.join("config.toml"),
            format!(
                r#"# Written by tern's nerdctl test: a private containerd, nothing shared.
version = 3
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
"#
            ),
        )
        .unwrap();
        let log = std::fs::File::create(c.join("containerd.log")).unwrap();
        let path = format!(
            "{}:{}",
            containerd_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let child = Command::new(containerd_dir.join("containerd"))
            .arg("--config")
            .arg(c.join("config.toml"))
            .args(["--log-level", "warn"])
            .env("PATH", path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start containerd: {e}"));
        self.containerd = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            // The socket first (nerdctl's own retry would otherwise wait out its timeout), then
            // `nerdctl version`, which fails while the server does not answer.
            let out = self.cmd(&["version"]).output().unwrap();
            if self.socket().exists() && out.status.success() {
                return;
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(c.join("containerd.log")).unwrap_or_default();
                panic!(
                    "containerd did not answer in {START_TIMEOUT:?}: {}\nlog: {log}",
                    text(&out)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `timeout 120 nerdctl <private flags> args...`.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let d = self.dir.display();
        let mut cmd = Command::new("timeout");
        cmd.arg(NERDCTL_TIMEOUT_SECS.to_string())
            .arg(&self.nerdctl)
            .arg(format!("--address={}", self.socket().display()))
            .arg(format!("--namespace={NAMESPACE}"))
            .arg(format!("--data-root={d}/nerdctl"))
            .arg(format!("--cni-path={d}/bin"))
            .arg(format!("--cni-netconfpath={d}/net.d"))
            .arg("--cgroup-manager=cgroupfs")
            .arg("--snapshotter=overlayfs")
            .args(args);
        cmd
    }

    /// Runs nerdctl, asserts success, returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = run(&mut self.cmd(args));
        assert!(out.status.success(), "nerdctl {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The cgroupfs parent of this test's containers (`--cgroup-parent`).
    pub fn cgroup_parent(&self) -> String {
        format!("/tern-nerdctl-{}", std::process::id())
    }

    /// The busybox image of `tern-xtask image --busybox`, loaded with `nerdctl load`.
    pub fn load_busybox(&self) {
        let archive = self.dir.join("image/busybox.oci.tar");
        let out = run(Command::new(bin_dir().join("tern-xtask"))
            .args(["image", "--busybox", "--name", IMAGE, "--out"])
            .arg(&archive));
        assert!(
            out.status.success(),
            "tern-xtask image --busybox: {}",
            text(&out)
        );
        self.ok(&["load", "--input", &archive.to_string_lossy()]);
        let images = self.ok(&["images", "--format", "{{.Repository}}:{{.Tag}}"]);
        assert!(
            images.lines().any(|l| l == IMAGE),
            "{IMAGE} not among the images after nerdctl load: {images}"
        );
    }

    /// `ip -4 -o addr show dev eth0` inside the container, as the container sees it.
    pub fn ip_of(&self, name: &str) -> Ipv4Addr {
        let addrs = self.ok(&[
            "exec", name, "ip", "-4", "-o", "addr", "show", "dev", "eth0",
        ]);
        addrs
            .split_whitespace()
            .skip_while(|w| *w != "inet")
            .nth(1)
            .and_then(|cidr| cidr.split('/').next())
            .and_then(|ip| ip.parse().ok())
            .unwrap_or_else(|| panic!("no IPv4 address on {name}'s eth0: {addrs}"))
    }

    pub fn container_id(&self, name: &str) -> String {
        self.ok(&["inspect", name, "--format", "{{.ID}}"])
            .trim()
            .to_owned()
    }

    fn stop_containerd(&mut self) {
        let Some(mut child) = self.containerd.take() else {
            return;
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Nerdctl {
    fn drop(&mut self) {
        // Best effort, in order: containers (the OCI hook runs tern DEL), containerd, its shims,
        // whatever tern left in the root netns for our range, mounts, the directory, cgroups.
        if self.containerd.is_some() {
            if let Ok(out) = self.cmd(&["ps", "--all", "--quiet"]).output() {
                let ids = String::from_utf8_lossy(&out.stdout).into_owned();
                let ids: Vec<&str> = ids.split_whitespace().collect();
                if !ids.is_empty() {
                    let mut args = vec!["rm", "--force"];
                    args.extend(ids);
                    let _ = self.cmd(&args).output();
                }
            }
        }
        self.stop_containerd();
        let sock = self.socket().to_string_lossy().into_owned();
        for pid in shim_pids(&sock) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        for (dev, dst) in host_routes_into_subnet() {
            let _ = Command::new("ip").args(["route", "del", &dst]).output();
            if dev.starts_with("tern") {
                let _ = Command::new("ip").args(["link", "del", &dev]).output();
            }
        }
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let prefix = self.dir.to_string_lossy().into_owned();
        let mut ours: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(1))
            .filter(|m| m.starts_with(&prefix))
            .collect();
        ours.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in ours {
            let _ = Command::new("umount").args(["-l", m]).output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        let parent = self.cgroup_parent();
        for h in std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            let p = h.path().join(parent.trim_start_matches('/'));
            // Leaf cgroups first (rmdir only: a cgroup with processes stays and says so).
            if let Ok(rd) = std::fs::read_dir(&p) {
                for c in rd.flatten().filter(|c| c.path().is_dir()) {
                    let _ = std::fs::remove_dir(c.path());
                }
            }
            let _ = std::fs::remove_dir(&p);
        }
    }
}

/// PIDs of containerd shims started for the containerd at `address` (`-address <address>` on
/// their command line).
pub fn shim_pids(address: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_shim = args
            .first()
            .is_some_and(|a| String::from_utf8_lossy(a).contains("containerd-shim"));
        if is_shim
            && args
                .windows(2)
                .any(|w| w[0] == b"-address" && w[1] == address.as_bytes())
        {
            pids.push(pid);
        }
    }
    pids
}

/// Routes in the root netns into [`SUBNET`] (any prefix inside it): `(dev, dst)` pairs.
pub fn host_routes_into_subnet() -> Vec<(String, String)> {
    tern_testkit::netns::routes_into(SUBNET).expect("ip route show")
}

pub fn host_link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// The address the host itself uses towards tern's IPv4 gateway 169.254.1.1 (`ip route get`).
pub fn host_address() -> Ipv4Addr {
    let out = run(Command::new("ip").args(["-j", "route", "get", "169.254.1.1"]));
    assert!(
        out.status.success(),
        "ip route get 169.254.1.1: {}",
        text(&out)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0]["prefsrc"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no prefsrc in {v}"))
}

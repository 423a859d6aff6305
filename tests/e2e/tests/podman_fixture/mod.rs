//! podman 4.3 with its CNI backend, private to one temp dir (containers.conf, storage, tmp, CNI
//! config and plugin dirs, IPAM and tern state), driven by the podman test; its drop guard removes
//! the containers, host links routed into the range, mounts under the temp dir and the dir.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use tern_testkit::exec::{bin_dir, ref_plugin_dir, workspace_root};

/// The pod range of this test: 10.99.201.0/24.
pub const SUBNET: &str = "10.99.201.0/24";

pub const SUBNET_PREFIX: &str = "10.99.201.";

pub const NETWORK: &str = "tern-podman";

pub const IMAGE: &str = "localhost/tern-busybox:test";

/// Port of the TCP server inside container `a`.
pub const POD_PORT: u16 = 8080;
/// Where container a's server appends what it receives (inside a).
pub const RECEIVED: &str = "/tmp/received";

/// Deadline for any one podman command (`timeout(1)` kills it).
pub const PODMAN_TIMEOUT_SECS: u32 = 120;

/// A command's output as text, and a command run whatever its status (tern_testkit::exec).
pub use tern_testkit::exec::{output_text as text, run_output as run};

/// A private podman: its own containers.conf, storage, tmp, CNI config and plugin dirs, all under
/// one temp dir that the drop guard removes after removing everything podman and tern made.
pub struct Podman {
    pub dir: PathBuf,
    pub tuning: bool,
}

impl Podman {
    pub fn new() -> Podman {
        let dir = PathBuf::from(format!("/tmp/tern-podman-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in [
            "bin", "net.d", "root", "runroot", "tmp", "ipam", "state", "rootfs",
        ] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let tern = bin_dir().join("tern");
        assert!(
            tern.is_file(),
            "{} is not built: cargo build --release -p tern (or scripts/setup)",
            tern.display()
        );
        let tuning_bin = bin_dir().join("tern-tuning");
        let tuning = plugin_answers_version(&tuning_bin);
        // CNI plugin dir: tern (and tern-tuning) plus every reference plugin (host-local...).
        symlink(&tern, dir.join("bin/tern")).unwrap();
        if tuning {
            symlink(&tuning_bin, dir.join("bin/tern-tuning")).unwrap();
        }
        for e in std::fs::read_dir(ref_plugin_dir()).unwrap().flatten() {
            let target = dir.join("bin").join(e.file_name());
            if !target.exists() {
                symlink(e.path(), target).unwrap();
            }
        }
        let d = dir.display();
        std::fs::write(
            dir.join("containers.conf"),
            format!(
                r#"[containers]
default_ulimits = []
log_driver = "k8s-file"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "none"
tmp_dir = "{d}/tmp"

[network]
network_backend = "cni"
cni_plugin_dirs = ["{d}/bin"]
network_config_dir = "{d}/net.d"
default_network = "{NETWORK}"
"#
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("storage.conf"),
            format!("[storage]\ndriver = \"vfs\"\ngraphroot = \"{d}/root\"\nrunroot = \"{d}/runroot\"\n"),
        )
        .unwrap();
        let podman = Podman { dir, tuning };
        podman.write_conflist();
        podman
    }

    /// `cni-conf-examples/10-tern.conflist` with this test's name, range, host-local `dataDir`
    /// and tern `stateDir`; tern-tuning dropped when it is not built.
    pub fn write_conflist(&self) {
        let example = workspace_root().join("cni-conf-examples/10-tern.conflist");
        let mut conf: Value = serde_json::from_slice(&std::fs::read(&example).unwrap()).unwrap();
        conf["name"] = json!(NETWORK);
        let plugins = conf["plugins"].as_array_mut().unwrap();
        assert_eq!(plugins[0]["type"], "tern", "{}", example.display());
        plugins[0]["stateDir"] = json!(self.dir.join("state"));
        plugins[0]["ipam"]["ranges"] = json!([[{ "subnet": SUBNET }]]);
        plugins[0]["ipam"]["dataDir"] = json!(self.dir.join("ipam"));
        if !self.tuning {
            eprintln!(
                "NOTE: {}/tern-tuning is not built (or does not answer VERSION): the conflist \
                 runs tern + host-local only",
                bin_dir().display()
            );
            plugins.retain(|p| p["type"] != "tern-tuning");
        }
        std::fs::write(
            self.dir.join(format!("net.d/{NETWORK}.conflist")),
            serde_json::to_vec_pretty(&conf).unwrap(),
        )
        .unwrap();
    }

    pub fn podman_args(&self) -> Vec<String> {
        let d = self.dir.display();
        [
            "podman".to_owned(),
            format!("--root={d}/root"),
            format!("--runroot={d}/runroot"),
            format!("--tmpdir={d}/tmp"),
            "--storage-driver=vfs".to_owned(),
            "--runtime=runc".to_owned(),
            "--cgroup-manager=cgroupfs".to_owned(),
            "--network-backend=cni".to_owned(),
            format!("--network-config-dir={d}/net.d"),
            "--events-backend=none".to_owned(),
        ]
        .to_vec()
    }

    /// `timeout 120 podman <private flags> args...` with the private config in the environment.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("timeout");
        cmd.arg(PODMAN_TIMEOUT_SECS.to_string())
            .args(self.podman_args())
            .args(args)
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.dir.join("storage.conf"));
        cmd
    }

    /// Runs podman, asserts success, returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = run(&mut self.cmd(args));
        assert!(out.status.success(), "podman {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Builds the image: a tar of busybox-static as /bin/busybox plus one symlink per applet,
    /// `podman import`ed in a private mount namespace (tmpfs on /var/lib, see the module doc).
    pub fn import_busybox(&self) {
        let rootfs = self.dir.join("rootfs");
        for sub in ["bin", "tmp", "etc", "proc", "sys", "dev"] {
            std::fs::create_dir_all(rootfs.join(sub)).unwrap();
        }
        std::fs::copy("/bin/busybox", rootfs.join("bin/busybox"))
            .expect("copy /bin/busybox (apt-get install busybox-static)");
        let list = run(Command::new("/bin/busybox").arg("--list"));
        for applet in String::from_utf8_lossy(&list.stdout).lines() {
            if applet != "busybox" && !applet.is_empty() {
                symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
            }
        }
        let tar = self.dir.join("busybox.tar");
        let out = run(Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .arg("-cf")
            .arg(&tar)
            .arg("."));
        assert!(out.status.success(), "tar: {}", text(&out));
        let import = self.podman_args().join(" ");
        let script = format!(
            "mount -t tmpfs tern-podman-import /var/lib && exec timeout {PODMAN_TIMEOUT_SECS} {import} import {} {IMAGE}",
            tar.display()
        );
        let out = run(Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.dir.join("storage.conf")));
        assert!(out.status.success(), "podman import: {}", text(&out));
    }

    /// The container's address on our network, as podman recorded it from the CNI result.
    pub fn ip_of(&self, name: &str) -> Ipv4Addr {
        let fmt = format!("{{{{(index .NetworkSettings.Networks \"{NETWORK}\").IPAddress}}}}");
        let s = self.ok(&["inspect", name, "--format", &fmt]);
        s.trim()
            .parse()
            .unwrap_or_else(|e| panic!("address of {name} {s:?}: {e}"))
    }

    pub fn container_id(&self, name: &str) -> String {
        self.ok(&["inspect", name, "--format", "{{.Id}}"])
            .trim()
            .to_owned()
    }

    /// Lease files host-local holds in our dataDir (names that are IP addresses).
    pub fn leases(&self) -> Vec<String> {
        let dir = self.dir.join("ipam").join(NETWORK);
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.parse::<IpAddr>().is_ok())
            .collect()
    }

    /// Regular files anywhere under tern's stateDir.
    pub fn state_files(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push(p);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.dir.join("state"), &mut out);
        out
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        // Best effort, in order: containers (runs tern DEL), then whatever tern left in the root
        // netns for our range, then mounts under our dir, then the dir.
        let _ = self
            .cmd(&["rm", "--force", "--all", "--time", "0"])
            .output();
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
    }
}

/// Whether `bin` exists and answers VERSION with a non-empty `supportedVersions` (a placeholder
/// binary that prints nothing does not count as built).
pub fn plugin_answers_version(bin: &Path) -> bool {
    if !bin.is_file() {
        return false;
    }
    let Ok(mut child) = Command::new(bin)
        .env_clear()
        .env("CNI_COMMAND", "VERSION")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
    else {
        return false;
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = std::io::Write::write_all(&mut stdin, br#"{"cniVersion":"1.0.0"}"#);
    }
    let Ok(out) = child.wait_with_output() else {
        return false;
    };
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v["supportedVersions"].as_array().map(|a| !a.is_empty()))
        .unwrap_or(false)
}

/// Routes in the root netns into [`SUBNET`] (any prefix inside it): `(dev, dst)` pairs.
pub fn host_routes_into_subnet() -> Vec<(String, String)> {
    tern_testkit::netns::routes_into(SUBNET).expect("ip route show")
}

pub fn host_link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// The address the host itself uses towards tern's IPv4 gateway 169.254.1.1 (`ip route get`):
/// a local address, so a pod's packet to it is delivered locally after entering the host veth.
pub fn host_address() -> Ipv4Addr {
    let out = run(Command::new("ip").args(["-j", "route", "get", "169.254.1.1"]));
    assert!(
        out.status.success(),
        "the host has no route covering 169.254.1.1, which tern's proxy-ARP gateway needs \
         (e.g. a default route): {}",
        text(&out)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0]["prefsrc"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no prefsrc in {v}"))
}

//! tern under a real runtime: podman 4.3 with its CNI backend (`network_backend = "cni"`), runc and
//! a busybox image this test builds itself, on the network of `cni-conf-examples/10-tern.conflist`
//! (tern + host-local, plus tern-tuning when `tern-tuning` (beside tern) is built and answers
//! VERSION; otherwise the test says so on stderr and runs without it).
//!
//! What it proves: a container gets a /32 from the range with a default route via 169.254.1.1;
//! it reaches a TCP listener of the host (on the address the host itself uses towards 169.254.1.1,
//! so the path is pod → host veth → local delivery, and the reply goes back through the pod's /32
//! host route) and another container over TCP; `podman rm -f` leaves no host veth, no host route
//! into the range, no host-local lease, no tern state file and no libcni result cache entry.
//!
//! Invariants:
//! - Runs in the machine's root netns (podman needs it) and, like ptp, tern enables `ip_forward`
//!   and proxy ARP there: accepted. Everything else is private to one temp dir: podman's
//!   containers.conf (`CONTAINERS_CONF`), storage (`--root`, `--runroot`, vfs driver), tmp dir,
//!   CNI config dir and plugin dir (tern + Debian's `/usr/lib/cni`), host-local `dataDir` and
//!   tern's `stateDir`. `podman import` runs in a private mount namespace with a tmpfs on
//!   `/var/lib`, so containers/image's blob-info cache does not land in the machine's
//!   `/var/lib/containers`. The one shared path is libcni's result cache (`/var/lib/cni/results`,
//!   not configurable in podman 4.3), whose entries for our containers must be gone after `rm`.
//! - The range is 10.99.201.0/24 (nothing else on this machine uses it); cleanup on any failure
//!   (drop guard) removes the containers, host links routed into that range, mounts under the
//!   temp dir, and the temp dir.
//! - Facts of these machines: crun refuses this kernel's cgroup mode and the default rlimits, so
//!   the test uses `--runtime runc --cgroup-manager cgroupfs` and `default_ulimits = []`.
//!
//! Needs root, podman, runc, busybox-static and the release binaries: fails (never skips) without.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};
use tern_testkit::exec::{bin_dir, ref_plugin_dir, workspace_root};

/// The pod range of this test: 10.99.201.0/24.
const SUBNET: &str = "10.99.201.0/24";
const SUBNET_PREFIX: &str = "10.99.201.";
const NETWORK: &str = "tern-podman";
const IMAGE: &str = "localhost/tern-busybox:test";
/// Port of the TCP server inside container `a`.
const POD_PORT: u16 = 8080;
/// Deadline for any one podman command (`timeout(1)` kills it).
const PODMAN_TIMEOUT_SECS: u32 = 120;

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs a command, returns its output whatever the status.
fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (run scripts/setup?)"))
}

/// A private podman: its own containers.conf, storage, tmp, CNI config and plugin dirs, all under
/// one temp dir that the drop guard removes after removing everything podman and tern made.
struct Podman {
    dir: PathBuf,
    tuning: bool,
}

impl Podman {
    fn new() -> Podman {
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
    fn write_conflist(&self) {
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

    fn podman_args(&self) -> Vec<String> {
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
    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("timeout");
        cmd.arg(PODMAN_TIMEOUT_SECS.to_string())
            .args(self.podman_args())
            .args(args)
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.dir.join("storage.conf"));
        cmd
    }

    /// Runs podman, asserts success, returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = run(&mut self.cmd(args));
        assert!(out.status.success(), "podman {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Builds the image: a tar of busybox-static as /bin/busybox plus one symlink per applet,
    /// `podman import`ed in a private mount namespace (tmpfs on /var/lib, see the module doc).
    fn import_busybox(&self) {
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
    fn ip_of(&self, name: &str) -> Ipv4Addr {
        let fmt = format!("{{{{(index .NetworkSettings.Networks \"{NETWORK}\").IPAddress}}}}");
        let s = self.ok(&["inspect", name, "--format", &fmt]);
        s.trim()
            .parse()
            .unwrap_or_else(|e| panic!("address of {name} {s:?}: {e}"))
    }

    fn container_id(&self, name: &str) -> String {
        self.ok(&["inspect", name, "--format", "{{.Id}}"])
            .trim()
            .to_owned()
    }

    /// Lease files host-local holds in our dataDir (names that are IP addresses).
    fn leases(&self) -> Vec<String> {
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
    fn state_files(&self) -> Vec<PathBuf> {
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
fn plugin_answers_version(bin: &Path) -> bool {
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
fn host_routes_into_subnet() -> Vec<(String, String)> {
    tern_testkit::netns::routes_into(SUBNET).expect("ip route show")
}

fn host_link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// The address the host itself uses towards tern's IPv4 gateway 169.254.1.1 (`ip route get`):
/// a local address, so a pod's packet to it is delivered locally after entering the host veth.
fn host_address() -> Ipv4Addr {
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

#[test]
fn podman_cni_backend_runs_containers_on_tern() {
    let uid = run(Command::new("id").arg("-u"));
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "the podman test needs root"
    );
    let pm = Podman::new();
    assert!(
        host_routes_into_subnet().is_empty(),
        "{SUBNET} is already routed on this host: {:?}",
        host_routes_into_subnet()
    );
    pm.import_busybox();
    let nets = pm.ok(&["network", "ls", "--format", "{{.Name}}"]);
    assert!(
        nets.lines().any(|l| l == NETWORK),
        "podman does not see the conflist: {nets}"
    );

    // Container a: a TCP server that answers "pong-from-a" to each connection, kept running.
    pm.ok(&[
        "run",
        "--detach",
        "--name",
        "a",
        "--network",
        NETWORK,
        IMAGE,
        "sh",
        "-c",
        &format!("while true; do echo pong-from-a | nc -l -p {POD_PORT}; done"),
    ]);
    let ip_a = pm.ip_of("a");
    assert!(
        ip_a.to_string().starts_with(SUBNET_PREFIX),
        "a's address {ip_a} is not in {SUBNET}"
    );

    // Inside a: the /32, the default route via the link-local gateway.
    let addrs = pm.ok(&["exec", "a", "ip", "-4", "-o", "addr", "show", "dev", "eth0"]);
    assert!(
        addrs.contains(&format!("inet {ip_a}/32")),
        "a's eth0 lacks {ip_a}/32: {addrs}"
    );
    let routes = pm.ok(&["exec", "a", "ip", "-4", "route"]);
    assert!(
        routes
            .lines()
            .any(|l| l.starts_with("default via 169.254.1.1 dev eth0")),
        "a has no default route via 169.254.1.1: {routes}"
    );
    if pm.tuning {
        let ka = pm.ok(&["exec", "a", "cat", "/proc/sys/net/ipv4/tcp_keepalive_time"]);
        assert_eq!(
            ka.trim(),
            "600",
            "tern-tuning did not set tcp_keepalive_time"
        );
    }

    // On the host: a /32 route to a through a tern veth, a lease, a state file.
    let routes_a: Vec<_> = host_routes_into_subnet()
        .into_iter()
        .filter(|(_, dst)| dst == &ip_a.to_string())
        .collect();
    assert_eq!(routes_a.len(), 1, "host routes to {ip_a}: {routes_a:?}");
    let veth_a = routes_a[0].0.clone();
    assert!(
        veth_a.starts_with("tern") && veth_a.len() == 15 && host_link_exists(&veth_a),
        "host route to {ip_a} goes via {veth_a:?}, not a tern veth"
    );
    assert!(
        pm.leases().contains(&ip_a.to_string()),
        "no host-local lease for {ip_a}: {:?}",
        pm.leases()
    );
    assert!(!pm.state_files().is_empty(), "tern wrote no state file");

    // Container b: reaches a TCP listener of the host, then container a.
    let host_ip = host_address();
    let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        if let Ok((mut conn, peer)) = listener.accept() {
            let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
            let mut got = String::new();
            let _ = conn.read_to_string(&mut got);
            let _ = tx.send((peer.ip(), got));
        }
    });
    let out_b = pm.ok(&[
        "run",
        "--name",
        "b",
        "--network",
        NETWORK,
        IMAGE,
        "sh",
        "-c",
        &format!(
            "echo hello-host | nc -w 5 {host_ip} {port} && echo ping-from-b | nc -w 5 {ip_a} {POD_PORT}"
        ),
    ]);
    let (peer, got) = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("container b never reached the host at {host_ip}:{port}"));
    assert_eq!(got.trim(), "hello-host", "host listener got {got:?}");
    // b has exited (podman may have torn its network down already): its address is checked
    // through what the host saw, which must be a pod address other than a's (no NAT on the way).
    assert!(
        peer.to_string().starts_with(SUBNET_PREFIX) && peer != IpAddr::V4(ip_a),
        "host saw the connection from {peer}, not from a pod address of b"
    );
    assert!(
        out_b.contains("pong-from-a"),
        "b did not get a's answer over TCP: {out_b:?}"
    );
    // conmon writes a's log asynchronously: give it a moment to land.
    let mut logs_a = String::new();
    for _ in 0..50 {
        logs_a = pm.ok(&["logs", "a"]);
        if logs_a.contains("ping-from-b") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        logs_a.contains("ping-from-b"),
        "a did not receive b's message: {logs_a:?}"
    );

    // podman rm -f: nothing of either container is left.
    let ids = [pm.container_id("a"), pm.container_id("b")];
    pm.ok(&["rm", "--force", "--time", "0", "a", "b"]);
    assert!(
        !host_link_exists(&veth_a),
        "host veth {veth_a} survived podman rm"
    );
    let left_routes = host_routes_into_subnet();
    assert!(
        left_routes.is_empty(),
        "host routes into {SUBNET} survived podman rm: {left_routes:?}"
    );
    assert!(
        pm.leases().is_empty(),
        "host-local leases survived podman rm: {:?}",
        pm.leases()
    );
    assert!(
        pm.state_files().is_empty(),
        "tern state files survived podman rm: {:?}",
        pm.state_files()
    );
    let cached: Vec<String> = std::fs::read_dir("/var/lib/cni/results")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| ids.iter().any(|id| n.contains(id.as_str())))
        .collect();
    assert!(
        cached.is_empty(),
        "libcni result cache entries survived podman rm: {cached:?}"
    );
    let ps = pm.ok(&["ps", "--all", "--quiet"]);
    assert!(ps.trim().is_empty(), "containers left: {ps}");
}

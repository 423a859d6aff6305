//! The private CRI-O's configuration file, and podman on the same private storage.
//!
//! Invariant: every path CRI-O writes to is under the instance directory `d` (each default that
//! points under `/var`, `/run` or `/etc` is overridden here: storage, runroot, socket, version
//! and shutdown files, log, exits, attach sockets, namespace pins, runc root, hooks, CDI,
//! irqbalance, signature policies; CRI-O's seccomp notifier dir is next to the socket); the only
//! shared path left is libcni's result cache (see `crio.rs`). The same holds for podman, which
//! loads the pause image. The real-cluster tier's CRI-O node (tests/cluster/crio.sh) renders its
//! `crio.conf` here too ([`CrioConf`], through `tern-cluster-crio-conf`): the same instance layout,
//! with the node's real CNI dirs (only read by CRI-O) and a runc wrapper.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::image::PAUSE_IMAGE;
use crate::CriError;

/// Writes instance dir `d`'s `net.d/10-<name>.conflist` (the default network: the list's
/// `name`), `policy.json` (accept anything: only the local pause image is ever used) and
/// `crio.conf` (see [`crio_conf`]), with `pinns` and Debian's runc.
///
/// # Errors
/// [`CriError::Io`] or [`CriError::Json`] writing them.
pub fn write_config(d: &Path, list: &Value, pinns: &Path) -> Result<(), CriError> {
    let name = list["name"].as_str().unwrap_or_default().to_owned();
    let file = d.join("net.d").join(format!("10-{name}.conflist"));
    std::fs::write(&file, serde_json::to_vec_pretty(list)?)
        .map_err(CriError::io("write conflist", &file))?;
    let policy = d.join("policy.json");
    let accept = json!({"default": [{"type": "insecureAcceptAnything"}]});
    std::fs::write(&policy, serde_json::to_vec(&accept)?)
        .map_err(CriError::io("write", &policy))?;
    let file = d.join("crio.conf");
    let conf = CrioConf {
        dir: d.to_owned(),
        default_network: Some(name),
        network_dir: d.join("net.d"),
        plugin_dir: d.join("bin"),
        pinns: pinns.to_owned(),
        runc: runc_path(),
        stream_port: 0,
        storage_driver: storage_driver(),
    };
    std::fs::write(&file, crio_conf(&conf)).map_err(CriError::io("write config", &file))
}

/// Where `scripts/build-go` put the programs of Go module `name`:
/// `$TERN_GO_CACHE/bin/<name>` (default `/var/cache/tern-build/bin/<name>`).
pub fn go_bin_dir(name: &str) -> PathBuf {
    let cache = std::env::var_os("TERN_GO_CACHE").unwrap_or_else(|| "/var/cache/tern-build".into());
    Path::new(&cache).join("bin").join(name)
}

/// The storage driver: `$TERN_CRI_SNAPSHOTTER` = `native` selects `vfs`, else `overlay`.
pub fn storage_driver() -> &'static str {
    match std::env::var("TERN_CRI_SNAPSHOTTER").as_deref() {
        Ok("native") => "vfs",
        _ => "overlay",
    }
}

/// runc, as Debian installs it (`/usr/sbin/runc`), else from `PATH` by name.
pub fn runc_path() -> PathBuf {
    ["/usr/sbin/runc", "/usr/bin/runc"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("runc"))
}

/// conmon, as Debian installs it.
pub const CONMON: &str = "/usr/bin/conmon";

/// `podman` on the instance's storage (root, runroot, driver) with its own tmp dir, no events
/// and cgroupfs, in a private mount namespace whose `/var/lib` and `/var/tmp` are empty tmpfs:
/// an image copy writes containers/image's blob-info cache under `/var/lib/containers/cache`
/// (for root; no flag moves it) and big temp files under `/var/tmp`, both thrown away there, so
/// podman touches nothing outside `d`. Append podman's arguments.
pub fn podman(d: &Path) -> Command {
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg("mount -t tmpfs tern-podman /var/lib && mount -t tmpfs tern-podman /var/tmp && exec podman \"$@\"")
        .arg("podman")
        .arg("--root")
        .arg(d.join("storage"))
        .arg("--runroot")
        .arg(d.join("run"))
        .arg("--tmpdir")
        .arg(d.join("tmp"))
        .args(["--storage-driver", storage_driver()])
        .args(["--cgroup-manager", "cgroupfs", "--events-backend", "none"]);
    c
}

/// What varies between the private CRI-O instances of the tests: this tier's (everything under
/// its instance dir) and the real-cluster tier's node (tests/cluster: the node's real CNI dirs,
/// the runc wrapper of `tests/cluster/crio.sh`, a fixed streaming port for `kubectl exec`).
#[derive(Clone, Debug)]
pub struct CrioConf {
    /// The instance dir: storage, runroot, socket (`crio.sock`), logs and every other state.
    pub dir: PathBuf,
    /// `cni_default_network` (a conflist's `name`); `None` lets CRI-O take the first conflist.
    pub default_network: Option<String>,
    /// `network_dir`: where CRI-O reads conflists.
    pub network_dir: PathBuf,
    /// The one entry of `plugin_dirs`.
    pub plugin_dir: PathBuf,
    /// CRI-O's `pinns`.
    pub pinns: PathBuf,
    /// The OCI runtime's `runtime_path` (runc or a wrapper around it).
    pub runc: PathBuf,
    /// The streaming server's TCP port on 127.0.0.1 (`0`: any free port).
    pub stream_port: u16,
    /// containers/storage's graph driver (`overlay` or `vfs`; see [`storage_driver`]).
    pub storage_driver: &'static str,
}

/// `crio.conf` for `c`, with the pause image [`PAUSE_IMAGE`], conmon [`CONMON`] and signature
/// policy `<dir>/policy.json`.
///
/// Settings these machines need: cgroupfs (no systemd; conmon in the pod's cgroup), no
/// SELinux/AppArmor (not built in), runc as the default runtime (CRI-O's default is crun).
pub fn crio_conf(c: &CrioConf) -> String {
    let driver = c.storage_driver;
    let pinns = c.pinns.display();
    let runc = c.runc.display();
    let d = c.dir.display();
    let port = c.stream_port;
    let net_dir = c.network_dir.display();
    let plugin_dir = c.plugin_dir.display();
    let default_net = match &c.default_network {
        Some(n) => format!("cni_default_network = \"{n}\"\n"),
        None => String::new(),
    };
    format!(
        r#"# Written by tern's tests (tests/cri's renderer): a private CRI-O instance.
[crio]
root = "{d}/storage"
runroot = "{d}/run"
storage_driver = "{driver}"
log_dir = "{d}/pods"
version_file = "{d}/run/crio-version"
version_file_persist = ""
clean_shutdown_file = "{d}/clean.shutdown"
internal_wipe = true
internal_repair = false

[crio.api]
listen = "{d}/crio.sock"
stream_address = "127.0.0.1"
stream_port = "{port}"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon_cgroup = "pod"
selinux = false
apparmor_profile = ""
hooks_dir = ["{d}/hooks.d"]
default_mounts_file = "{d}/mounts.conf"
container_exits_dir = "{d}/exits"
container_attach_socket_dir = "{d}/attach"
namespaces_dir = "{d}/ns"
pinns_path = "{pinns}"
cdi_spec_dirs = ["{d}/cdi"]
irqbalance_config_file = "{d}/irqbalance"
irqbalance_config_restore_file = "disable"
log_to_journald = false
drop_infra_ctr = true
decryption_keys_path = "{d}/keys"

[crio.runtime.runtimes.runc]
runtime_path = "{runc}"
runtime_type = "oci"
runtime_root = "{d}/runc"
monitor_path = "{CONMON}"
monitor_cgroup = "pod"

[crio.image]
pause_image = "{PAUSE_IMAGE}"
signature_policy = "{d}/policy.json"
signature_policy_dir = "{d}/policies"
big_files_temporary_dir = "{d}/tmp"

[crio.network]
{default_net}network_dir = "{net_dir}"
plugin_dirs = ["{plugin_dir}"]

[crio.metrics]
enable_metrics = false

[crio.tracing]
enable_tracing = false

[crio.nri]
enable_nri = false
"#
    )
}

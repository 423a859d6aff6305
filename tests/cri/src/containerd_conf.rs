//! The private containerd's `config.toml` (version 2): every path under the instance directory,
//! the CRI plugin on our CNI dirs, one runc runtime section per runtime handler.
//!
//! Invariant: nothing in it points at the machine's own containerd (`/var/lib/containerd`,
//! `/run/containerd`, `/etc/cni`); only the shim sockets, whose place containerd 1.6 does not
//! let us choose, are under `/run/containerd/s` (see `containerd.rs`).

use std::path::Path;

use crate::image::PAUSE_IMAGE;

/// The snapshotter: `$TERN_CRI_SNAPSHOTTER`, else `overlayfs` (`native` works too).
pub fn snapshotter() -> String {
    std::env::var("TERN_CRI_SNAPSHOTTER").unwrap_or_else(|_| "overlayfs".into())
}

/// The runc runtime section for handler `name`, with its own CNI conf dir when given.
pub(crate) fn runtime_section(d: &Path, name: &str, cni_conf_dir: Option<&Path>) -> String {
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
pub(crate) fn config_toml(d: &Path, extra_runtimes: &str) -> String {
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

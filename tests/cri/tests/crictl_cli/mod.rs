//! `crictl` on a private CRI-O, and the pod and container config files it reads (shared by the
//! crictl-driven CRI-O tests: each binary uses a part).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::json;
use tern_cri::crio::{go_bin_dir, Crio};
use tern_cri::image::PAUSE_IMAGE;
use tern_cri::Runtime;

/// `crictl` on `c`'s socket with no config file, ARGS appended.
pub fn crictl_cmd(c: &Crio, args: &[&str]) -> Command {
    let ep = format!("unix://{}", c.socket().display());
    let mut cmd = Command::new(go_bin_dir("cri-tools").join("crictl"));
    cmd.args(["--config", "/dev/null", "--timeout", "60s"])
        .args(["--runtime-endpoint", &ep, "--image-endpoint", &ep])
        .args(args);
    cmd
}

/// `crictl` on the private CRI-O's socket, no config file; returns (success, stdout, stderr).
pub fn crictl(c: &Crio, args: &[&str]) -> (bool, String, String) {
    let out = crictl_cmd(c, args)
        .output()
        .unwrap_or_else(|e| panic!("crictl: {e} (bash scripts/build-go cri-tools)"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `crictl ARGS` that must succeed; its stdout.
pub fn crictl_ok(c: &Crio, args: &[&str]) -> String {
    let (ok, out, err) = crictl(c, args);
    assert!(ok, "crictl {args:?} failed: {err}\n{out}");
    out
}

/// A pod config file as kubelet would send it (network and IPC per pod, PID per container;
/// the enum values of `NamespaceMode`: POD 0, CONTAINER 1), under the instance's cgroup parent.
pub fn pod_file(c: &Crio, name: &str, uid: &str) -> PathBuf {
    let conf = json!({
        "metadata": {"name": name, "namespace": "default", "uid": uid, "attempt": 0},
        "hostname": name,
        "labels": {"tern.io/test": "crictl"},
        "linux": {
            "cgroup_parent": c.cgroup_parent(),
            "security_context": {"namespace_options": {"network": 0, "pid": 1, "ipc": 0}}
        }
    });
    let path = c.dir().join(format!("pod-{name}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(&conf).unwrap()).unwrap();
    path
}

/// A container config file: the pause image's busybox sleeping, allowed to ping (NET_RAW).
pub fn container_file(c: &Crio) -> PathBuf {
    let conf = json!({
        "metadata": {"name": "main"},
        "image": {"image": PAUSE_IMAGE},
        "command": ["/bin/sleep", "infinity"],
        "log_path": "main.log",
        "linux": {"security_context": {
            "capabilities": {"add_capabilities": ["NET_RAW"]},
            "namespace_options": {"network": 0, "pid": 1, "ipc": 0}
        }}
    });
    let path = c.dir().join("container.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&conf).unwrap()).unwrap();
    path
}

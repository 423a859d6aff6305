//! The one-node cluster `tern-bench pod-start` runs on: brought up and tern installed by the
//! real-cluster tier's own `install` case (`TERN_CLUSTER_KEEP=1`), its paths read from
//! tests/cluster/lib.sh (one source of truth), torn down by that file's `down`; and kubectl.
//!
//! Invariant: everything the bench adds on the node is listed in KT/created, which `down` removes.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::Res;

/// The cluster's directories, node and binaries.
pub(crate) struct Kube {
    pub(crate) root: PathBuf,
    pub(crate) kt: PathBuf,
    pub(crate) gobin: PathBuf,
    pub(crate) kubectl: PathBuf,
    pub(crate) node: String,
    pub(crate) pause: String,
    pub(crate) cni_bin: PathBuf,
    pub(crate) cni_net: PathBuf,
}

const KT: &str = "/tmp/tern-cluster-bench";

fn lib_sh(root: &std::path::Path, script: &str) -> Res<String> {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(". tests/cluster/lib.sh\n{script}"))
        .current_dir(root)
        .env("KT", KT)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("bash: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "tests/cluster/lib.sh: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Kube {
    /// The paths tests/cluster/lib.sh names (run from the repository's root).
    pub(crate) fn new() -> Res<Self> {
        let root = std::env::current_dir().map_err(|e| format!("cwd: {e}"))?;
        let v = lib_sh(&root, "printf '%s\\n' \"$GOBIN_DIR\" \"$K8S_BIN\" \"$NODE\" \"$PAUSE_IMAGE\" \"$CNI_BIN\" \"$CNI_NET\"")?;
        let v: Vec<&str> = v.lines().collect();
        let [gobin, k8s, node, pause, cni_bin, cni_net] = v.as_slice() else {
            return Err(format!("tests/cluster/lib.sh's paths: {v:?}"));
        };
        Ok(Kube {
            kt: PathBuf::from(KT),
            gobin: PathBuf::from(gobin),
            kubectl: PathBuf::from(k8s).join("kubectl"),
            node: node.to_string(),
            pause: pause.to_string(),
            cni_bin: PathBuf::from(cni_bin),
            cni_net: PathBuf::from(cni_net),
            root,
        })
    }

    /// The cluster up with tern installed: the tier's `install` case, kept running.
    pub(crate) fn up(&self) -> Res<()> {
        println!("[pod-start] bringing up the cluster under {KT} and installing tern (the tier's install case)");
        let ok = Command::new("cargo")
            .args([
                "test",
                "-q",
                "-p",
                "tern-cluster",
                "--test",
                "cluster",
                "--",
                "--exact",
                "cluster::install",
            ])
            .current_dir(&self.root)
            .env("KT", KT)
            .env("TERN_CLUSTER_KEEP", "1")
            .status()
            .map_err(|e| format!("cargo: {e}"))?;
        if !ok.success() {
            return Err("the tier's install case failed".into());
        }
        Ok(())
    }

    /// tests/cluster/lib.sh's `down` (also what KT/created lists).
    pub(crate) fn down(&self) {
        if let Err(e) = lib_sh(&self.root, "down") {
            eprintln!("tern-bench pod-start: teardown: {e}");
        }
    }

    /// kubectl ARGS as the admin: its trimmed stdout.
    pub(crate) fn kubectl(&self, args: &[&str]) -> Res<String> {
        self.kubectl_in(args, None)
    }

    fn kubectl_in(&self, args: &[&str], stdin: Option<&[u8]>) -> Res<String> {
        let mut c = Command::new(&self.kubectl);
        c.arg("--kubeconfig")
            .arg(self.kt.join("pki/admin.kubeconfig"))
            .args(args);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().map_err(|e| format!("kubectl: {e}"))?;
        if let (Some(mut i), Some(b)) = (child.stdin.take(), stdin) {
            i.write_all(b).map_err(|e| format!("kubectl stdin: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("kubectl: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// A pause pod NAME in `default` (the tier's test pod, tests/cluster/src/pods.rs), with
    /// `labels` beside app=tern-test.
    pub(crate) fn pod(&self, name: &str, labels: &[(&str, &str)]) -> Value {
        let mut l = json!({"app": "tern-test"});
        for (k, v) in labels {
            l[*k] = json!(v);
        }
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": l},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "main",
                "image": self.pause, "imagePullPolicy": "Never",
                "securityContext": {"capabilities": {"add": ["NET_RAW"]}}}]}})
    }

    /// `kubectl create` of one pod NAME.
    pub(crate) fn create(&self, name: &str, labels: &[(&str, &str)]) -> Res<()> {
        self.create_all(&[self.pod(name, labels)])
    }

    /// One `kubectl create` of every object of `items`.
    pub(crate) fn create_all(&self, items: &[Value]) -> Res<()> {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
        self.kubectl_in(&["create", "-f", "-"], Some(list.to_string().as_bytes()))
            .map(drop)
    }

    /// `kubectl wait --for=condition=Ready TARGET...` for up to SECS.
    pub(crate) fn wait_ready(&self, target: &str, secs: u64) -> Res<()> {
        let t = format!("--timeout={secs}s");
        let mut args = vec!["wait", "--for=condition=Ready", &t];
        args.extend(target.split(' '));
        self.kubectl(&args).map(drop)
    }
}

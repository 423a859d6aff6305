//! The in-process fixture of tern's tests: a fake node (host and pod netns, a private dir for
//! `CNI_PATH`, state and leases) and one verb driven through the CNI dispatcher.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tern_net::netns::NetNs;
use tern_testkit::netns::HostAndPod;

pub const VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
pub const NET: &str = "inproc";

/// A fake node: host and pod netns, and a private dir holding `CNI_PATH`, tern's state and the
/// leases; all removed on drop.
pub struct Node {
    pub hp: HostAndPod,
    pub host: NetNs,
    pub dir: PathBuf,
}

impl Node {
    pub fn new(prefix: &str) -> Node {
        let hp = HostAndPod::with_uplink(prefix);
        let host = NetNs::open(hp.host.path()).unwrap();
        let dir = std::env::temp_dir().join(format!("{}-{}", hp.host.name(), std::process::id()));
        fs::create_dir_all(dir.join("bin")).unwrap();
        // tern runs tern-ipam in-process but, as with exec, only when CNI_PATH has it.
        let ipam = dir.join("bin/tern-ipam");
        fs::write(&ipam, "").unwrap();
        fs::set_permissions(&ipam, fs::Permissions::from_mode(0o755)).unwrap();
        Node { hp, host, dir }
    }

    pub fn conf(&self, version: &str) -> Value {
        json!({
            "cniVersion": version,
            "name": NET,
            "type": "tern",
            "stateDir": self.dir.join("state"),
            "ipam": {
                "type": "tern-ipam",
                "dataDir": self.dir.join("leases"),
                "ranges": [[{"subnet": "10.98.0.0/24"}], [{"subnet": "fd00:98::/64"}]],
                "routes": [{"dst": "10.96.0.0/16"}],
            },
        })
    }

    /// One invocation through the dispatcher; returns the exit status and stdout as JSON (or
    /// `Null` when empty).
    pub fn call(&self, verb: &str, cid: &str, conf: &Value, cni_path: &Path) -> (i32, Value) {
        self.call_with_args(verb, cid, conf, cni_path, None)
    }

    /// [`Node::call`] with `CNI_ARGS` set to `args` when given.
    pub fn call_with_args(
        &self,
        verb: &str,
        cid: &str,
        conf: &Value,
        cni_path: &Path,
        args: Option<&str>,
    ) -> (i32, Value) {
        let mut env: HashMap<String, String> = [
            ("CNI_COMMAND", verb),
            ("CNI_CONTAINERID", cid),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", cni_path.to_str().unwrap()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        if let Some(a) = args {
            env.insert("CNI_ARGS".into(), a.to_owned());
        }
        if verb != "STATUS" && verb != "GC" {
            env.insert("CNI_NETNS".into(), self.hp.pod.path().display().to_string());
        }
        let stdin = serde_json::to_vec(conf).unwrap();
        let (status, out) = self
            .host
            .run_in(|| {
                let (mut out, mut err) = (Vec::new(), Vec::new());
                let status =
                    tern_cni::dispatch(&tern::Tern, &env, &mut &stdin[..], &mut out, &mut err);
                (status, out)
            })
            .unwrap();
        let json = if out.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&out).unwrap()
        };
        (status, json)
    }

    pub fn ok(&self, verb: &str, cid: &str, conf: &Value) -> Value {
        let (status, out) = self.call(verb, cid, conf, &self.dir.join("bin"));
        assert_eq!(status, 0, "{verb} {cid} {}: {out}", conf["cniVersion"]);
        out
    }

    pub fn state_file(&self, cid: &str) -> PathBuf {
        self.dir.join(format!("state/{NET}/{cid}_eth0.json"))
    }

    pub fn lease(&self, ip: &str) -> PathBuf {
        self.dir.join(format!("leases/{NET}/{ip}"))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

pub fn with_prev(conf: &Value, prev: &Value) -> Value {
    let mut c = conf.clone();
    c["prevResult"] = prev.clone();
    c
}

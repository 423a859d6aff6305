//! Shared fixtures of tern-tuning's kernel tests: a fake host and a pod netns with a veth (what a
//! main plugin leaves behind), the plugin run in-process (on a thread in the fake host, where
//! the veth's host end is) through the real CNI dispatcher with an injected environment and
//! allowlist path, and the keepalive sysctls of the default chain.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{json, Value};
use tern_testkit::netns::HostAndPod;
use tern_tuning::TuningPlugin;

pub struct Out {
    pub status: i32,
    pub json: Option<Value>,
}

impl Out {
    pub fn code(&self) -> Option<u64> {
        self.json
            .as_ref()
            .and_then(|j| j.get("code"))
            .and_then(Value::as_u64)
    }
    pub fn msg(&self) -> String {
        self.json
            .as_ref()
            .map(|j| {
                format!(
                    "{} {}",
                    j["msg"],
                    j.get("details").cloned().unwrap_or_default()
                )
            })
            .unwrap_or_default()
    }
}

pub struct Env {
    pub hp: HostAndPod,
    pub data: tempfile::TempDir,
    pub plugin: TuningPlugin,
    pub ifname: String,
    pub cid: String,
    /// The host end of the pod's veth.
    pub peer: String,
}

pub fn env(prefix: &str, ifname: &str) -> Env {
    static N: AtomicU32 = AtomicU32::new(0);
    let peer = format!("vtt{}", N.fetch_add(1, Ordering::Relaxed));
    let hp = HostAndPod::with_pod_link(prefix, ifname, &peer);
    let data = tempfile::tempdir().unwrap();
    let plugin = TuningPlugin {
        allowlist_path: data.path().join("no-allowlist.conf"),
    };
    Env {
        hp,
        data,
        plugin,
        ifname: ifname.to_string(),
        cid: format!("ctr-{prefix}"),
        peer,
    }
}

impl Env {
    pub fn with_allowlist(mut self, lines: &str) -> Env {
        let p = self.data.path().join("allowlist.conf");
        std::fs::write(&p, lines).unwrap();
        self.plugin.allowlist_path = p;
        self
    }

    pub fn backup_dir(&self) -> PathBuf {
        self.data.path().join("backups")
    }

    pub fn backup_file(&self) -> PathBuf {
        self.backup_dir()
            .join(format!("{}_{}.json", self.cid, self.ifname))
    }

    pub fn conf(&self, version: &str, extra: Value) -> Value {
        let mut prev = json!({
            "cniVersion": version,
            "interfaces": [{"name": self.ifname, "sandbox": self.hp.pod.path()}],
            "ips": [{"address": "10.1.0.5/32", "interface": 0}],
        });
        if version.starts_with("0.") {
            prev["ips"][0]["version"] = json!("4");
        }
        let mut c = json!({
            "cniVersion": version,
            "name": "tuning-test",
            "type": "tern-tuning",
            "dataDir": self.backup_dir(),
            "prevResult": prev,
        });
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }

    pub fn run(&self, cmd: &str, netns: Option<&Path>, conf: &Value) -> Out {
        self.run_raw(cmd, netns, serde_json::to_vec(conf).unwrap(), "")
    }

    pub fn run_raw(&self, cmd: &str, netns: Option<&Path>, stdin: Vec<u8>, args: &str) -> Out {
        let mut e: HashMap<String, String> = HashMap::new();
        e.insert("CNI_COMMAND".into(), cmd.into());
        e.insert("CNI_CONTAINERID".into(), self.cid.clone());
        e.insert("CNI_IFNAME".into(), self.ifname.clone());
        e.insert("CNI_PATH".into(), "/nonexistent".into());
        e.insert("CNI_ARGS".into(), args.into());
        if let Some(ns) = netns {
            e.insert("CNI_NETNS".into(), ns.display().to_string());
        }
        // In the fake host, as a runtime runs the chain: the pod veth's host end is there.
        let host = tern_net::netns::NetNs::open(self.hp.host.path()).unwrap();
        let (status, stdout) = host
            .run_in(|| {
                let mut stdout = Vec::new();
                let mut stderr = Vec::new();
                let status = tern_cni::dispatch(
                    &self.plugin,
                    &e,
                    &mut stdin.as_slice(),
                    &mut stdout,
                    &mut stderr,
                );
                (status, stdout)
            })
            .unwrap();
        let json = serde_json::from_slice(&stdout).ok();
        Out { status, json }
    }

    pub fn add(&self, conf: &Value) -> Out {
        self.run("ADD", Some(&self.hp.pod.path()), conf)
    }
    pub fn check(&self, conf: &Value) -> Out {
        self.run("CHECK", Some(&self.hp.pod.path()), conf)
    }
    pub fn del(&self, conf: &Value) -> Out {
        self.run("DEL", Some(&self.hp.pod.path()), conf)
    }

    pub fn pod_sysctl(&self, dotted: &str) -> String {
        self.hp.pod.sysctl(dotted)
    }
}

pub fn host_sysctl(rel: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/{rel}"))
        .unwrap()
        .trim_end()
        .to_string()
}

pub const KEEPALIVE: [(&str, &str); 3] = [
    ("net.ipv4.tcp_keepalive_time", "600"),
    ("net.ipv4.tcp_keepalive_intvl", "60"),
    ("net.ipv4.tcp_keepalive_probes", "5"),
];

pub fn keepalive() -> Value {
    let m: serde_json::Map<String, Value> = KEEPALIVE
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({ "sysctl": m })
}

pub fn nix_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim_end()
        .to_string()
}

pub fn conf_for(e: &Env) -> Value {
    e.conf("1.0.0", keepalive())
}

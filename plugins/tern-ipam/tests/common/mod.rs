//! Shared helpers: run tern-ipam or Debian's host-local as a runtime does (env + stdin), on a
//! throwaway `dataDir`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tern_testkit::exec::{bin_dir, ref_plugin_dir, PluginCall, RunOutput};

/// A plugin under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ipam {
    Tern,
    HostLocal,
}

impl Ipam {
    pub fn path(self) -> PathBuf {
        let p = match self {
            Ipam::Tern => bin_dir().join("tern-ipam"),
            Ipam::HostLocal => ref_plugin_dir().join("host-local"),
        };
        assert!(
            p.is_file(),
            "{} missing: run `cargo build --release -p tern-ipam` (or set TERN_BIN_DIR / TERN_REF_PLUGINS)",
            p.display()
        );
        p
    }
}

/// A network config with `ipam` and the given `cniVersion`; `dataDir` is filled in by [`Net`].
pub fn conf(version: &str, name: &str, ipam: Value) -> Value {
    json!({"cniVersion": version, "name": name, "type": "ptp", "ipam": ipam})
}

/// A throwaway data dir and network name.
pub struct Net {
    pub tmp: tempfile::TempDir,
    pub name: String,
}

impl Net {
    pub fn new() -> Net {
        Net {
            tmp: tempfile::tempdir().expect("tempdir"),
            name: "testnet".into(),
        }
    }

    pub fn data_dir(&self) -> &Path {
        self.tmp.path()
    }

    /// `<dataDir>/<name>`.
    pub fn dir(&self) -> PathBuf {
        self.tmp.path().join(&self.name)
    }

    /// `conf` with `ipam.dataDir` pointing here and `name` set.
    pub fn conf(&self, version: &str, mut ipam: Value) -> Value {
        ipam["dataDir"] = json!(self.data_dir());
        ipam.as_object_mut()
            .expect("ipam object")
            .entry("type")
            .or_insert(json!("tern-ipam"));
        conf(version, &self.name, ipam)
    }

    /// Lease files: (file name, content), sorted; `lock`, `last_reserved_ip.*` and temp files
    /// excluded.
    pub fn leases(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = fs::read_dir(self.dir())
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| {
                        let n = e.file_name().into_string().ok()?;
                        if n == "lock" || n.starts_with("last_reserved_ip.") || n.starts_with('.') {
                            return None;
                        }
                        Some((n, fs::read_to_string(e.path()).ok()?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Every file name in the network dir, sorted.
    pub fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.dir())
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

/// One invocation.
pub struct Call<'a> {
    pub ipam: Ipam,
    pub cmd: &'a str,
    pub id: &'a str,
    pub ifname: &'a str,
    pub args: Option<&'a str>,
}

impl<'a> Call<'a> {
    pub fn new(ipam: Ipam, cmd: &'a str, id: &'a str) -> Call<'a> {
        Call {
            ipam,
            cmd,
            id,
            ifname: "eth0",
            args: None,
        }
    }

    pub fn ifname(mut self, ifname: &'a str) -> Self {
        self.ifname = ifname;
        self
    }

    pub fn args(mut self, args: &'a str) -> Self {
        self.args = Some(args);
        self
    }

    pub fn plugin_call(&self, conf: &Value) -> PluginCall {
        let mut c = PluginCall::new(self.ipam.path().to_str().expect("utf-8 path"), self.cmd)
            .container_id(self.id)
            .ifname(self.ifname)
            // host-local never opens the netns; a path that does not exist is not "our own".
            .netns("/var/run/netns/tern-ipam-test-absent")
            // tern-lookup (usePodCidr's node read) is found there.
            .path(&bin_dir().display().to_string())
            .netconf(conf)
            .expect("serialize conf");
        if let Some(a) = self.args {
            c = c.args(a);
        }
        c
    }

    pub fn run(&self, conf: &Value) -> RunOutput {
        self.plugin_call(conf).run().expect("run plugin")
    }
}

pub fn add(ipam: Ipam, id: &str, conf: &Value) -> RunOutput {
    Call::new(ipam, "ADD", id).run(conf)
}

pub fn del(ipam: Ipam, id: &str, conf: &Value) -> RunOutput {
    Call::new(ipam, "DEL", id).run(conf)
}

/// ADD that must succeed; returns the addresses of the result.
pub fn add_ok(ipam: Ipam, id: &str, conf: &Value) -> Vec<String> {
    let o = add(ipam, id, conf);
    assert!(o.success(), "{ipam:?} ADD {id}: {}", o.describe());
    addresses(&o)
}

pub fn addresses(o: &RunOutput) -> Vec<String> {
    o.json
        .as_ref()
        .and_then(|j| j["ips"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|ip| ip["address"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// What an outcome means, comparable across the two plugins: the result without `cniVersion`
/// (an absent `dns` read as `{}`), or the error message (codes differ by design: host-local says
/// 999 for everything).
pub fn outcome(o: &RunOutput) -> Value {
    match &o.json {
        Some(j) if o.success() => {
            let mut j = j.clone();
            if let Some(m) = j.as_object_mut() {
                m.entry("dns").or_insert(json!({}));
            }
            j
        }
        Some(j) => json!({"error": j["msg"]}),
        None if o.success() => json!("success, no output"),
        None => json!({"error": "no JSON", "stdout": o.stdout_str()}),
    }
}

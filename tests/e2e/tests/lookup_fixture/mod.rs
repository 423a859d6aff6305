//! The pod lookup's fixture: the API server stand-in listening inside a fake host netns, tern's
//! binary run there as a runtime execs it, with a kubeconfig for the stand-in.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tern_apiserver::ApiServer;
use tern_net::netns::NetNs;
use tern_testkit::exec::{bin_dir, ref_plugin_dir};
use tern_testkit::netns::HostAndPod;

/// Lookup deadline configured in the netconf for these tests.
pub const DEADLINE: Duration = Duration::from_secs(2);

/// Slack above the deadline for process start, IPAM and netlink work.
pub const SLACK: Duration = Duration::from_millis(1500);

pub struct Fixture {
    pub api: Option<ApiServer>,
    pub hp: HostAndPod,
    pub dir: tempfile::TempDir,
}

/// Stops the stand-in from inside the fake host netns: its shutdown connects to its own
/// loopback address, which exists only there.
pub fn stop_in_netns(hp: &HostAndPod, api: ApiServer) {
    let _ = NetNs::open(hp.host.path()).map(|ns| ns.run_in(move || drop(api)));
}

pub struct Outcome {
    pub ok: bool,
    pub json: Value,
    pub elapsed: Duration,
    pub stderr: String,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(api) = self.api.take() {
            stop_in_netns(&self.hp, api);
        }
    }
}

impl Fixture {
    pub fn new(tag: &str) -> Fixture {
        let hp = HostAndPod::new(tag);
        // The stand-in's sockets belong to the fake host netns, where the plugin runs.
        let api = NetNs::open(hp.host.path())
            .unwrap()
            .run_in(ApiServer::start)
            .unwrap()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let token = api.issue_token("kube-system", "tern-cni", 3600);
        let kubeconfig = tern_kube::kubeconfig::render(
            &api.url(),
            api.ca_pem().as_bytes(),
            &tern_kube::token::BearerToken::new(token),
        );
        std::fs::write(dir.path().join("kubeconfig"), kubeconfig).unwrap();
        Fixture {
            api: Some(api),
            hp,
            dir,
        }
    }

    pub fn api(&self) -> &ApiServer {
        self.api.as_ref().expect("stand-in running")
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn netconf(&self) -> Value {
        json!({
            "cniVersion": "1.0.0",
            "name": "kubenet",
            "type": "tern",
            "stateDir": self.path("state"),
            "agentSocket": self.path("agent.sock"),
            "kubernetes": {
                "kubeconfig": self.path("kubeconfig"),
                "lookupTimeoutSeconds": DEADLINE.as_secs_f64()
            },
            "ipam": {
                "type": "host-local",
                "dataDir": self.path("ipam"),
                "ranges": [[{"subnet": "10.98.0.0/24"}]]
            }
        })
    }

    /// Runs tern as a runtime does, in the fake host netns.
    pub fn run(&self, command: &str, cid: &str, pod: &Path, args: &str) -> Outcome {
        let path = format!("{}:{}", bin_dir().display(), ref_plugin_dir().display());
        self.run_with(command, cid, pod, args, &path, &self.netconf())
    }

    /// [`Fixture::run`] with another `CNI_PATH` and netconf.
    pub fn run_with(
        &self,
        command: &str,
        cid: &str,
        pod: &Path,
        args: &str,
        cni_path: &str,
        conf: &Value,
    ) -> Outcome {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.hp.host.name()])
            .arg(bin_dir().join("tern"))
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", cid)
            .env("CNI_NETNS", pod)
            .env("CNI_IFNAME", "eth0")
            .env("CNI_ARGS", args)
            .env("CNI_PATH", cni_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if command == "STATUS" {
            // As libcni runs STATUS: no attachment variables.
            for v in ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS"] {
                cmd.env_remove(v);
            }
        }
        let mut child = cmd.spawn().unwrap();
        let start = Instant::now();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&serde_json::to_vec(conf).unwrap())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        Outcome {
            ok: out.status.success(),
            json: serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
            elapsed: start.elapsed(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub fn pod_args(name: &str, uid: &str) -> String {
        format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={name};K8S_POD_INFRA_CONTAINER_ID=x;K8S_POD_UID={uid}")
    }

    /// Nothing of attachment `cid` is left: no tern veth, no route into 10.98.0.0/24, no lease,
    /// no state file.
    pub fn assert_nothing_left(&self, cid: &str) {
        let veth = host_veth_name(cid);
        assert!(
            !self.hp.host.has_link(&veth),
            "host veth {veth} of {cid} left"
        );
        let routes = self.hp.host.ip(&["route", "show"]);
        assert!(
            !routes.contains(&veth),
            "host route via {veth} left: {routes}"
        );
        let leases: Vec<String> = std::fs::read_dir(self.path("ipam/kubenet"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("10.98."))
                    .collect()
            })
            .unwrap_or_default();
        for l in &leases {
            let owner = std::fs::read_to_string(self.path("ipam/kubenet").join(l)).unwrap();
            assert!(!owner.starts_with(cid), "lease {l} of {cid} left");
        }
        let state = self.path("state/kubenet").join(format!("{cid}_eth0.json"));
        assert!(!state.exists(), "state file left: {}", state.display());
    }
}

/// tern's host veth name for `cid` on eth0 (DESIGN.md).
pub fn host_veth_name(cid: &str) -> String {
    tern_testkit::tern_host_veth(cid, "eth0")
}

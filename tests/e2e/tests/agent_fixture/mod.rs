//! The agent tiers' fixture: a node whose fake host netns runs the API server stand-in and a real
//! `tern-agent run` process with in-cluster credentials (`KUBERNETES_SERVICE_HOST`/`_PORT`, a
//! service-account dir with a `token` issued by the stand-in, `ca.crt`, `namespace`), chain C0
//! with a pod lookup through the agent's kubeconfig and socket.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tern_apiserver::ApiServer;
use tern_net::netns::NetNs;
use tern_testkit::exec::bin_dir;

use crate::common::{files_under, host_veth, InCluster, Node};

pub const NS: &str = "tern";
pub const TOKEN_PATH: &str = "/api/v1/namespaces/tern/serviceaccounts/tern-cni/token";

/// A node with the stand-in and (when started) the agent inside its fake host netns.
pub struct Cluster {
    pub node: Node,
    api: Option<ApiServer>,
    pub agent: Option<Child>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut a) = self.agent.take() {
            let _ = a.kill();
            let _ = a.wait();
        }
        if let Some(api) = self.api.take() {
            let _ = NetNs::open(self.node.host.path()).map(|ns| ns.run_in(move || drop(api)));
        }
    }
}

impl Cluster {
    /// C0 with a pod lookup (`deadline` in seconds) through the agent's kubeconfig and socket.
    pub fn new(tag: &str, deadline: f64) -> Cluster {
        let node = Node::new(tag);
        let api = NetNs::open(node.host.path())
            .unwrap()
            .run_in(ApiServer::start)
            .unwrap()
            .unwrap();
        api.add_service_account(NS, "tern-cni");
        let mut c = Cluster {
            node,
            api: Some(api),
            agent: None,
        };
        let sa = c.dir("sa");
        std::fs::create_dir_all(&sa).unwrap();
        c.api().write_ca(&sa.join("ca.crt")).unwrap();
        std::fs::write(sa.join("namespace"), NS).unwrap();
        c.renew_agent_token();
        std::fs::create_dir_all(c.dir("net.d")).unwrap();
        let mut list = c.node.c0("1.0.0");
        list["plugins"][0]["kubernetes"] = json!({
            "kubeconfig": c.kubeconfig(),
            "lookupTimeoutSeconds": deadline,
        });
        list["plugins"][0]["agentSocket"] = json!(c.socket());
        c.node.tool.write_conflist(&list).unwrap();
        c
    }

    pub fn api(&self) -> &ApiServer {
        self.api.as_ref().unwrap()
    }

    pub fn dir(&self, name: &str) -> PathBuf {
        self.node.tool.scratch().join("k8s").join(name)
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir("net.d/tern-kubeconfig")
    }

    pub fn socket(&self) -> PathBuf {
        self.dir("run/agent.sock")
    }

    /// What the kubelet does: (re)write the agent's projected token.
    pub fn renew_agent_token(&self) {
        let t = self.api().issue_token(NS, "tern-agent", 30 * 86_400);
        std::fs::write(self.dir("sa/token"), t).unwrap();
    }

    pub fn token_requests(&self) -> usize {
        self.api().count(TOKEN_PATH)
    }

    /// Starts `tern-agent run` in the fake host netns and waits for its start-up refresh.
    pub fn start_agent(&mut self) {
        let addr = self.api().addr();
        let log = std::fs::File::create(self.node.tool.scratch().join("agent.log")).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", self.node.host.name()])
            .arg(bin_dir().join("tern-agent"))
            .arg("run")
            .args(["--sa-dir", self.dir("sa").to_str().unwrap()])
            .args(["--kubeconfig", self.kubeconfig().to_str().unwrap()])
            .args(["--socket", self.socket().to_str().unwrap()])
            .arg("--metrics-socket")
            .arg(self.dir("run/metrics.sock"))
            .args(["--listen", "127.0.0.1:0", "--request-timeout", "60s"])
            .in_cluster(addr)
            .env("TERN_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.agent = Some(child);
        let t0 = Instant::now();
        while !(self.kubeconfig().exists() && self.socket().exists()) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "agent did not write the kubeconfig; log:\n{}",
                self.agent_log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(self.token_requests(), 1, "start-up TokenRequests");
    }

    pub fn agent_log(&self) -> String {
        std::fs::read_to_string(self.node.tool.scratch().join("agent.log")).unwrap_or_default()
    }

    /// The token in the CNI kubeconfig.
    pub fn cni_token(&self) -> String {
        tern_kube::kubeconfig::load(&self.kubeconfig())
            .unwrap()
            .token
            .expose()
            .to_owned()
    }

    /// Registers pod `name` (UID `uid-<name>`) and points libcni at it with container ID `cid-<name>`.
    pub fn use_pod(&mut self, name: &str) {
        self.api()
            .set_pod("default", name, &format!("uid-{name}"), &[], false);
        self.node.tool.container_id(&format!("cid-{name}"));
        self.node.tool.cni_args(Some(&pod_args(name)));
    }

    /// Statuses the stand-in answered for GETs of pod `name`, in order.
    pub fn pod_statuses(&self, name: &str) -> Vec<u16> {
        let path = format!("/api/v1/namespaces/default/pods/{name}");
        self.api()
            .requests()
            .iter()
            .filter(|r| r.path == path)
            .map(|r| r.status)
            .collect()
    }
}

pub fn pod_args(name: &str) -> String {
    format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={name};K8S_POD_INFRA_CONTAINER_ID=cid-{name};K8S_POD_UID=uid-{name}")
}

/// Nothing of attachment `cid` on the node: no veth, no state, no backup, no lease.
pub fn assert_attachment_gone(node: &Node, cid: &str) {
    assert!(
        !node.host.has_link(&host_veth(cid, "eth0")),
        "veth of {cid} left"
    );
    for f in node
        .state_files()
        .into_iter()
        .chain(files_under(&node.tuning_dir()))
    {
        assert!(
            !f.to_string_lossy().contains(cid),
            "state of {cid} left: {}",
            f.display()
        );
    }
    for f in files_under(&node.data_dir()) {
        let owner = std::fs::read_to_string(&f).unwrap_or_default();
        assert!(
            !owner.starts_with(cid),
            "lease {} of {cid} left",
            f.display()
        );
    }
}

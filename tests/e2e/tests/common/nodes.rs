//! Fixtures of the multi-node agent tests (`node_routes`, `node_routes_vxlan`): a node netns
//! running the real `tern-agent run` binary against the API server stand-in, and the stand-in
//! itself, started and stopped inside the netns that holds its address.
//!
//! Invariant: dropping a node kills its agent and deletes its pod; the stand-in shuts down from
//! inside its netns (its shutdown connects to its own address, which only exists there).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tern_apiserver::ApiServer;
use tern_net::netns::NetNs;
use tern_testkit::exec::{bin_dir, Cnitool};
use tern_testkit::netns::TestNetns;

/// How long [`wait_for`] waits.
pub const WAIT: Duration = Duration::from_secs(20);

/// Polls `cond` every 50 ms until it holds; panics after [`WAIT`] naming `what`.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < WAIT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A node: its netns, its agent (while running), its files (service account, kubeconfig,
/// sockets, `agent.log`) and its pod (netns and the libcni driver that wired it).
pub struct NodeNs {
    /// The Node's `metadata.name` (`--node-name`).
    pub name: String,
    /// The node's netns.
    pub ns: TestNetns,
    /// The running agent.
    pub agent: Option<Child>,
    /// The agent's files.
    pub dir: tempfile::TempDir,
    /// The pod wired on this node, if any.
    pub pod: Option<(TestNetns, Cnitool)>,
}

impl Drop for NodeNs {
    fn drop(&mut self) {
        self.stop_agent();
        if let Some((pod, tool)) = self.pod.take() {
            let _ = tool.del(pod.path());
        }
    }
}

impl NodeNs {
    /// A node named `name` in `ns`, with no agent and no pod yet.
    pub fn new(name: String, ns: TestNetns) -> NodeNs {
        NodeNs {
            name,
            ns,
            agent: None,
            dir: tempfile::tempdir().unwrap(),
            pod: None,
        }
    }

    /// Kills the agent, if one runs.
    pub fn stop_agent(&mut self) {
        if let Some(mut a) = self.agent.take() {
            let _ = a.kill();
            let _ = a.wait();
        }
    }

    /// (Re)starts `tern-agent run` in the node's netns with a fresh service-account token of
    /// `api`, reaching it at `api_ip` (IPv4 or IPv6), a short back-off (100 ms to 500 ms),
    /// `--node-name` and then `flags`; its stderr is appended to `agent.log`.
    pub fn spawn_agent(&mut self, api: &ApiServer, api_ip: &str, flags: &[&str]) {
        self.stop_agent();
        let sa = self.dir.path().join("sa");
        std::fs::create_dir_all(&sa).unwrap();
        std::fs::write(
            sa.join("token"),
            api.issue_token("tern", "tern-agent", 86_400),
        )
        .unwrap();
        api.write_ca(&sa.join("ca.crt")).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("agent.log"))
            .unwrap();
        let d = self.dir.path();
        let host = if api_ip.contains(':') {
            format!("[{api_ip}]")
        } else {
            api_ip.to_owned()
        };
        let child = Command::new("ip")
            .args(["netns", "exec", self.ns.name()])
            .arg(bin_dir().join("tern-agent"))
            .args(["run", "--api-server"])
            .arg(format!("https://{host}:{}", api.addr().port()))
            .arg("--sa-dir")
            .arg(&sa)
            .args(["--namespace", "tern", "--kubeconfig"])
            .arg(d.join("kubeconfig"))
            .arg("--socket")
            .arg(d.join("run/agent.sock"))
            .arg("--metrics-socket")
            .arg(d.join("run/metrics.sock"))
            .args(["--backoff-base", "100ms", "--backoff-cap", "500ms"])
            .args(["--node-name", &self.name])
            .args(flags)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.agent = Some(child);
    }

    /// The agent's stderr so far (every run of it).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default()
    }

    /// The value of one metric line (`name` or `name{labels}`) from the agent's `/metrics`;
    /// `None` when the agent does not answer or has no such line.
    pub fn try_metric(&self, series: &str) -> Option<u64> {
        let out = self
            .ns
            .exec(&["curl", "-s", "http://127.0.0.1:9412/metrics"]);
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    }

    /// As [`NodeNs::try_metric`]; panics with the agent's log when the line is missing.
    pub fn metric(&self, series: &str) -> u64 {
        self.try_metric(series)
            .unwrap_or_else(|| panic!("{series} not in /metrics of {}:\n{}", self.name, self.log()))
    }

    /// The pod's netns; panics when no pod was wired.
    pub fn pod(&self) -> &TestNetns {
        &self.pod.as_ref().unwrap().0
    }

    /// One ping (1 s deadline) from the pod to `ip`: true when answered.
    pub fn ping(&self, ip: &str) -> bool {
        self.pod()
            .exec(&["ping", "-c1", "-W1", ip])
            .status
            .success()
    }
}

/// The API server stand-in listening inside a netns, stopped from inside it.
pub struct NsApi {
    api: Option<ApiServer>,
    ns: NetNs,
}

impl NsApi {
    /// Starts the stand-in on `bind` (port 0: any) inside `netns`.
    pub fn start(netns: &TestNetns, bind: SocketAddr) -> NsApi {
        let ns = NetNs::open(netns.path()).unwrap();
        let api = ns.run_in(|| ApiServer::start_on(bind)).unwrap().unwrap();
        NsApi { api: Some(api), ns }
    }

    /// The running stand-in; panics after [`NsApi::stop`].
    pub fn api(&self) -> &ApiServer {
        self.api.as_ref().unwrap()
    }

    /// Shuts the stand-in down (from inside its netns); a second call does nothing.
    pub fn stop(&mut self) {
        if let Some(api) = self.api.take() {
            let _ = self.ns.run_in(move || drop(api));
        }
    }
}

impl Drop for NsApi {
    fn drop(&mut self) {
        self.stop();
    }
}

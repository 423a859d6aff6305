//! The pod lookup's token refresh with a real `tern-agent run` process: chain C0 with a pod lookup, driven
//! through libcni, the agent and the API server stand-in all in one fake host netns (the
//! stand-in's loopback address exists only there). The agent gets in-cluster credentials as in a
//! pod: `KUBERNETES_SERVICE_HOST`/`_PORT` and a service-account dir (`token` issued by the
//! stand-in, `ca.crt`, `namespace`); it writes the CNI kubeconfig tern reads.
//!
//! - the signing key rotates: the next ADD gets 401, the agent refreshes, the retry succeeds;
//! - the agent is down (killed, its socket left stale) and the token expired: ADD fails with
//!   code 11 within its deadline, leaving nothing of it; DEL of an earlier pod succeeds;
//! - 50 parallel ADDs that all see 401 (the TokenRequest is held until all 50 have their 401)
//!   cause exactly one TokenRequest, and all succeed.
//!
//! `tern-agent install` (binaries, kubeconfig, conflist into a scratch root; a tuning key outside
//! the allowlist refused with the previous conflist left in place) is covered by
//! agent/tests/install.rs (`installs_binaries_kubeconfig_and_conflist`,
//! `refuses_a_tuning_key_outside_the_allowlist_and_keeps_the_previous_conflist`,
//! `the_binary_installs_from_flags_and_environment`); [`installed_conflist_wires_a_pod`] here adds
//! what those cannot: the installed files, used as a runtime would, wire a pod.
//! Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tern_apiserver::{ApiServer, Fault};
use tern_net::netns::NetNs;
use tern_testkit::exec::bin_dir;
use tern_testkit::netns::TestNetns;

const NS: &str = "tern";
const TOKEN_PATH: &str = "/api/v1/namespaces/tern/serviceaccounts/tern-cni/token";

/// A node with the stand-in and (when started) the agent inside its fake host netns.
struct Cluster {
    node: Node,
    api: Option<ApiServer>,
    agent: Option<Child>,
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
    fn new(tag: &str, deadline: f64) -> Cluster {
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

    fn api(&self) -> &ApiServer {
        self.api.as_ref().unwrap()
    }

    fn dir(&self, name: &str) -> PathBuf {
        self.node.tool.scratch().join("k8s").join(name)
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir("net.d/tern-kubeconfig")
    }

    fn socket(&self) -> PathBuf {
        self.dir("run/agent.sock")
    }

    /// What the kubelet does: (re)write the agent's projected token.
    fn renew_agent_token(&self) {
        let t = self.api().issue_token(NS, "tern-agent", 30 * 86_400);
        std::fs::write(self.dir("sa/token"), t).unwrap();
    }

    fn token_requests(&self) -> usize {
        self.api().count(TOKEN_PATH)
    }

    /// Starts `tern-agent run` in the fake host netns and waits for its start-up refresh.
    fn start_agent(&mut self) {
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
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("KUBERNETES_SERVICE_HOST", addr.ip().to_string())
            .env("KUBERNETES_SERVICE_PORT", addr.port().to_string())
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

    fn agent_log(&self) -> String {
        std::fs::read_to_string(self.node.tool.scratch().join("agent.log")).unwrap_or_default()
    }

    /// The token in the CNI kubeconfig.
    fn cni_token(&self) -> String {
        tern_kube::kubeconfig::load(&self.kubeconfig())
            .unwrap()
            .token
            .expose()
            .to_owned()
    }

    /// Registers pod `name` (UID `uid-<name>`) and points libcni at it with container ID `cid-<name>`.
    fn use_pod(&mut self, name: &str) {
        self.api()
            .set_pod("default", name, &format!("uid-{name}"), &[], false);
        self.node.tool.container_id(&format!("cid-{name}"));
        self.node.tool.cni_args(Some(&pod_args(name)));
    }

    /// Statuses the stand-in answered for GETs of pod `name`, in order.
    fn pod_statuses(&self, name: &str) -> Vec<u16> {
        let path = format!("/api/v1/namespaces/default/pods/{name}");
        self.api()
            .requests()
            .iter()
            .filter(|r| r.path == path)
            .map(|r| r.status)
            .collect()
    }
}

fn pod_args(name: &str) -> String {
    format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={name};K8S_POD_INFRA_CONTAINER_ID=cid-{name};K8S_POD_UID=uid-{name}")
}

/// Nothing of attachment `cid` on the node: no veth, no state, no backup, no lease.
fn assert_attachment_gone(node: &Node, cid: &str) {
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

/// The signing key rotates: the next ADD through libcni gets 401, asks the agent, which makes one
/// TokenRequest and rewrites the kubeconfig; tern re-reads it and the retried GET succeeds.
#[test]
fn key_rotation_401_then_agent_refresh_then_retry_succeeds() {
    let mut c = Cluster::new("agrot", 5.0);
    c.start_agent();
    let pa = c.node.pod("agrota");
    c.use_pod("web-a");
    let add_a = c.node.tool.add(pa.path()).unwrap();
    ok(&add_a, "ADD before the rotation");
    assert_eq!(c.pod_statuses("web-a"), vec![200]);
    let token_before = c.cni_token();

    c.api().rotate_signing_key();
    c.renew_agent_token(); // the kubelet re-projects the agent's own token after a rotation
    let pb = c.node.pod("agrotb");
    c.use_pod("web-b");
    let add_b = c.node.tool.add(pb.path()).unwrap();
    ok(&add_b, "ADD after the rotation");
    assert_eq!(
        c.pod_statuses("web-b"),
        vec![401, 200],
        "expected one 401, then the retry's 200"
    );
    assert_eq!(c.token_requests(), 2, "start-up + exactly one refresh");
    assert_ne!(c.cni_token(), token_before, "kubeconfig not rewritten");
    assert!(pb.has_link("eth0"), "pod b not wired");
    assert_eq!(keepalive_of(&pb)[0], KEEPALIVE[0].1, "pod b not tuned");

    ok(&c.node.tool.del(pb.path()).unwrap(), "DEL b");
    c.node.tool.container_id("cid-web-a");
    ok(&c.node.tool.del(pa.path()).unwrap(), "DEL a");
    let mut addrs = result_addrs(add_a.json.as_ref().unwrap());
    addrs.extend(result_addrs(add_b.json.as_ref().unwrap()));
    c.node.assert_nothing_left(&addrs);
}

/// The agent is down (SIGKILLed: its socket file is left, nobody listens) and the token in the
/// kubeconfig has expired: ADD fails with code 11 within its deadline, naming the kubeconfig and
/// the socket, and leaves nothing of itself; DEL of a pod added earlier succeeds at once.
#[test]
fn agent_down_and_token_expired_add_fails_11_del_succeeds() {
    let deadline = Duration::from_secs(2);
    let mut c = Cluster::new("agdown", deadline.as_secs_f64());
    c.start_agent();
    let early = c.node.pod("agdowne");
    c.use_pod("early");
    let add = c.node.tool.add(early.path()).unwrap();
    ok(&add, "ADD while the agent runs");

    let mut agent = c.agent.take().unwrap();
    kill(
        Pid::from_raw(i32::try_from(agent.id()).unwrap()),
        Signal::SIGKILL,
    )
    .unwrap();
    agent.wait().unwrap();
    assert!(c.socket().exists(), "a killed agent leaves its socket file");
    // The token the dead agent last wrote expires: an expired one in its place (issued an hour
    // and a half ago for an hour), valid for nothing.
    c.api().advance_clock(-5400);
    let expired = c.api().issue_token(NS, "tern-cni", 3600);
    c.api().advance_clock(5400);
    let kc = tern_kube::kubeconfig::render(
        &c.api().url(),
        c.api().ca_pem().as_bytes(),
        &tern_kube::token::BearerToken::new(expired),
    );
    std::fs::write(c.kubeconfig(), kc).unwrap();
    let tokens = c.token_requests();

    let late = c.node.pod("agdownl");
    c.use_pod("late");
    let t0 = Instant::now();
    let out = c.node.tool.add(late.path()).unwrap();
    let took = t0.elapsed();
    failed_with(
        &out,
        11,
        &c.kubeconfig().display().to_string(),
        "ADD with the agent down",
    );
    failed_with(
        &out,
        11,
        &c.socket().display().to_string(),
        "ADD with the agent down",
    );
    assert!(
        took < deadline + Duration::from_millis(1500),
        "ADD took {took:?}, deadline {deadline:?}"
    );
    assert!(!late.has_link("eth0"), "late pod wired");
    assert_attachment_gone(&c.node, "cid-late");
    assert_eq!(
        c.token_requests(),
        tokens,
        "a TokenRequest without the agent?"
    );
    assert_eq!(
        c.api().count("/api/v1/namespaces/default/pods/late"),
        0,
        "an expired token was sent"
    );
    // libcni's DEL of the failed ADD, as a runtime does: succeeds.
    ok(
        &c.node.tool.del(late.path()).unwrap(),
        "DEL of the failed ADD",
    );

    c.node.tool.container_id("cid-early");
    c.node.tool.cni_args(Some(&pod_args("early")));
    let requests = c.api().requests().len();
    let t0 = Instant::now();
    let del = c.node.tool.del(early.path()).unwrap();
    ok(&del, "DEL of the earlier pod");
    assert!(t0.elapsed() < deadline, "DEL took {:?}", t0.elapsed());
    assert_eq!(
        c.api().requests().len(),
        requests,
        "DEL called the API server"
    );
    assert!(!early.has_link("eth0"));
    c.node
        .assert_nothing_left(&result_addrs(add.json.as_ref().unwrap()));
}

/// 50 parallel ADDs (50 pods) after a key rotation, the agent's TokenRequest held by the stand-in
/// until every one of the 50 got its 401: exactly one TokenRequest, and all 50 succeed on retry.
#[test]
fn fifty_parallel_adds_that_all_see_401_cause_one_token_request() {
    const N: usize = 50;
    let mut c = Cluster::new("ag50", 30.0);
    c.start_agent();
    let pods: Vec<TestNetns> = (0..N).map(|i| c.node.pod(&format!("ag50-{i}"))).collect();
    for i in 0..N {
        c.api().set_pod(
            "default",
            &format!("p{i}"),
            &format!("uid-p{i}"),
            &[],
            false,
        );
    }
    c.api().rotate_signing_key();
    c.renew_agent_token();
    c.api().set_fault_on(TOKEN_PATH, Fault::Hold);

    let children: Vec<Child> = pods
        .iter()
        .enumerate()
        .map(|(i, pod)| {
            c.node.tool.container_id(&format!("cid-p{i}"));
            c.node.tool.cni_args(Some(&pod_args(&format!("p{i}"))));
            let mut cmd = c.node.tool.command("add", Some(&pod.path()));
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    let unauthorized = |c: &Cluster| {
        c.api()
            .requests()
            .iter()
            .filter(|r| r.path.contains("/pods/p") && r.status == 401)
            .count()
    };
    let t0 = Instant::now();
    while unauthorized(&c) < N {
        assert!(
            t0.elapsed() < Duration::from_secs(25),
            "only {} of {N} ADDs got their 401",
            unauthorized(&c)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.token_requests(), 2, "one TokenRequest in flight (held)");
    c.api().set_fault(None);

    let mut addrs = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "ADD p{i}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        addrs.extend(result_addrs(&r));
    }
    assert_eq!(
        c.token_requests(),
        2,
        "start-up + exactly one refresh for 50 ADDs"
    );
    assert_eq!(unauthorized(&c), N);
    for i in 0..N {
        assert_eq!(c.pod_statuses(&format!("p{i}")), vec![401, 200], "pod p{i}");
    }
    let mut distinct = addrs.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), N, "addresses not distinct");

    for (i, pod) in pods.iter().enumerate() {
        c.node.tool.container_id(&format!("cid-p{i}"));
        ok(&c.node.tool.del(pod.path()).unwrap(), &format!("DEL p{i}"));
    }
    c.node.assert_nothing_left(&addrs);
}

/// `tern-agent install`, run as the init container would (in the fake host netns, in-cluster
/// credentials), into a scratch root from the real binaries: the conflist it renders (node
/// podCIDRs from the stand-in, the kubeconfig path filled) and the kubeconfig it writes (a token
/// from one TokenRequest) wire a pod through libcni with the pod lookup, and DEL leaves nothing.
#[test]
fn installed_conflist_wires_a_pod() {
    let mut c = Cluster::new("aginst", 5.0);
    c.api().set_node("node-9", &["10.99.0.0/24"]);
    let src = c.dir("image/bin");
    std::fs::create_dir_all(&src).unwrap();
    for b in ["tern", "tern-tuning", "tern-ipam", "tern-lookup"] {
        std::fs::copy(bin_dir().join(b), src.join(b)).unwrap();
    }
    let (bin, conf) = (c.dir("root/opt/cni/bin"), c.dir("root/etc/cni/net.d"));
    let template = json!({
        "cniVersion": "1.0.0",
        "name": "tern-__NODE_NAME__",
        "plugins": [
            {
                "type": "tern",
                "stateDir": c.node.state_dir(),
                "agentSocket": c.socket(),
                "kubernetes": {"kubeconfig": "__KUBECONFIG_FILEPATH__"},
                "ipam": {"type": "tern-ipam", "dataDir": c.node.data_dir(), "ranges": "__RANGES__"}
            },
            c.node.tuning(keepalive_sysctls()),
        ]
    })
    .to_string()
    .replace("\"__RANGES__\"", "__POD_CIDR_RANGES__");
    let addr = c.api().addr();
    let out = Command::new("ip")
        .args(["netns", "exec", c.node.host.name()])
        .arg(bin_dir().join("tern-agent"))
        .arg("install")
        .args(["--sa-dir", c.dir("sa").to_str().unwrap()])
        .args(["--src-bin-dir", src.to_str().unwrap()])
        .args(["--cni-bin-dir", bin.to_str().unwrap()])
        .args(["--cni-conf-dir", conf.to_str().unwrap()])
        .args(["--host-conf-dir", conf.to_str().unwrap()])
        .args(["--allowlist", c.dir("no-allowlist.conf").to_str().unwrap()])
        .args(["--pod-cidrs-from-node", "true"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("KUBERNETES_SERVICE_HOST", addr.ip().to_string())
        .env("KUBERNETES_SERVICE_PORT", addr.port().to_string())
        .env("TERN_CONFLIST_TEMPLATE", template)
        .env("NODE_NAME", "node-9")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "install: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(c.token_requests(), 1);
    assert_eq!(c.api().count("/api/v1/nodes/node-9"), 1);
    let list: Value =
        serde_json::from_slice(&std::fs::read(conf.join("10-tern.conflist")).unwrap()).unwrap();
    assert_eq!(list["name"], "tern-node-9");
    assert_eq!(
        list["plugins"][0]["ipam"]["ranges"],
        json!([[{"subnet": "10.99.0.0/24"}]])
    );
    let kc = conf.join("tern-kubeconfig");
    assert_eq!(list["plugins"][0]["kubernetes"]["kubeconfig"], json!(kc));

    c.node.tool.write_conflist(&list).unwrap();
    c.node.tool.cni_path(&format!(
        "{}:{}",
        bin.display(),
        tern_testkit::exec::ref_plugin_dir().display()
    ));
    let pod = c.node.pod("aginst");
    c.use_pod("installed");
    let add = c.node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD with the installed files");
    assert_eq!(
        c.pod_statuses("installed"),
        vec![200],
        "pod lookup with the installed kubeconfig"
    );
    assert_eq!(
        result_addrs(add.json.as_ref().unwrap()),
        Fam::V4.nth_addrs(0)
    );
    assert_eq!(keepalive_of(&pod)[0], KEEPALIVE[0].1);
    ok(&c.node.tool.check(pod.path()).unwrap(), "CHECK");
    ok(&c.node.tool.del(pod.path()).unwrap(), "DEL");
    c.node
        .assert_nothing_left(&result_addrs(add.json.as_ref().unwrap()));
}

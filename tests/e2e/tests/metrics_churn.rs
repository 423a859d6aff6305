//! The plugins' verb reports through a real `tern-agent run` and real libcni: a churn of pods
//! (ADD, CHECK, DEL of chain C0, some ADDs refused with code 7 for a bad `mtu`, DELed once the
//! configuration is fixed) and tern-ipam
//! run directly, then `/metrics` scraped on `--metrics-address` must count exactly what ran, per
//! plugin, verb and code, with histogram counts that agree; and the verbs succeed at full speed
//! when nothing is bound to the report socket, when the agent is stopped with its queue full, and
//! when it is dead with its socket left.
//!
//! The plugins send to the fixed `/run/tern/metrics.sock`: every libcni run here has a private
//! directory bind-mounted over `/run/tern` (`Cnitool::run_tern`), where the test's agent binds
//! `--metrics-socket`. The agent and the API server stand-in run in the node's host netns, so
//! the agent's loopback ports are its own. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;
use tern_apiserver::ApiServer;
use tern_net::netns::NetNs;
use tern_testkit::exec::{bin_dir, default_cni_path};

const NS: &str = "tern";
const METRICS: &str = "127.0.0.1:9413";

/// A node whose libcni runs see `run` as `/run/tern`, and a `tern-agent run` bound there.
struct AgentNode {
    node: Node,
    api: Option<ApiServer>,
    agent: Option<Child>,
}

impl Drop for AgentNode {
    fn drop(&mut self) {
        if let Some(mut a) = self.agent.take() {
            let _ = kill(Pid::from_raw(a.id() as i32), Signal::SIGCONT);
            let _ = a.kill();
            let _ = a.wait();
        }
        if let Some(api) = self.api.take() {
            let _ = NetNs::open(self.node.host.path()).map(|ns| ns.run_in(move || drop(api)));
        }
    }
}

impl AgentNode {
    fn new(tag: &str) -> AgentNode {
        let (mut node, _) = c0_node(tag);
        let run = node.tool.scratch().join("run-tern");
        std::fs::create_dir_all(&run).unwrap();
        node.tool.run_tern(Some(&run));
        AgentNode {
            node,
            api: None,
            agent: None,
        }
    }

    fn dir(&self, name: &str) -> PathBuf {
        self.node.tool.scratch().join(name)
    }

    fn socket(&self) -> PathBuf {
        self.dir("run-tern/metrics.sock")
    }

    /// Starts the stand-in and `tern-agent run` in the host netns; waits for its report socket.
    fn start_agent(&mut self) {
        let api = NetNs::open(self.node.host.path())
            .unwrap()
            .run_in(ApiServer::start)
            .unwrap()
            .unwrap();
        api.add_service_account(NS, "tern-cni");
        let sa = self.dir("sa");
        std::fs::create_dir_all(&sa).unwrap();
        api.write_ca(&sa.join("ca.crt")).unwrap();
        std::fs::write(sa.join("namespace"), NS).unwrap();
        std::fs::write(sa.join("token"), api.issue_token(NS, "tern-agent", 86_400)).unwrap();
        let addr = api.addr();
        self.api = Some(api);
        let log = std::fs::File::create(self.dir("agent.log")).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", self.node.host.name()])
            .arg(bin_dir().join("tern-agent"))
            .arg("run")
            .arg("--sa-dir")
            .arg(&sa)
            .arg("--kubeconfig")
            .arg(self.dir("tern-kubeconfig"))
            .arg("--socket")
            .arg(self.dir("agent/agent.sock"))
            .arg("--metrics-socket")
            .arg(self.socket())
            .args(["--listen", "127.0.0.1:9412"])
            .in_cluster(addr)
            .env("TERN_METRICS_ADDRESS", METRICS)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.agent = Some(child);
        let t0 = Instant::now();
        while self.scrape().is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "agent not serving; log:\n{}",
                std::fs::read_to_string(self.dir("agent.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(self.socket().exists());
    }

    fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.agent.as_ref().unwrap().id() as i32), sig).unwrap();
    }

    /// `/metrics` from the metrics address, inside the host netns.
    fn scrape(&self) -> Option<String> {
        NetNs::open(self.node.host.path())
            .unwrap()
            .run_in(|| {
                use std::io::{Read as _, Write as _};
                let mut c = std::net::TcpStream::connect(METRICS).ok()?;
                c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
                write!(
                    c,
                    "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                )
                .ok()?;
                let mut s = String::new();
                c.read_to_string(&mut s).ok()?;
                s.starts_with("HTTP/1.1 200")
                    .then(|| s.split_once("\r\n\r\n").map(|x| x.1.to_owned()))
                    .flatten()
            })
            .unwrap()
    }
}

/// The samples of `family` (`name{labels}` -> value) in `text`.
fn samples(text: &str, family: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_owned(), v.parse().unwrap()))
        .collect()
}

fn verb_key(plugin: &str, verb: &str, code: u32) -> String {
    format!("tern_cni_verb_total{{plugin=\"{plugin}\",verb=\"{verb}\",code=\"{code}\"}}")
}

/// The tern netconf of chain C0 with `mtu` out of range: ADD is refused with code 7.
fn bad_mtu_list(node: &Node) -> serde_json::Value {
    let mut list = node.c0("1.0.0");
    list["plugins"][0]["mtu"] = json!(70_000);
    list
}

#[test]
fn metrics_count_a_churn_of_pods_exactly() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut n = AgentNode::new("vm");
    n.start_agent();
    let pods = 8;
    let checked = 3;
    let refused = 3;
    let mut addrs = Vec::new();
    for i in 0..pods {
        let p = n.node.pod(&format!("vm{i}"));
        n.node.tool.container_id(&format!("vm-pod-{i}"));
        let out = n.node.tool.add(p.path()).unwrap();
        ok(&out, "ADD");
        addrs.extend(result_addrs(out.json.as_ref().unwrap()));
        if i < checked {
            ok(&n.node.tool.check(p.path()).unwrap(), "CHECK");
        }
        ok(&n.node.tool.del(p.path()).unwrap(), "DEL");
    }
    let good = n.node.c0("1.0.0");
    n.node.tool.write_conflist(&bad_mtu_list(&n.node)).unwrap();
    let bad_pods: Vec<_> = (0..refused)
        .map(|i| n.node.pod(&format!("vmbad{i}")))
        .collect();
    for (i, p) in bad_pods.iter().enumerate() {
        n.node.tool.container_id(&format!("vm-bad-{i}"));
        failed_with(
            &n.node.tool.add(p.path()).unwrap(),
            7,
            "mtu",
            "ADD, mtu 70000",
        );
    }
    // The runtime's DEL after a failed ADD, once the configuration is fixed.
    n.node.tool.write_conflist(&good).unwrap();
    for (i, p) in bad_pods.iter().enumerate() {
        n.node.tool.container_id(&format!("vm-bad-{i}"));
        ok(
            &n.node.tool.del(p.path()).unwrap(),
            "DEL after a refused ADD",
        );
    }
    n.node.assert_nothing_left(&addrs);
    // tern-ipam exec'd as a runtime would (tern runs it in-process, so it reports only when
    // exec'd): one ADD and DEL, and an ADD refused for a range that is not a subnet.
    let pod = n.node.pod("vmipam");
    let ipam = |conf: &serde_json::Value, cmd: &str| {
        n.node
            .call("tern-ipam", cmd)
            .run_tern(n.dir("run-tern"))
            .container_id("vm-ipam")
            .netns(pod.path())
            .ifname("eth0")
            .path(&default_cni_path())
            .netconf(conf)
            .unwrap()
            .run()
            .unwrap()
    };
    let mut conf = json!({"cniVersion": "1.0.0", "name": "c0", "type": "tern",
        "ipam": {"type": "tern-ipam", "ranges": [[{"subnet": "10.99.1.0/24"}]],
                 "dataDir": n.dir("ipam-direct")}});
    ok(&ipam(&conf, "ADD"), "tern-ipam ADD");
    ok(&ipam(&conf, "DEL"), "tern-ipam DEL");
    conf["ipam"]["ranges"] = json!([[{"subnet": "not-a-subnet"}]]);
    let bad = ipam(&conf, "ADD");
    let bad_code = u32::try_from(bad.json.as_ref().unwrap()["code"].as_u64().unwrap()).unwrap();
    assert!(
        !bad.status.success() && [6, 7].contains(&bad_code),
        "{bad:?}"
    );

    let (p, r) = (pods as u64, refused as u64);
    let c = checked as u64;
    let want: BTreeMap<String, u64> = [
        (verb_key("tern", "ADD", 0), p),
        (verb_key("tern", "ADD", 7), r),
        (verb_key("tern", "CHECK", 0), c),
        (verb_key("tern", "DEL", 0), p + r),
        (verb_key("tern-tuning", "ADD", 0), p),
        (verb_key("tern-tuning", "CHECK", 0), c),
        (verb_key("tern-tuning", "DEL", 0), p + r),
        (verb_key("tern-ipam", "ADD", 0), 1),
        (verb_key("tern-ipam", "ADD", bad_code), 1),
        (verb_key("tern-ipam", "DEL", 0), 1),
    ]
    .into_iter()
    .collect();
    let mut text = String::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        text = n.scrape().unwrap();
        if samples(&text, "tern_cni_verb_total") == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(samples(&text, "tern_cni_verb_total"), want, "in:\n{text}");
    // Histogram counts: per plugin and verb, the sum over codes, and the +Inf bucket the same.
    let counts = samples(&text, "tern_cni_verb_duration_seconds_count");
    let mut by_verb: BTreeMap<String, u64> = BTreeMap::new();
    for (k, v) in &want {
        let labels = k.split_once("{").unwrap().1;
        let (pv, _) = labels.rsplit_once(",code=").unwrap();
        *by_verb
            .entry(format!("tern_cni_verb_duration_seconds_count{{{pv}}}"))
            .or_default() += v;
    }
    assert_eq!(counts, by_verb, "in:\n{text}");
    let inf = samples(&text, "tern_cni_verb_duration_seconds_bucket");
    for (k, v) in &by_verb {
        let pv = k.split_once('{').unwrap().1;
        let key = format!("tern_cni_verb_duration_seconds_bucket{{le=\"+Inf\",{pv}");
        assert_eq!(inf.get(&key), Some(v), "{key} in:\n{text}");
    }
    assert_eq!(
        samples(&text, "tern_build_info"),
        [(
            format!(
                "tern_build_info{{version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            ),
            1
        )]
        .into_iter()
        .collect()
    );
    assert!(
        text.contains("tern_agent_verb_reports_rejected_total 0"),
        "{text}"
    );
}

/// ADD, CHECK and DEL of one pod, each within `limit`; returns their wall times.
fn verbs_within(n: &mut AgentNode, tag: &str, limit: Duration) -> [Duration; 3] {
    let p = n.node.pod(tag);
    n.node.tool.container_id(&format!("vm-{tag}"));
    n.node.tool.timeout(Duration::from_secs(30));
    let mut took = [Duration::ZERO; 3];
    for (i, verb) in ["add", "check", "del"].into_iter().enumerate() {
        let t = Instant::now();
        let out = match verb {
            "add" => n.node.tool.add(p.path()),
            "check" => n.node.tool.check(p.path()),
            _ => n.node.tool.del(p.path()),
        }
        .unwrap();
        took[i] = t.elapsed();
        ok(&out, &format!("{tag}: {verb}"));
        assert!(took[i] < limit, "{tag}: {verb} took {:?}", took[i]);
    }
    took
}

/// Nothing bound at `/run/tern/metrics.sock`; then the agent stopped (SIGSTOP) with its queue
/// filled to EAGAIN; then the agent SIGKILLed with its socket file left: every verb succeeds,
/// none waits (a blocking send into the full queue would wait until the agent reads again, past
/// the limit). The stopped agent's queue holds only the filler: the verbs' reports were dropped.
#[test]
fn verbs_never_wait_for_the_agent() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut n = AgentNode::new("vmw");
    let limit = Duration::from_secs(5);
    let absent = verbs_within(&mut n, "vmwa", limit);
    n.start_agent();
    n.signal(Signal::SIGSTOP);
    // Every thread stopped before the queue is filled: a receiver still running would make room.
    let pid = n.agent.as_ref().unwrap().id();
    let all_stopped = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .map(|t| std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap_or_default())
            .all(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('T')))
    };
    let t0 = Instant::now();
    while !all_stopped() {
        assert!(t0.elapsed() < Duration::from_secs(10), "agent not stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
    let filler = UnixDatagram::unbound().unwrap();
    filler.set_nonblocking(true).unwrap();
    let mut queued = 0u64;
    while filler.send_to(b"filler", n.socket()).is_ok() {
        queued += 1;
        assert!(queued < 1_000_000, "the queue never fills");
    }
    assert!(queued > 0);
    let stopped = verbs_within(&mut n, "vmws", limit);
    n.signal(Signal::SIGCONT);
    let want_rejected = format!("tern_agent_verb_reports_rejected_total {queued}");
    let t0 = Instant::now();
    let mut text = n.scrape().unwrap();
    while !text.contains(&want_rejected) && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
        text = n.scrape().unwrap();
    }
    assert!(text.contains(&want_rejected), "{want_rejected} in:\n{text}");
    assert!(
        samples(&text, "tern_cni_verb_total").is_empty(),
        "reports sent into the full queue were counted:\n{text}"
    );
    // The agent dies; its socket file stays (connection refused for the plugins).
    n.signal(Signal::SIGKILL);
    let _ = n.agent.as_mut().unwrap().wait();
    assert!(n.socket().exists());
    let dead = verbs_within(&mut n, "vmwd", limit);
    eprintln!("ADD, CHECK, DEL wall times: no socket {absent:?}, agent stopped {stopped:?}, agent dead {dead:?}");
    n.node.assert_nothing_left(&[]);
}

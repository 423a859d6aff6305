//! One `tern-agent run --node-routes` of the node-routes bench: its netns on the hub's bridge,
//! its process, and what is read from it (metrics, kernel routes, CPU seconds, RSS).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use tern_apiserver::ApiServer;
use tern_testkit::netns::TestNetns;

use crate::Res;

/// The hub's address on the bridge: the API server listens there.
pub(crate) const HUB: &str = "172.20.255.254";

/// An agent's netns, its files and its process.
pub(crate) struct Agent {
    pub(crate) name: String,
    pub(crate) ns: TestNetns,
    dir: PathBuf,
    child: Option<Child>,
}

impl Agent {
    /// A netns whose `eth0` (172.20.254.`k`/16) is a port of the hub's `br0`; `k` in 1..=250.
    pub(crate) fn new(hub: &TestNetns, k: usize, work: &Path) -> Res<Agent> {
        let ns = TestNetns::new("tern-bench-nr");
        let port = format!("nrb{k}-{}", std::process::id() % 100_000);
        ns.ip(&["link", "add", "eth0", "type", "veth", "peer", "name", &port]);
        ns.ip(&["link", "set", &port, "netns", hub.name()]);
        hub.ip(&["link", "set", &port, "master", "br0", "up"]);
        ns.ip(&["link", "set", "eth0", "up"]);
        ns.ip(&["addr", "add", &format!("172.20.254.{k}/16"), "dev", "eth0"]);
        let dir = work.join(format!("agent-{k}"));
        std::fs::create_dir_all(dir.join("sa")).map_err(|e| format!("{dir:?}: {e}"))?;
        Ok(Agent {
            name: format!("bench-agent-{k}"),
            ns,
            dir,
            child: None,
        })
    }

    /// Starts the agent (a fresh token, the stand-in's CA); returns at once.
    pub(crate) fn start(&mut self, bin: &Path, api: &ApiServer) -> Res<()> {
        let sa = self.dir.join("sa");
        let token = api.issue_token("tern", "tern-agent", 86_400);
        std::fs::write(sa.join("token"), token).map_err(|e| e.to_string())?;
        api.write_ca(&sa.join("ca.crt"))
            .map_err(|e| e.to_string())?;
        let log = std::fs::File::create(self.dir.join("agent.log")).map_err(|e| e.to_string())?;
        // `ip netns exec` execs the agent: the child's pid is the agent's.
        let child = Command::new("ip")
            .args(["netns", "exec", self.ns.name()])
            .arg(bin)
            .args(["run", "--api-server"])
            .arg(format!("https://{HUB}:{}", api.addr().port()))
            .arg("--sa-dir")
            .arg(&sa)
            .args(["--namespace", "tern", "--kubeconfig"])
            .arg(self.dir.join("kubeconfig"))
            .arg("--socket")
            .arg(self.dir.join("agent.sock"))
            .arg("--metrics-socket")
            .arg(self.dir.join("metrics.sock"))
            .args(["--node-routes", "--node-name", &self.name])
            .env("TERN_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("spawn {bin:?}: {e}"))?;
        self.child = Some(child);
        Ok(())
    }

    /// Err with the log's tail when the agent has exited.
    pub(crate) fn alive(&mut self) -> Res<()> {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => Ok(()),
            _ => Err(format!(
                "{} is not running; its log:\n{}",
                self.name,
                self.log_tail()
            )),
        }
    }

    /// SIGTERM, then waits for the exit (the agent leaves its routes in place).
    pub(crate) fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Ok(pid) = i32::try_from(c.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            let _ = c.wait();
        }
    }

    /// The value of one `/metrics` series (`name` or `name{labels}`), `None` while the endpoint
    /// is not up yet.
    pub(crate) fn metric(&self, series: &str) -> Option<u64> {
        let out = self
            .ns
            .exec(&["curl", "-s", "-m", "2", "http://127.0.0.1:9412/metrics"]);
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    }

    /// Routes of protocol 116 in the netns's main table (IPv4).
    pub(crate) fn kernel_routes(&self) -> usize {
        self.ns
            .ip(&["-4", "route", "show", "proto", "116"])
            .lines()
            .count()
    }

    /// The agent's user + system CPU seconds so far.
    pub(crate) fn cpu_secs(&self) -> f64 {
        let Some(pid) = self.child.as_ref().map(Child::id) else {
            return 0.0;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<f64> = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|v| v.parse().ok())
            .collect();
        f.iter().sum::<f64>() / clk_tck()
    }

    /// `VmRSS` and `VmHWM` (KiB) of the agent now.
    pub(crate) fn rss_kib(&self) -> (u64, u64) {
        let Some(pid) = self.child.as_ref().map(Child::id) else {
            return (0, 0);
        };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// The agent's log so far (for a failure message).
    pub(crate) fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), 100 when unknown.
fn clk_tck() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(100.0, |v| v as f64)
}

//! The fleet's agents: each a real `tern-agent run` in a network namespace of its own, whose
//! `eth0` is a port of the bridge holding HUB, with a token of `tern/tern-agent` from the API
//! server and its files (kubeconfig, sockets, log, pid) in a directory under `kt`.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::{agent_ns, Cluster, API_PORT, BRIDGE, HUB};
use crate::env::ip;
use crate::Res;

impl Cluster {
    /// Agent k's netns: lo up, eth0 holding 10.95.(k/250).(k%250+1)/16, the other end of its
    /// veth (`tnpsaK`) on the bridge.
    pub(crate) fn agent_netns(&self, k: usize) -> Res<()> {
        let (ns, link) = (agent_ns(k), format!("tnpsa{k}"));
        let addr = format!("10.95.{}.{}/16", k / 250, k % 250 + 1);
        ip(&["netns", "add", &ns])?;
        ip(&[
            "link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns", &ns,
        ])?;
        ip(&["link", "set", &link, "master", BRIDGE, "up"])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"])
    }

    pub(crate) fn agent_dir(&self, k: usize) -> PathBuf {
        self.kt.join(format!("agent-{k}"))
    }

    /// `tern-agent run --node-name NODE FLAGS` (split at white space) in agent k's netns, its
    /// log `DIR/log`; its pid in `DIR/pid` (the agent's own: `ip netns exec` execs it) and the
    /// time of its exec (epoch seconds) in `DIR/started`. Returns at once; `down` stops it.
    pub(crate) fn start_agent(&self, k: usize, node: &str, flags: &str) -> Res<()> {
        let d = self.agent_dir(k);
        let sa = d.join("sa");
        std::fs::create_dir_all(&sa).map_err(|e| format!("{}: {e}", sa.display()))?;
        let token = self.bash("kubectl -n tern create token tern-agent --duration 1h")?;
        let write = |name: &str, text: &[u8]| {
            std::fs::write(sa.join(name), text).map_err(|e| format!("{name}: {e}"))
        };
        write("token", token.trim().as_bytes())?;
        write("namespace", b"tern\n")?;
        std::fs::copy(self.kt.join("pki/ca.crt"), sa.join("ca.crt"))
            .map_err(|e| format!("ca.crt: {e}"))?;
        let log = std::fs::File::create(d.join("log")).map_err(|e| format!("log: {e}"))?;
        let err = log.try_clone().map_err(|e| format!("log: {e}"))?;
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| e.to_string())?;
        // std opens its own descriptors close-on-exec; one this run inherited would reach the
        // agent: hence `flock -o` (which closes the lock's) around the run.
        let mut child = Command::new("ip")
            .args(["netns", "exec", &agent_ns(k)])
            .arg(&self.agent_bin)
            .args(["run", "--api-server", &format!("https://{HUB}:{API_PORT}")])
            .arg("--sa-dir")
            .arg(&sa)
            .args(["--namespace", "tern", "--kubeconfig"])
            .arg(d.join("kubeconfig"))
            .arg("--socket")
            .arg(d.join("agent.sock"))
            .arg("--metrics-socket")
            .arg(d.join("metrics.sock"))
            .args(["--node-name", node])
            .args(flags.split_whitespace())
            .env("TERN_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.agent_bin.display()))?;
        let pid = child.id();
        // Reaped as soon as it exits, so that /proc/PID goes with it: the phases watch for that
        // to tell an agent that died from one still syncing.
        std::thread::spawn(move || child.wait());
        std::fs::write(d.join("pid"), format!("{pid}\n"))
            .and_then(|()| {
                std::fs::write(d.join("started"), format!("{:.9}\n", started.as_secs_f64()))
            })
            .map_err(|e| format!("{}: {e}", d.display()))
    }
}

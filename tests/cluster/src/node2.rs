//! The two-node tier's hosts (TERN_CLUSTER_NODES=2, tests/cluster/container.sh): node 1 is this
//! machine's root netns, node 2 a privileged podman container with its own netns, PID namespace
//! and root filesystem. A [`Host`] runs a command in a node's netns and names a file of its
//! filesystem as this machine sees it (`/proc/PID/root/...`), so a case asks both nodes the same
//! questions.
//!
//! Invariant: node 2's processes are found by their host PID (`NSpid`'s first field) under node
//! 2's cgroup parent, never by a PID of node 2's own namespace.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;

use crate::{fail, Node, Res};

/// A node of the tier, as this machine reaches it.
#[derive(Clone, Debug)]
pub struct Host {
    /// The Node's name.
    pub name: String,
    /// Node 2's PID 1 as the host sees it; `None` for node 1 (the root netns).
    pid: Option<u32>,
}

impl Host {
    /// `program ARGS` in this node's netns (`nsenter -n` for node 2).
    pub fn cmd(&self, program: &str, args: &[&str]) -> Command {
        match self.pid {
            None => Node::cmd(program, args),
            Some(pid) => {
                let mut c = Command::new("nsenter");
                c.args(["-t", &pid.to_string(), "-n", program]).args(args);
                c
            }
        }
    }

    /// `path` of this node's filesystem, as this machine names it.
    pub fn path(&self, path: &str) -> PathBuf {
        match self.pid {
            None => path.into(),
            Some(pid) => format!("/proc/{pid}/root{path}").into(),
        }
    }

    /// Whether this is node 2.
    pub fn is_node2(&self) -> bool {
        self.pid.is_some()
    }
}

impl Node {
    /// Whether the tier runs two nodes (TERN_CLUSTER_NODES=2).
    pub fn two_nodes(&self) -> bool {
        self.var("TWO_NODES") == "1"
    }

    /// Node 1, this machine.
    pub fn node1(&self) -> Host {
        Host {
            name: self.name.clone(),
            pid: None,
        }
    }

    /// Node 2, through its container's PID 1.
    ///
    /// # Errors
    /// No node 2 running.
    pub fn node2(&self) -> Res<Host> {
        let pid = self.sh(&["node_pid", "2"], &[])?;
        let pid = pid
            .trim()
            .parse()
            .map_err(|_| format!("node 2's PID {pid:?}"))?;
        Ok(Host {
            name: self.var("NODE2").to_owned(),
            pid: Some(pid),
        })
    }

    /// Every node of the tier: node 1, and node 2 with two nodes.
    ///
    /// # Errors
    /// As [`Node::node2`].
    pub fn hosts(&self) -> Res<Vec<Host>> {
        let mut all = vec![self.node1()];
        if self.two_nodes() {
            all.push(self.node2()?);
        }
        Ok(all)
    }

    /// The node `pod` is bound to (`spec.nodeName`).
    ///
    /// # Errors
    /// kubectl's, or a node that is neither.
    pub fn host_of(&self, pod: &str) -> Res<Host> {
        let name = self.kubectl(&["get", "pod", pod, "-o", "jsonpath={.spec.nodeName}"])?;
        match name.trim() {
            n if n == self.name => Ok(self.node1()),
            n if self.two_nodes() && n == self.var("NODE2") => self.node2(),
            n => fail(format!("pod {pod} is on node {n:?}, not one of the tier's")),
        }
    }

    /// `crictl ARGS` on `host`'s runtime (node 2's through node.sh `node_crictl 2`).
    ///
    /// # Errors
    /// As [`Node::run`].
    pub fn crictl_on(&self, host: &Host, args: &[&str]) -> Res<String> {
        if !host.is_node2() {
            return self.crictl(args);
        }
        let mut all = vec!["node_crictl", "2"];
        all.extend_from_slice(args);
        self.sh(&all, &[])
    }

    /// The host PID of the first running container named `container` of the ready sandbox of
    /// `pod` (crictl's name filters, anchored) on `host`.
    ///
    /// # Errors
    /// No such container, or (node 2) no host process for its PID.
    pub fn container_pid(&self, host: &Host, pod: &str, container: &str) -> Res<u32> {
        let sandbox = self.crictl_on(
            host,
            &[
                "pods",
                "--name",
                &format!("^{pod}$"),
                "--state",
                "ready",
                "-q",
            ],
        )?;
        let Some(sandbox) = sandbox.lines().next() else {
            return fail(format!("no ready sandbox of {pod} on {}", host.name));
        };
        let name = format!("^{container}$");
        let ctr = self.crictl_on(host, &["ps", "--pod", sandbox, "--name", &name, "-q"])?;
        let Some(ctr) = ctr.lines().next() else {
            return fail(format!("no running container {container} in {pod}"));
        };
        let tpl = [
            "inspect",
            "-o",
            "go-template",
            "--template",
            "{{.info.pid}}",
        ];
        let mut args = tpl.to_vec();
        args.push(ctr);
        let pid = self.crictl_on(host, &args)?;
        let pid: u32 = pid
            .trim()
            .parse()
            .map_err(|_| format!("{container} of {pod}: PID {pid:?}"))?;
        if !host.is_node2() {
            return Ok(pid);
        }
        self.host_pid(pid)
    }

    /// The host PID of node 2's process `pid` (a PID of node 2's namespace): the process under
    /// node 2's cgroup parent whose `NSpid` names it second.
    fn host_pid(&self, pid: u32) -> Res<u32> {
        let cgroup = format!(":{}/", self.var("NODE2_CGROUP"));
        let procs = std::fs::read_dir("/proc").map_err(|e| format!("read /proc: {e}"))?;
        for p in procs.flatten() {
            let Ok(host) = p.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let status = std::fs::read_to_string(p.path().join("status")).unwrap_or_default();
            let ns_pids: Vec<&str> = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .map(|l| l.split_whitespace().collect())
                .unwrap_or_default();
            if ns_pids.get(1) != Some(&pid.to_string().as_str()) {
                continue;
            }
            let cg = std::fs::read_to_string(p.path().join("cgroup")).unwrap_or_default();
            if cg.contains(&cgroup) {
                return Ok(host);
            }
        }
        fail(format!("no host process for node 2's PID {pid}"))
    }

    /// The packets `host`'s guard (inet `tern_kt_guard`, node_parts.sh guard_up) rejected from
    /// its pods: the forward chain's reject counters on pod sources, both families summed.
    ///
    /// # Errors
    /// `nft` failing (no guard table).
    pub fn guard_rejected(&self, host: &Host) -> Res<u64> {
        let chain = ["list", "chain", "inet", "tern_kt_guard", "forward"];
        let out = self.run(&mut host.cmd("nft", &chain), None)?;
        Ok(out
            .lines()
            .filter(|l| l.contains("saddr") && l.contains("reject"))
            .filter_map(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                let i = words.iter().position(|w| *w == "packets")?;
                words.get(i + 1)?.parse::<u64>().ok()
            })
            .sum())
    }

    /// A busybox pod like [`Node::pod_manifest`], bound to node `on` by its hostname label;
    /// its image pulled when absent (node 2 pulls through the tier's registry).
    pub fn pod_manifest_on(&self, name: &str, on: &str) -> String {
        self.pod_manifest(name)
            .replace(
                "spec:\n",
                &format!("spec:\n  nodeSelector: {{kubernetes.io/hostname: {on}}}\n"),
            )
            .replace("imagePullPolicy: Never", "imagePullPolicy: IfNotPresent")
    }

    /// Node `name`'s podCIDRs (`spec.podCIDRs`), in the Node's order.
    ///
    /// # Errors
    /// kubectl's, or an entry that is not a CIDR.
    pub fn pod_cidrs_of(&self, name: &str) -> Res<Vec<ipnetwork::IpNetwork>> {
        let c = self.kubectl(&["get", "node", name, "-o", "jsonpath={.spec.podCIDRs[*]}"])?;
        c.split_whitespace()
            .map(|s| s.parse().map_err(|e| format!("node podCIDR {s:?}: {e}")))
            .collect()
    }

    /// Whether node `name`'s Ready condition is `True`.
    pub fn ready_of(&self, name: &str) -> bool {
        let path = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
        self.kubectl(&["get", "node", name, "-o", path])
            .is_ok_and(|s| s.trim() == "True")
    }

    /// As [`Node::agent_pods`], for the tern-agent pods bound to node `node`.
    ///
    /// # Errors
    /// kubectl's.
    pub fn agent_pods_on(&self, node: &str, field: &str) -> Res<Vec<String>> {
        let selector = format!("spec.nodeName={node}");
        let jsonpath = format!("jsonpath={{range .items[*]}}{field}{{\"\\n\"}}{{end}}");
        let out = self.kubectl(&[
            "-n",
            "tern",
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=tern-agent",
            "--field-selector",
            &selector,
            "-o",
            &jsonpath,
        ])?;
        Ok(out
            .lines()
            .map(str::to_owned)
            .filter(|l| !l.is_empty())
            .collect())
    }

    /// The name of the tern-agent pod bound to node `name`.
    ///
    /// # Errors
    /// None there, or kubectl's.
    pub fn agent_pod_of(&self, name: &str) -> Res<String> {
        let pods = self.agent_pods_on(name, "{.metadata.name}")?;
        match pods.into_iter().next() {
            Some(p) => Ok(p),
            None => fail(format!("no tern-agent pod on {name}")),
        }
    }

    /// The pods bound to node `name` that are not on the host network: their addresses.
    ///
    /// # Errors
    /// kubectl's, or an address that is not one.
    pub fn pod_addresses_on(&self, name: &str) -> Res<Vec<IpAddr>> {
        let selector = format!("spec.nodeName={name}");
        let out = self.kubectl(&[
            "get", "pods", "-A", "--field-selector", &selector, "-o",
            "jsonpath={range .items[*]}{.spec.hostNetwork} {range .status.podIPs[*]}{.ip} {end}{\"\\n\"}{end}",
        ])?;
        let tern: Vec<&str> = out.lines().filter(|l| !l.starts_with("true")).collect();
        crate::pods::parse_ips(&tern.join(" "), "pod address")
    }
}

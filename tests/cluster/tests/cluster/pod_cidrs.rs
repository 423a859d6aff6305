//! `pod_cidrs_follow`: a Node registered again with new podCIDRs (seen with two nodes: node 2
//! deleted and joined again came back with a new IPv6 range while its agent pod lived on, and its
//! conflist, rendered once by `tern-agent install`, kept the old range: new pods got addresses no
//! node routed).
//!
//! A second `tern-agent run` (the release binary the image is built from) as a fake Node's agent,
//! in the host network namespace with no controller that changes the kernel, against the real
//! API server: `--pod-cidrs-conflist` on a copy of the node's own conflist, no `--node-routes`
//! (so it reads its Node every `--watch-timeout`). The conflist's IPAM ranges follow the Node's
//! podCIDRs, change only when the Node is back with new ones, keep everything else of the file,
//! and stop following once `tern-agent uninstall` has begun (its mark beside the kubeconfig).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tern_cluster::{fail, Node, Res};

const FAKE: &str = "tern-follow";

/// The fake Node, with `cidrs` as spec.podCIDRs (no InternalIP: no agent routes it).
fn create_node(node: &Node, cidrs: &[&str]) -> Res {
    let manifest = format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {FAKE}, labels: {{tern-test: fake-node}}}}\n\
         spec:\n  podCIDR: {}\n  podCIDRs: [{}]\n  taints: [{{key: tern-test/fake-node, effect: NoSchedule}}]\n",
        cidrs[0],
        cidrs.join(", ")
    );
    node.kubectl_in(&["create", "-f", "-"], &manifest).map(drop)
}

fn delete_node(node: &Node) -> Res {
    node.kubectl(&[
        "delete",
        "node",
        FAKE,
        "--ignore-not-found",
        "--wait=true",
        "--timeout=60s",
    ])
    .map(drop)
}

/// The conflist at `path` as JSON (`Null` when unreadable).
fn read(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

/// The subnets of the first plugin's IPAM ranges.
fn subnets(conflist: &Value) -> Vec<String> {
    conflist["plugins"][0]["ipam"]["ranges"]
        .as_array()
        .map(|sets| {
            sets.iter()
                .filter_map(|s| s[0]["subnet"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn expect_subnets(node: &Node, path: &Path, what: &str, want: &[&str]) -> Res {
    node.wait_for(30, what, || subnets(&read(path)) == want)
        .map_err(|e| format!("{e}: ranges now {:?}", subnets(&read(path))).into())
}

/// The test agent, its directory and the fake Node, removed whatever the outcome.
struct Cleanup<'a> {
    node: &'a Node,
    agent: Option<Child>,
    dir: PathBuf,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if let Some(mut c) = self.agent.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = delete_node(self.node);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn pod_cidrs_follow(node: &Node) -> Res {
    let dir = node.kt.join("pod-cidrs-follow");
    let _ = std::fs::remove_dir_all(&dir);
    let mut cleanup = Cleanup {
        node,
        agent: None,
        dir: dir.clone(),
    };
    delete_node(node)?;
    let sa = dir.join("sa");
    std::fs::create_dir_all(&sa).map_err(|e| format!("mkdir {}: {e}", sa.display()))?;
    let token = node.kubectl(&[
        "-n",
        "tern",
        "create",
        "token",
        "tern-agent",
        "--duration",
        "1h",
    ])?;
    let write = |p: PathBuf, text: &str| {
        std::fs::write(&p, text).map_err(|e| format!("write {}: {e}", p.display()))
    };
    write(sa.join("token"), token.trim())?;
    write(sa.join("namespace"), "tern")?;
    std::fs::copy(node.kt.join("pki/ca.crt"), sa.join("ca.crt"))
        .map_err(|e| format!("copy ca.crt: {e}"))?;
    // The node's own conflist, as install wrote it from this node's podCIDRs.
    let conflist = dir.join("10-tern.conflist");
    let installed = read(&node.cni_net.join("10-tern.conflist"));
    if subnets(&installed).is_empty() {
        return fail(format!(
            "the node's conflist has no IPAM ranges: {installed}"
        ));
    }
    write(conflist.clone(), &installed.to_string())?;

    create_node(node, &["10.99.250.0/24"])?;
    // The build's target (.cargo/config.toml): the musl triple of this architecture.
    let agent_bin = node.root.join(format!(
        "target/{}-unknown-linux-musl/release/tern-agent",
        std::env::consts::ARCH
    ));
    let log = std::fs::File::create(dir.join("agent.log")).map_err(|e| format!("log: {e}"))?;
    let child = Command::new(&agent_bin)
        .args(["run", "--api-server", node.var("API"), "--sa-dir"])
        .arg(&sa)
        .args(["--namespace", "tern", "--kubeconfig"])
        .arg(dir.join("tern-kubeconfig"))
        .arg("--socket")
        .arg(dir.join("agent.sock"))
        .arg("--metrics-socket")
        .arg(dir.join("metrics.sock"))
        .args(["--listen", "127.0.0.1:0", "--node-name", FAKE])
        .args(["--watch-timeout", "1s", "--pod-cidrs-conflist"])
        .arg(&conflist)
        .env("TERN_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| format!("log: {e}"))?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("{}: {e}", agent_bin.display()))?;
    cleanup.agent = Some(child);
    let agent_log = || std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();

    // Its Node's podCIDRs from the start, everything else of the file as install wrote it.
    expect_subnets(
        node,
        &conflist,
        "the ranges of the Node",
        &["10.99.250.0/24"],
    )
    .map_err(|e| format!("{e}; agent log:\n{}", agent_log()))?;
    let mut rest = read(&conflist);
    rest["plugins"][0]["ipam"]["ranges"] = installed["plugins"][0]["ipam"]["ranges"].clone();
    if rest != installed {
        return fail(format!(
            "more than the ranges changed: {rest} vs {installed}"
        ));
    }
    // Gone: nothing changes. Back with new podCIDRs (and a second family): they follow.
    delete_node(node)?;
    std::thread::sleep(Duration::from_secs(3));
    if subnets(&read(&conflist)) != ["10.99.250.0/24"] {
        return fail(format!(
            "the Node's deletion changed the ranges: {:?}",
            subnets(&read(&conflist))
        ));
    }
    create_node(node, &["10.99.251.0/24", "fd99:251::/64"])?;
    expect_subnets(
        node,
        &conflist,
        "the ranges of the Node registered again",
        &["10.99.251.0/24", "fd99:251::/64"],
    )
    .map_err(|e| format!("{e}; agent log:\n{}", agent_log()))?;
    if !agent_log().contains("the conflist's IPAM ranges now follow them") {
        return fail(format!("no warning in the agent's log:\n{}", agent_log()));
    }
    // Uninstall began: the conflist is no longer kept.
    // tern_net::drain::MARK, which tern-agent uninstall leaves in the CNI conf dir
    write(dir.join("tern-uninstalling"), "")?;
    delete_node(node)?;
    create_node(node, &["10.99.252.0/24"])?;
    std::thread::sleep(Duration::from_secs(4));
    if subnets(&read(&conflist)) != ["10.99.251.0/24", "fd99:251::/64"] {
        return fail(format!(
            "rewritten during uninstall: {:?}",
            subnets(&read(&conflist))
        ));
    }
    // The node's own conflist: untouched by its agent's follower (its Node never changed).
    if read(&node.cni_net.join("10-tern.conflist")) != installed {
        return fail("the node's own conflist changed");
    }
    Ok(())
}

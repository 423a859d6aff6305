//! `tern-agent run --egress-nat`: the real agent binary in a node netns (the API server stand-in
//! in the node's "router" netns serves the Node's podCIDRs) keeps `inet tern_nat`: a pod wired
//! by tern (no `ipMasq`) reaches an address beyond the router as the node, and a cluster address
//! as itself; the table is restored after it is flushed or deleted, but no longer once uninstall
//! began (its mark beside the kubeconfig), survives the agent's stop,
//! and goes with `tern-agent uninstall` (with the node's routes of protocol 116, and only
//! those); iptables-nft's table is never touched; a bad CIDR stops
//! the agent at start with nothing created. Needs root and the nft tool.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use tern_apiserver::ApiServer;
use tern_net::netns::NetNs;
use tern_testkit::exec::{bin_dir, conflist, Cnitool};
use tern_testkit::netns::TestNetns;

const POD_V4: &str = "10.98.1.0/24";
const POD_V6: &str = "fd98:1::/64";
const CLUSTER: &str = "10.98.0.0/16,10.96.0.0/16,fd98::/16";
/// An address of the router inside the cluster's ranges (a service, say).
const IN_CLUSTER: &str = "10.96.0.10";

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The API server stand-in, stopped inside the netns it was started in.
struct Api {
    api: Option<ApiServer>,
    ns: NetNs,
}

impl Drop for Api {
    fn drop(&mut self) {
        if let Some(api) = self.api.take() {
            let _ = self.ns.run_in(move || drop(api));
        }
    }
}

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn agent_cmd(node: &TestNetns, dir: &std::path::Path, api: &str, extra: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", node.name()])
        .arg(bin_dir().join("tern-agent"))
        .args(["run", "--api-server", api, "--sa-dir"])
        .arg(dir.join("sa"))
        .args(["--namespace", "tern", "--kubeconfig"])
        .arg(dir.join("kubeconfig"))
        .arg("--socket")
        .arg(dir.join("run/agent.sock"))
        // never the host's /run/tern/metrics.sock, which a node's real agent may hold
        .arg("--metrics-socket")
        .arg(dir.join("run/metrics.sock"))
        .args(extra);
    c
}

fn masquerades(edge: &Edge) -> bool {
    edge.table("inet", "tern_nat").is_some_and(|t| {
        t.contains("ip saddr 10.98.1.0/24 ip daddr != { 10.96.0.0/16, 10.98.0.0/16, 224.0.0.0/4 } masquerade")
            && t.contains("ip6 saddr fd98:1::/64 ip6 daddr != { fd98::/16, ff00::/8 } masquerade")
    })
}

#[test]
fn the_agent_keeps_the_node_egress_nat_table() {
    if tern_testkit::root::skip() {
        return;
    }
    let edge = Edge::new("enat", &[POD_V4, POD_V6], &[IN_CLUSTER]);
    let foreign = edge.foreign_table();
    let rns = NetNs::open(edge.router.path()).unwrap();
    let bind = format!("{ROUTER_V4}:0").parse().unwrap();
    let guard = Api {
        api: Some(rns.run_in(|| ApiServer::start_on(bind)).unwrap().unwrap()),
        ns: NetNs::open(edge.router.path()).unwrap(),
    };
    let api = guard.api.as_ref().unwrap();
    api.add_service_account("tern", "tern-cni");
    api.set_node_with_ips("nat-node", &[POD_V4, POD_V6], &[NODE_V4]);

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("sa")).unwrap();
    std::fs::write(
        dir.path().join("sa/token"),
        api.issue_token("tern", "tern-agent", 86_400),
    )
    .unwrap();
    api.write_ca(&dir.path().join("sa/ca.crt")).unwrap();
    let url = format!("https://{ROUTER_V4}:{}", api.addr().port());
    let log = dir.path().join("agent.log");
    let agent = Agent(
        agent_cmd(
            &edge.node,
            dir.path(),
            &url,
            &[
                "--egress-nat",
                "true",
                "--cluster-cidrs",
                CLUSTER,
                "--node-name",
                "nat-node",
                "--egress-nat-resync",
                "200ms",
            ],
        )
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap(),
    );
    let show_log = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for("the egress NAT table", || masquerades(&edge));

    // A pod wired by tern alone: the agent's table masquerades it outside the cluster only.
    let mut tool = Cnitool::new().unwrap();
    tool.in_netns(Some(edge.node.name()));
    let scratch = tool.scratch().to_path_buf();
    let plugin = json!({"type": "tern", "stateDir": scratch.join("state"),
        "ipam": {"type": "host-local", "dataDir": scratch.join("ipam"),
            "ranges": [[{"subnet": POD_V4}], [{"subnet": POD_V6}]]}});
    tool.write_conflist(&conflist("pods", "1.0.0", vec![plugin]))
        .unwrap();
    let pod = TestNetns::new("enat-p");
    common::ok(&tool.add(pod.path()).unwrap(), "ADD");
    let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
    assert_eq!(
        edge.source_seen(&pod, FAR_V4),
        ip(NODE_V4),
        "{}",
        show_log()
    );
    assert_eq!(edge.source_seen(&pod, FAR_V6), ip(NODE_V6));
    assert_eq!(
        edge.source_seen(&pod, IN_CLUSTER),
        ip("10.98.1.2"),
        "a cluster address sees the pod"
    );

    // Tampering is undone at the next resync: a flushed chain, then a deleted table.
    // (The agent's log line counts each restore: the tampered state itself may last less than
    // one look.)
    let restores = || show_log().matches("restoring").count();
    assert_eq!(restores(), 0, "{}", show_log());
    edge.node
        .exec_ok(&["nft", "flush", "chain", "inet", "tern_nat", "postrouting"]);
    wait_for("the flushed chain restored", || {
        restores() == 1 && masquerades(&edge)
    });
    edge.node
        .exec_ok(&["nft", "delete", "table", "inet", "tern_nat"]);
    wait_for("the deleted table restored", || {
        restores() == 2 && masquerades(&edge)
    });
    assert_eq!(edge.source_seen(&pod, FAR_V4), ip(NODE_V4));

    // Once `tern-agent uninstall` began (its mark beside the kubeconfig), no resync restores the
    // table: a tampered one (an extra chain, harmless) stays as it is.
    std::fs::write(dir.path().join("tern-uninstalling"), "").unwrap();
    wait_for("the controller to stop at the mark", || {
        show_log().contains("uninstall began")
    });
    edge.node
        .exec_ok(&["nft", "add", "chain", "inet", "tern_nat", "extra"]);
    std::thread::sleep(std::time::Duration::from_millis(1000)); // five resync periods
    assert!(
        edge.table("inet", "tern_nat")
            .unwrap_or_default()
            .contains("chain extra"),
        "a resync after uninstall began restored the table:\n{}",
        show_log()
    );
    assert_eq!(restores(), 2, "{}", show_log());
    std::fs::remove_file(dir.path().join("tern-uninstalling")).unwrap();

    // The agent's stop leaves the table; uninstall (no attachment left) removes it.
    drop(agent);
    assert!(masquerades(&edge), "the table must outlive the agent");
    common::ok(&tool.del(pod.path()).unwrap(), "DEL");
    // Node routes the agent would have installed (tern's protocol, both families), and one of
    // someone else's: uninstall removes tern's only.
    for r in [
        "10.98.2.0/24 via 192.0.2.254 proto 116",
        "fd98:2::/64 via 2001:db8:1::fe proto 116",
        "10.98.3.0/24 via 192.0.2.254 proto static",
    ] {
        let mut argv = vec!["ip", "route", "add"];
        argv.extend(r.split(' '));
        edge.node.exec_ok(&argv);
    }
    let tern_routes = || {
        ["-4", "-6"]
            .iter()
            .map(|f| {
                edge.node
                    .exec_ok(&["ip", f, "route", "show", "proto", "116"])
            })
            .collect::<String>()
    };
    assert_eq!(tern_routes().lines().count(), 2, "{}", tern_routes());
    let empty = tempfile::tempdir().unwrap();
    edge.node.exec_ok(&[
        bin_dir().join("tern-agent").to_str().unwrap(),
        "uninstall",
        "--cni-bin-dir",
        empty.path().to_str().unwrap(),
        "--cni-conf-dir",
        empty.path().to_str().unwrap(),
        "--state-dir",
        scratch.join("state").to_str().unwrap(),
        "--sandbox-removal-wait",
        "0s",
    ]);
    assert_eq!(
        edge.table("inet", "tern_nat"),
        None,
        "uninstall left the table"
    );
    assert_eq!(tern_routes().trim(), "", "uninstall left tern's routes");
    assert!(
        edge.node
            .exec_ok(&["ip", "route", "show", "10.98.3.0/24"])
            .contains("10.98.3.0/24"),
        "uninstall removed a route not tern's"
    );
    assert_eq!(
        edge.table("ip", "nat").as_deref(),
        Some(foreign.as_str()),
        "iptables-nft's table changed"
    );
}

#[test]
fn a_bad_cidr_stops_the_agent_before_anything() {
    if tern_testkit::root::skip() {
        return;
    }
    let edge = Edge::new("enatbad", &[], &[]);
    let dir = tempfile::tempdir().unwrap();
    for (cidrs, needle) in [
        ("10.98.0.0/33", "\"10.98.0.0/33\" is not a CIDR"),
        ("10.98.0.1/16", "host bits"),
        ("", "is empty"),
    ] {
        let out = agent_cmd(
            &edge.node,
            dir.path(),
            "https://127.0.0.1:1",
            &[
                "--egress-nat",
                "true",
                "--cluster-cidrs",
                cidrs,
                "--egress-nat-pod-cidrs",
                "10.98.1.0/24",
            ],
        )
        .output()
        .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cidrs}: {err}");
        assert!(
            err.contains("--cluster-cidrs") && err.contains(needle),
            "{cidrs}: {err}"
        );
    }
    assert_eq!(edge.table("inet", "tern_nat"), None);
    assert!(
        !dir.path().join("run").exists(),
        "the agent started something"
    );
}

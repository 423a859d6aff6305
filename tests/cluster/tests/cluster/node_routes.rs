//! `node_routes`: fake Nodes on a test network of the node.
//!
//! The DaemonSet's agent (--node-routes, as deploy/ sets it) on the real node routes the
//! podCIDRs of Nodes whose InternalIPs are on a directly connected network (a veth of the node
//! here), with protocol 116; moves a route when a Node's InternalIP changes; a podCIDR,
//! immutable once set, changes only with the Node re-created: the old route goes, the new one
//! comes; a deleted Node's route goes; a Node off every connected network gets none; the API
//! server stopped changes no route.

use std::time::Duration;

use tern_cluster::pods::ipv4_interfaces;
use tern_cluster::{fail, Node, Res};

/// A Node NAME with no kubelet behind it (tainted, labelled), its InternalIP set through the
/// status subresource as a kubelet sets it.
fn fake_node(node: &Node, name: &str, cidr: &str, ip: &str) -> Res {
    let manifest = format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{tern-test: fake-node}}}}\n\
         spec:\n  podCIDR: {cidr}\n  podCIDRs: [{cidr}]\n  taints: [{{key: tern-test/fake-node, effect: NoSchedule}}]\n"
    );
    node.kubectl_in(&["create", "-f", "-"], &manifest)?;
    set_ip(node, name, ip)
}

fn set_ip(node: &Node, name: &str, ip: &str) -> Res {
    let patch = format!(
        "{{\"status\":{{\"addresses\":[{{\"type\":\"InternalIP\",\"address\":\"{ip}\"}}]}}}}"
    );
    node.kubectl(&[
        "patch",
        "node",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch,
    ])
    .map(drop)
}

/// tern's routes (protocol 116), one line each.
fn tern_routes(node: &Node) -> Res<String> {
    node.run(
        &mut Node::cmd("ip", &["-4", "route", "show", "proto", "116"]),
        None,
    )
}

/// tern's route to CIDR as "CIDR via GW dev LINK" (empty when none).
fn route(node: &Node, cidr: &str) -> Res<String> {
    let out = node.run(
        &mut Node::cmd("ip", &["-4", "route", "show", cidr, "proto", "116"]),
        None,
    )?;
    Ok(out
        .lines()
        .next()
        .map(|l| l.split_whitespace().take(5).collect::<Vec<_>>().join(" "))
        .unwrap_or_default())
}

/// tern's route to CIDR is via GW on the test link (none without GW).
fn route_is(node: &Node, cidr: &str, gw: Option<&str>) -> bool {
    let want = gw.map_or(String::new(), |gw| {
        format!("{cidr} via {gw} dev {}", node.var("NR_LINK"))
    });
    route(node, cidr).is_ok_and(|r| r == want)
}

fn expect_route(node: &Node, what: &str, cidr: &str, gw: Option<&str>) -> Res {
    node.wait_for(30, what, || route_is(node, cidr, gw))
        .map_err(|e| format!("{e}: {}", route(node, cidr).unwrap_or_default()))
}

/// Removes the fake Nodes and the test link, whatever the case's outcome.
struct Cleanup<'a>(&'a Node);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let n = self.0;
        let _ = n.kubectl(&[
            "delete",
            "node",
            "-l",
            "tern-test=fake-node",
            "--wait=true",
            "--timeout=60s",
        ]);
        let _ = n.run(
            &mut Node::cmd("ip", &["link", "del", n.var("NR_LINK")]),
            None,
        );
    }
}

pub fn node_routes(node: &Node) -> Res {
    let _cleanup = Cleanup(node);
    let link = node.var("NR_LINK");
    let peer = format!("{}1", link.trim_end_matches('0'));
    let ip = |args: &[&str]| node.run(&mut Node::cmd("ip", args), None).map(drop);
    ip(&["link", "add", link, "type", "veth", "peer", "name", &peer])?;
    ip(&["addr", "add", "10.99.230.254/24", "dev", link])?;
    ip(&["link", "set", link, "up"])?;
    ip(&["link", "set", &peer, "up"])?;
    fake_node(node, "nr-a", "10.99.240.0/24", "10.99.230.1")?;
    fake_node(node, "nr-b", "10.99.241.0/24", "10.99.230.2")?;
    // off every connected network of this machine (TEST-NET-2; checked, the machine's own could be)
    let addrs = node.run(&mut Node::cmd("ip", &["-4", "-o", "addr", "show"]), None)?;
    let far: std::net::Ipv4Addr = [198, 51, 100, 9].into();
    if ipv4_interfaces(&addrs).iter().any(|n| n.contains(far)) {
        return fail("198.51.100.9 is on a connected network here: pick another off-link address");
    }
    fake_node(node, "nr-far", "10.99.242.0/24", "198.51.100.9")?;
    node.wait_for(30, "routes to nr-a and nr-b", || {
        tern_routes(node).is_ok_and(|r| r.lines().count() >= 2)
    })
    .map_err(|e| {
        format!(
            "{e}: tern's routes: {}",
            tern_routes(node).unwrap_or_default()
        )
    })?;
    if !route_is(node, "10.99.240.0/24", Some("10.99.230.1")) {
        return fail(format!("nr-a: {}", route(node, "10.99.240.0/24")?));
    }
    if !route_is(node, "10.99.241.0/24", Some("10.99.230.2")) {
        return fail(format!("nr-b: {}", route(node, "10.99.241.0/24")?));
    }
    let far_route = node.run(
        &mut Node::cmd("ip", &["route", "show", "10.99.242.0/24"]),
        None,
    )?;
    if !far_route.trim().is_empty() {
        return fail(format!("off-link nr-far routed: {far_route}"));
    }
    let routes = tern_routes(node)?;
    if routes.lines().count() != 2 {
        return fail(format!("tern's routes: {routes}"));
    }
    // Read through the kubelet, which critest (the case before) restarted: until its pod manager
    // has resynced, the log read answers NotFound (seen in a clean-clone run), so it is retried.
    let agent = node.agent_pod()?;
    node.wait_for(60, "nr-far reported in the agent's log", || {
        node.kubectl(&["-n", "tern", "logs", &agent, "-c", "agent"])
            .is_ok_and(|logs| logs.contains("not on a directly connected network"))
    })?;

    set_ip(node, "nr-a", "10.99.230.3")?;
    expect_route(
        node,
        "nr-a's route moved",
        "10.99.240.0/24",
        Some("10.99.230.3"),
    )?;
    let podcidr = r#"{"spec":{"podCIDR":"10.99.243.0/24","podCIDRs":["10.99.243.0/24"]}}"#;
    if node
        .kubectl(&["patch", "node", "nr-b", "--type=merge", "-p", podcidr])
        .is_ok()
    {
        return fail("the API server let a podCIDR change");
    }
    node.kubectl(&["delete", "node", "nr-b", "--wait=true"])?;
    fake_node(node, "nr-b", "10.99.243.0/24", "10.99.230.2")?;
    expect_route(
        node,
        "nr-b's new podCIDR routed",
        "10.99.243.0/24",
        Some("10.99.230.2"),
    )?;
    if !route_is(node, "10.99.241.0/24", None) {
        return fail(format!(
            "nr-b's old podCIDR still routed: {}",
            route(node, "10.99.241.0/24")?
        ));
    }
    node.kubectl(&["delete", "node", "nr-b", "--wait=true"])?;
    expect_route(node, "nr-b's route gone", "10.99.243.0/24", None)?;

    let before = tern_routes(node)?;
    if before.trim().is_empty() {
        return fail("no route left to watch through the outage");
    }
    node.sh(&["stop_apiserver"], &[])?;
    std::thread::sleep(Duration::from_secs(5));
    let during = tern_routes(node)?;
    if during != before {
        return fail(format!("routes changed with the API server down: {during}"));
    }
    node.start_apiserver(&[], &[])?;
    std::thread::sleep(Duration::from_secs(2));
    let after = tern_routes(node)?;
    if after != before {
        return fail(format!(
            "routes changed after the API server came back: {after}"
        ));
    }
    node.kubectl(&["delete", "node", "nr-a", "nr-far", "--wait=true"])?;
    node.wait_for(30, "every fake node's route gone", || {
        tern_routes(node).is_ok_and(|r| r.trim().is_empty())
    })
    .map_err(|e| format!("{e}: left: {}", tern_routes(node).unwrap_or_default()))?;
    // The DaemonSet gave each fake node an agent pod that no kubelet will ever stop; remove them
    // so later cases see a DaemonSet of this one node.
    let _ = node.kubectl(&[
        "-n",
        "tern",
        "delete",
        "pod",
        "--field-selector",
        &format!("spec.nodeName!={}", node.name),
        "--grace-period=0",
        "--force",
    ]);
    node.wait_for(60, "the DaemonSet back to one node", || {
        node.kubectl(&["-n", "tern", "get", "pods", "-o", "name"])
            .is_ok_and(|o| o.lines().count() == 1)
    })
}

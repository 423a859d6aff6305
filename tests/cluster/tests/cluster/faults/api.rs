//! The faults between the node and the API server: `fault_apiserver_restart` (with etcd compacted
//! past the agents' resourceVersion while the server is down) and `fault_apiserver_unreachable`
//! (the server's port dropped by an nftables rule on this host: every client of it on the node,
//! the agent, the kubelet and the churn's kubectl, sees a silent partition). Each ends with a
//! policy created with the churn paused and timed into the kernel ([`marker::time_a_change`]):
//! the agent's watches are back.

use std::time::Duration;

use tern_cluster::node2::Host;
use tern_cluster::{fail, Node, Res};

use super::{churn, marker, under_churn, Fault};

/// How long a change made just after the fault may take to reach the kernel (decision 0044).
const CHANGE_BOUND: Duration = Duration::from_secs(5);

/// The same after a partition of one node while the others go on (decision 0044): the API
/// server's writes to that node's watches (the churn's events) were dropped, so TCP resends them
/// on its backoff, doubled from 200 ms at each loss: after 20 s of drops the next resend comes
/// within 12.8 s of the heal (measured: 5.8 s), and the agent, which does not probe a silent
/// connection, sees the change then.
const CHANGE_BOUND_AFTER_PARTITION: Duration = Duration::from_secs(15);

/// The agent's log lines that tell a watch resumed too late and listed again.
fn relists(node: &Node) -> Res<usize> {
    let agent = node.agent_pod()?;
    let log = node.kubectl(&["-n", "tern", "logs", &agent])?;
    Ok(log.lines().filter(|l| l.contains("410 Gone")).count())
}

/// `POST` to etcd's JSON gateway (plain HTTP on loopback in this tier); returns the answer.
fn etcd(node: &Node, path: &str, body: &str) -> Res<String> {
    let url = format!("http://127.0.0.1:23790/v3/{path}");
    node.run(
        &mut Node::cmd("curl", &["-sf", "-X", "POST", &url, "-d", body]),
        None,
    )
}

/// Writes a key of the fault's own (so the store's revision passes every resourceVersion the
/// agents hold) and compacts etcd at that revision, physically; then deletes the key.
fn compact_past_the_agents(node: &Node) -> Res<i64> {
    use base64::Engine as _;
    let key = base64::engine::general_purpose::STANDARD.encode("/tern-fault/compaction");
    let put = etcd(
        node,
        "kv/put",
        &format!("{{\"key\":\"{key}\",\"value\":\"eA==\"}}"),
    )?;
    let answer: serde_json::Value =
        serde_json::from_str(&put).map_err(|e| format!("{put}: {e}"))?;
    let Some(rev) = answer["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse::<i64>().ok())
    else {
        return fail(format!("no revision in etcd's answer: {put}"));
    };
    etcd(
        node,
        "kv/compaction",
        &format!("{{\"revision\":\"{rev}\",\"physical\":true}}"),
    )?;
    etcd(node, "kv/deleterange", &format!("{{\"key\":\"{key}\"}}"))?;
    Ok(rev)
}

fn api_answers(node: &Node) -> Res {
    node.wait_for(60, "the API server answers", || {
        node.ok(&mut node.kubectl_cmd(&["get", "--raw", "/readyz"]))
    })
}

fn a_change_goes_through(node: &Node, churn: &churn::Control) -> Res {
    marker::a_change_within(node, churn, CHANGE_BOUND)
}

/// `fault_apiserver_restart`: kube-apiserver killed, etcd compacted past every resourceVersion
/// the agents hold, the server started again, during churn (the churn's commands refused
/// meanwhile). The agent's watches resume from their resourceVersion, get 410 Gone and list
/// again: the case waits for that line in the agent's log (the compaction bit).
pub fn apiserver_restart(node: &Node) -> Res {
    let bring = |node: &Node, churn: &churn::Control| -> Res {
        let before = relists(node)?;
        node.sh(&["stop_apiserver"], &[])?;
        let rev = compact_past_the_agents(node)?;
        node.start_apiserver(&[], &[])?;
        api_answers(node)?;
        node.wait_for(60, "the agent listed again after 410 Gone", || {
            relists(node).is_ok_and(|n| n > before)
        })?;
        node.note(&format!(
            "etcd compacted at revision {rev}; the agent's relists: {}",
            relists(node)? - before
        ));
        a_change_goes_through(node, churn)
    };
    let r = under_churn(
        node,
        &Fault {
            name: "API server restarted, etcd compacted",
            gap_bound: Duration::from_secs(1),
            bring: &bring,
        },
    );
    let removed = marker::delete(node);
    r?;
    removed
}

/// How long the API server is unreachable (the issue: "a while"; 20 s is past the agent's API
/// request timeouts and within the node's 40 s grace before it counts as NotReady).
const UNREACHABLE: Duration = Duration::from_secs(20);

/// The table that drops the API server's port, both ways (on loopback both are output).
const PARTITION: &str = "tern_fault_partition";

/// `fault_apiserver_unreachable`: the API server's address and port dropped on this host for
/// [`UNREACHABLE`] during churn (no RST: connections hang, as in a partition), then let through.
pub fn apiserver_unreachable(node: &Node) -> Res {
    unreachable_from(node, &node.node1())
}

/// `fault_apiserver_unreachable_node2` (two nodes): the same on node 2 alone, the clients' node
/// (its kubelet and agent cut off; node 1 and the churn's kubectl, on this host, not).
pub fn apiserver_unreachable_node2(node: &Node) -> Res {
    unreachable_from(node, &node.node2()?)
}

/// The API server unreachable from `host`: its address and port dropped in `host`'s netns, both
/// ways (on loopback both are output; from node 2 the answers come in).
fn unreachable_from(node: &Node, host: &Host) -> Res {
    // `API` is https://ADDR:PORT (node.sh vars)
    let api = node.var("API").trim_start_matches("https://");
    let Some((addr, port)) = api.rsplit_once(':') else {
        return fail(format!("no address and port in API={api}"));
    };
    let addr = addr.trim_start_matches('[').trim_end_matches(']');
    let ip = if addr.contains(':') { "ip6" } else { "ip" };
    let rules = format!(
        "table inet {PARTITION} {{\n chain out {{\n  type filter hook output priority filter; policy accept;\n  \
         {ip} daddr {addr} tcp dport {port} drop\n  {ip} saddr {addr} tcp sport {port} drop\n }}\n \
         chain in {{\n  type filter hook input priority filter; policy accept;\n  \
         {ip} saddr {addr} tcp sport {port} drop\n }}\n}}\n"
    );
    let url = format!("https://{api}/readyz");
    let answers = |node: &Node| {
        let probe = ["-sk", "-o", "/dev/null", "--max-time", "2", url.as_str()];
        node.ok(&mut host.cmd("curl", &probe))
    };
    let heal = |node: &Node| {
        node.run(
            &mut host.cmd("nft", &["delete", "table", "inet", PARTITION]),
            None,
        )
    };
    let bring = |node: &Node, churn: &churn::Control| -> Res {
        node.run(&mut host.cmd("nft", &["-f", "-"]), Some(&rules))?;
        // the fault proves itself: the server does not answer through it
        let answered = answers(node);
        std::thread::sleep(UNREACHABLE.saturating_sub(Duration::from_secs(2)));
        heal(node)?;
        if answered {
            return fail("the API server answered through the partition: the fault did not bite");
        }
        if !answers(node) {
            return fail(format!(
                "the API server does not answer {} after the partition",
                host.name
            ));
        }
        api_answers(node)?;
        // on one node the churn's kubectl was cut off too: nothing was pending on the watches
        let bound = match host.is_node2() {
            true => CHANGE_BOUND_AFTER_PARTITION,
            false => CHANGE_BOUND,
        };
        marker::a_change_within(node, churn, bound)
    };
    let name = format!("API server unreachable from {} for 20 s", host.name);
    let r = under_churn(
        node,
        &Fault {
            name: &name,
            gap_bound: Duration::from_secs(1),
            bring: &bring,
        },
    );
    // whatever failed: the partition never outlives the case
    let _ = heal(node);
    let removed = marker::delete(node);
    r?;
    removed
}

//! NetworkPolicy enforced by the DaemonSet's agent (`--network-policy=true` in deploy/): a
//! deny-all ingress policy isolates a pod, a second policy opens one port to one client, and the
//! isolation holds while the agent pod is killed and restarted (the table stays in the kernel;
//! the restarted agent replaces it only after a full sync). A connection open when the deny-all
//! policy arrives keeps flowing (the API leaves existing connections to the implementation; tern
//! accepts established traffic first, as Calico and Cilium keep conntrack's flows), new ones do not.

use std::net::IpAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tern_cluster::{fail, Node, Res};

use crate::day2::rollout_status;

const DENY_ALL: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
metadata: {name: pol-deny-all, namespace: default}\n\
spec: {podSelector: {matchLabels: {role: pol-server}}, policyTypes: [Ingress]}\n";

const ALLOW_80: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
metadata: {name: pol-allow-80, namespace: default}\n\
spec: {podSelector: {matchLabels: {role: pol-server}}, ingress: [{from: [{podSelector: \
{matchLabels: {role: pol-client}}}], ports: [{protocol: TCP, port: 80}]}]}\n";

/// The agent container's readiness (JSONPath).
const READY: &str = "jsonpath={.status.containerStatuses[0].ready}";

/// Whether a TCP connection from `from` to `ip`:`port` is set up within 2 s (busybox nc).
pub(crate) fn connects(node: &Node, from: &str, ip: IpAddr, port: u16) -> bool {
    node.in_pod(from, &["nc", "-w", "2", &ip.to_string(), &port.to_string()])
        .is_ok()
}

/// Every address of the server, from `from`, on `port`: all as `want`.
fn expect(node: &Node, ips: &[IpAddr], from: &str, port: u16, want: bool) -> Res {
    for ip in ips {
        if connects(node, from, *ip, port) != want {
            return fail(format!(
                "{from} -> {ip}:{port}: {} (expected {})",
                if want { "blocked" } else { "connected" },
                if want { "connected" } else { "blocked" }
            ));
        }
    }
    Ok(())
}

/// Bytes the port-82 listener in `server` has received so far.
pub(crate) fn streamed(node: &Node, server: &str) -> Res<u64> {
    let out = node.in_pod(server, &["wc", "-c", "/tmp/stream"])?;
    out.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .map_or_else(|| fail(format!("wc -c /tmp/stream: {out:?}")), Ok)
}

/// Opens a connection from the pod `client` to port 82 of the pod `server` (at `ip`) that sends
/// a line every 0.2 s for the rest of the case (busybox nc, detached from the exec).
pub(crate) fn open_stream(node: &Node, client: &str, server: &str, ip: IpAddr) -> Res {
    node.in_pod(
        server,
        &[
            "sh",
            "-c",
            // A stdin that never ends: busybox nc closes the connection at its stdin's EOF.
            "sleep 86400 </dev/null 2>/dev/null | nc -l -p 82 > /tmp/stream 2>/dev/null &",
        ],
    )?;
    let stream = format!(
        "setsid sh -c 'while :; do echo tick; sleep 0.2; done | nc {ip} 82' \
         </dev/null >/dev/null 2>&1 &"
    );
    node.in_pod(client, &["sh", "-c", &stream])?;
    node.wait_for(10, "the stream flowing", || {
        streamed(node, server).is_ok_and(|n| n > 0)
    })
}

/// `(polls, polls that found no table)` of `nft list table inet tern_netpol` every 100 ms until
/// `stop`.
fn watch_table(stop: &AtomicBool) -> (u32, u32) {
    let (mut polls, mut absent) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        let listed = Command::new("nft")
            .args(["list", "table", "inet", "tern_netpol"])
            .output()
            .is_ok_and(|o| o.status.success());
        polls += 1;
        absent += u32::from(!listed);
        std::thread::sleep(Duration::from_millis(100));
    }
    (polls, absent)
}

/// Deny-all, then one port open to one client; the agent killed and restarted: no gap.
pub fn network_policy(node: &Node) -> Res {
    let pods = ["pol-server", "pol-client", "pol-other"];
    node.create_pods(&pods)?;
    node.wait_ready(&pods, 90)?;
    node.kubectl(&["label", "pod", "pol-server", "role=pol-server"])?;
    node.kubectl(&["label", "pod", "pol-client", "role=pol-client"])?;
    for port in ["80", "81"] {
        node.in_pod("pol-server", &["httpd", "-p", port, "-h", "/"])?;
    }
    let ips = node.pod_ips("pol-server")?;
    expect(node, &ips, "pol-client", 80, true)?;
    expect(node, &ips, "pol-other", 81, true)?;
    open_stream(node, "pol-client", "pol-server", ips[0])?;

    let t = Instant::now();
    node.kubectl_in(&["apply", "-f", "-"], DENY_ALL)?;
    node.wait_for(30, "the deny-all policy in force", || {
        !connects(node, "pol-client", ips[0], 80)
    })?;
    node.note(&format!("deny-all in force within {:?}", t.elapsed()));
    expect(node, &ips, "pol-client", 80, false)?;
    expect(node, &ips, "pol-other", 80, false)?;
    // The connection opened before the policy still delivers: established traffic is accepted.
    let before = streamed(node, "pol-server")?;
    std::thread::sleep(Duration::from_secs(2));
    let after = streamed(node, "pol-server")?;
    if after <= before {
        return fail(format!(
            "the connection open before deny-all stopped: {before} then {after} bytes"
        ));
    }
    node.note(&format!(
        "connection open before deny-all: {before} -> {after} bytes in 2 s after it"
    ));

    let t = Instant::now();
    node.kubectl_in(&["apply", "-f", "-"], ALLOW_80)?;
    node.wait_for(30, "port 80 open to pol-client", || {
        connects(node, "pol-client", ips[0], 80)
    })?;
    node.note(&format!("allow-80 in force within {:?}", t.elapsed()));
    expect(node, &ips, "pol-client", 80, true)?;
    expect(node, &ips, "pol-client", 81, false)?;
    expect(node, &ips, "pol-other", 80, false)?;
    let table = node.run(
        &mut Node::cmd("nft", &["list", "table", "inet", "tern_netpol"]),
        None,
    )?;
    if !table.contains(&format!("{} : jump in_", ips[0])) {
        return fail(format!("no verdict map entry for {}:\n{table}", ips[0]));
    }

    // The agent killed: the table stays; the restarted agent replaces it only after a full sync.
    let old = node.agent_pod()?;
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| -> Res {
        let table = scope.spawn(|| watch_table(&stop));
        let held = isolation_through_restart(node, &ips, &old);
        stop.store(true, Ordering::Relaxed);
        let (polls, absent) = table.join().unwrap_or((0, u32::MAX));
        held?;
        node.note(&format!(
            "table inet tern_netpol polled {polls} times over the restart: absent {absent}"
        ));
        if absent > 0 {
            return fail(format!("the table was gone in {absent} of {polls} polls"));
        }
        Ok(())
    })?;
    rollout_status(node)?;
    expect(node, &ips, "pol-other", 80, false)?;
    expect(node, &ips, "pol-client", 80, true)?;

    node.kubectl(&["delete", "networkpolicy", "pol-deny-all", "pol-allow-80"])?;
    node.wait_for(30, "the policies gone", || {
        connects(node, "pol-other", ips[0], 80)
    })?;
    node.delete_pods(&pods)
}

/// Kills agent pod `old` and probes the isolation until its successor is ready (120 s at most).
fn isolation_through_restart(node: &Node, ips: &[IpAddr], old: &str) -> Res {
    node.kubectl(&["-n", "tern", "delete", "pod", old, "--wait=false"])?;
    let mut checks = 0;
    let t = Instant::now();
    loop {
        expect(node, &ips[..1], "pol-other", 80, false)?;
        expect(node, &ips[..1], "pol-client", 80, true)?;
        checks += 1;
        let new = node.agent_pod().unwrap_or_default();
        let ready = !new.is_empty()
            && new != *old
            && node
                .kubectl(&["-n", "tern", "get", "pod", &new, "-o", READY])
                .is_ok_and(|r| r.trim() == "true");
        if ready || t.elapsed().as_secs() > 120 {
            break;
        }
    }
    node.note(&format!(
        "agent {old} killed: isolation held in {checks} checks over {:?}",
        t.elapsed()
    ));
    Ok(())
}

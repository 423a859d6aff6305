//! NetworkPolicy enforcement latency as ClusterLoader2 measures it (perf-tests'
//! network-policy-enforcement-latency: a policy created → a probe's first connection that shows
//! it), on the tier's node with the DaemonSet's agent: a client pod starts a connection to a
//! server pod every 20 ms, each start stamped here as its line arrives. Per round: a deny-all
//! policy created → the first connection started after it that fails; an allow policy for the
//! client created on top → the first connection that succeeds; both deleted. The figures go to
//! the case log and stdout; the case fails when a round's policy never shows within 10 s, or
//! when `tern-agent trace` in the agent's pod disagrees with what the probe saw, or finds the
//! node's table different from its answer (first round).

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_cluster::{fail, Node, Res};

const ROUNDS: usize = 10;

const DENY_ALL: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
metadata: {name: lat-deny-all, namespace: default}\n\
spec: {podSelector: {matchLabels: {role: lat-server}}, policyTypes: [Ingress]}\n";

const ALLOW: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
metadata: {name: lat-allow, namespace: default}\n\
spec: {podSelector: {matchLabels: {role: lat-server}}, ingress: [{from: [{podSelector: \
{matchLabels: {role: lat-client}}}], ports: [{protocol: TCP, port: 80}]}]}\n";

/// One connection attempt: when the client started it and how it ended (`None`: not yet).
#[derive(Clone, Copy, Debug)]
struct Attempt {
    started: Instant,
    connected: Option<bool>,
}

/// The client's probe loop and what it printed so far, by attempt number.
struct Prober {
    child: Child,
    attempts: Arc<Mutex<Vec<Attempt>>>,
}

impl Prober {
    /// Starts the loop in `client` against `server`:80 (busybox nc, 1 s timeout, one attempt
    /// every 20 ms in the background, so a dropped SYN delays no later attempt).
    fn start(node: &Node, client: &str, server: IpAddr) -> Res<Prober> {
        let script = format!(
            "rm -f /tmp/lat-stop; i=0; while [ ! -f /tmp/lat-stop ]; do i=$((i+1)); echo \"try $i\"; \
             (nc -w 1 {server} 80 </dev/null >/dev/null 2>&1 && echo \"ok $i\" || echo \"no $i\") & \
             sleep 0.02; done"
        );
        let mut child = node
            .kubectl_cmd(&["exec", client, "--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("kubectl exec {client}: {e}"))?;
        let out = child.stdout.take().ok_or("kubectl exec: no stdout")?;
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&attempts);
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let now = Instant::now();
                let Some((what, n)) = line.split_once(' ') else {
                    continue;
                };
                let Ok(n) = n.parse::<usize>() else { continue };
                let mut a = into
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match what {
                    "try" => {
                        a.resize(
                            n,
                            Attempt {
                                started: now,
                                connected: None,
                            },
                        );
                        a[n - 1] = Attempt {
                            started: now,
                            connected: None,
                        };
                    }
                    "ok" | "no" if n <= a.len() => a[n - 1].connected = Some(what == "ok"),
                    _ => {}
                }
            }
        });
        Ok(Prober { child, attempts })
    }

    /// Waits (up to 10 s) for the first attempt started after `since` that ended `want`: the
    /// time from `since` to that attempt's start (attempts start every 20 ms, so a policy shows
    /// in the first one whose SYN left after it took effect).
    fn first_after(&self, since: Instant, want: bool) -> Option<Duration> {
        let end = since + Duration::from_secs(10);
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
            let a = self
                .attempts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let hit = a
                .iter()
                .find(|t| t.started >= since && t.connected == Some(want));
            if let Some(t) = hit {
                return Some(t.started - since);
            }
        }
        None
    }

    /// Stops the loop in the pod and the exec.
    fn stop(mut self, node: &Node, client: &str) {
        let _ = node.in_pod(client, &["touch", "/tmp/lat-stop"]);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// p50 / p99 / max of `v` in ms.
fn figures(v: &mut [Duration]) -> String {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "p50 {:.0} / p99 {:.0} / max {:.0} ms",
        ms(at(0.5)),
        ms(at(0.99)),
        ms(v[v.len() - 1])
    )
}

/// ROUNDS rounds of deny-all then allow, each timed from `kubectl create`'s return, both pods on
/// the tier's node.
pub fn enforcement_latency(node: &Node) -> Res {
    node.create_pods(&["lat-server", "lat-client"])?;
    measure(node, "")
}

/// The same on two nodes, as ClusterLoader2 runs it across a cluster: the server on node 1 (its
/// agent judges the ingress, and its table is the one the trace checks), the client on node 2.
pub fn enforcement_latency_across(node: &Node) -> Res {
    let on = [
        ("lat-server", node.name.as_str()),
        ("lat-client", node.var("NODE2")),
    ];
    for (pod, host) in on {
        node.kubectl_in(&["apply", "-f", "-"], &node.pod_manifest_on(pod, host))?;
    }
    measure(node, " (client on node 2, server on node 1)")
}

fn measure(node: &Node, placement: &str) -> Res {
    let pods = ["lat-server", "lat-client"];
    node.wait_ready(&pods, 90)?;
    node.kubectl(&["label", "pod", "lat-server", "role=lat-server"])?;
    node.kubectl(&["label", "pod", "lat-client", "role=lat-client"])?;
    node.in_pod("lat-server", &["httpd", "-p", "80", "-h", "/"])?;
    let server = node.pod_ip("lat-server")?;
    let prober = Prober::start(node, "lat-client", server)?;
    let result = rounds(node, &prober);
    prober.stop(node, "lat-client");
    let _ = node.kubectl(&[
        "delete",
        "networkpolicy",
        "lat-deny-all",
        "lat-allow",
        "--ignore-not-found",
    ]);
    let (mut deny, mut allow) = result?;
    let line = format!(
        "enforcement latency over {ROUNDS} rounds{placement} (policy created → the probe shows \
         it): deny-all {}; allow {}",
        figures(&mut deny),
        figures(&mut allow)
    );
    node.note(&line);
    println!("{line}");
    node.delete_pods(&pods)
}

/// `tern-agent trace` in the agent's pod agrees with what the probe saw (client → server:80
/// `allowed`, exit 0, or denied, exit 1), and the node's table with its answer.
fn traced(node: &Node, allowed: bool) -> Res {
    crate::trace::agreed(
        node,
        "default/lat-client",
        "default/lat-server",
        80,
        allowed,
    )
    .map(drop)
}

fn rounds(node: &Node, prober: &Prober) -> Res<(Vec<Duration>, Vec<Duration>)> {
    let (mut deny, mut allow) = (Vec::new(), Vec::new());
    // The probe connects before any policy.
    if prober.first_after(Instant::now(), true).is_none() {
        return fail("the probe never connected before any policy");
    }
    for round in 0..ROUNDS {
        node.kubectl_in(&["create", "-f", "-"], DENY_ALL)?;
        let t = Instant::now();
        let Some(d) = prober.first_after(t, false) else {
            return fail(format!("round {round}: deny-all not in force within 10 s"));
        };
        deny.push(d);
        if round == 0 {
            traced(node, false)?;
        }
        std::thread::sleep(Duration::from_millis(300));
        node.kubectl_in(&["create", "-f", "-"], ALLOW)?;
        let t = Instant::now();
        let Some(d) = prober.first_after(t, true) else {
            return fail(format!("round {round}: the allow not in force within 10 s"));
        };
        allow.push(d);
        if round == 0 {
            traced(node, true)?;
        }
        node.kubectl(&["delete", "networkpolicy", "lat-deny-all", "lat-allow"])?;
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok((deny, allow))
}

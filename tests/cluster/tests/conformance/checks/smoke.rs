//! `smoke`: what a new user tries first on the cluster, each checked: a Deployment behind a
//! ClusterIP Service reached by name (and, dual stack, its AAAA record and IPv6 ClusterIP),
//! `nslookup kubernetes.default` from a pod, a pod's hostPort 8080 reached at the node's address
//! from the host; then the guard: a pod's connection to an address off the machine (TEST-NET-1,
//! and 2001:db8::1 dual stack) is refused at once and counted. The client and the hostPort pod
//! are on node 1 (with two nodes too): the guard counted is node 1's.

use crate::images::AGNHOST;
use tern_cluster::{fail, Node, Res};

use super::{agnhost_pod, captured, cleaning};

/// The cluster's `kubernetes` Service address (the service range's first).
const KUBERNETES_SERVICE_IP: &str = "10.99.220.1";

/// The check; the Deployment, Service and pods removed however it ends.
pub fn smoke(node: &Node) -> Res {
    let image = format!("--image={AGNHOST}");
    node.kubectl(&[
        "create",
        "deployment",
        "web",
        &image,
        "--replicas=2",
        "--port=8080",
        "--",
        "/agnhost",
        "netexec",
        "--http-port=8080",
    ])?;
    cleaning(
        node,
        || web_and_hostport(node),
        &[
            "delete deployment web --wait=false --ignore-not-found",
            "delete service web --ignore-not-found",
            "delete pod client hostport --ignore-not-found --wait=true --timeout=60s",
        ],
    )
}

fn web_and_hostport(node: &Node) -> Res {
    node.kubectl(&[
        "expose",
        "deployment",
        "web",
        "--port=80",
        "--target-port=8080",
    ])?;
    let dual = !node.var("SERVICE_CIDR6").is_empty();
    if dual {
        // the Service takes an IPv6 ClusterIP too, before anyone asks for its AAAA record
        // (CoreDNS would cache the empty answer for 30 s)
        let patch = r#"{"spec":{"ipFamilyPolicy":"PreferDualStack"}}"#;
        node.kubectl(&["patch", "service", "web", "-p", patch])?;
    }
    let node_ip = node.var("NODE_IP");
    let on = Some(node.name.as_str());
    // `kubectl run`, as a new user starts a pod (its container is named `client`)
    let selector = format!(
        r#"{{"spec": {{"nodeSelector": {{"kubernetes.io/hostname": "{}"}}}}}}"#,
        node.name
    );
    let image = format!("--image={AGNHOST}");
    let overrides = format!("--overrides={selector}");
    let run = ["run", "client", &image, "--restart=Never", &overrides];
    node.kubectl(&[&run[..], &["--command", "--", "/agnhost", "pause"]].concat())?;
    let hostport = agnhost_pod("hostport", "", on, "args: [netexec, --http-port=8080]")
        + &format!("    ports: [{{containerPort: 8080, hostPort: 8080, hostIP: {node_ip}}}]\n");
    node.kubectl_in(&["apply", "-f", "-"], &hostport)?;
    node.kubectl(&["rollout", "status", "deployment/web", "--timeout=120s"])?;
    node.wait_ready(&["client", "hostport"], 120)?;
    // kube-proxy programs the Service once its endpoints are ready, a moment after the rollout
    let url = "http://web.default.svc.cluster.local/hostname";
    let mut got = String::new();
    node.wait_for(30, "web Service reached by name", || {
        in_client(node, &["curl", "-sf", "--max-time", "5", url])
            .map(|out| got = out)
            .is_ok()
    })?;
    let web_pods = node.kubectl(&["get", "pods", "-l", "app=web", "-o", "name"])?;
    answered_by_web(&got, &web_pods, "web Service")?;
    node.note(&format!(
        "Deployment behind ClusterIP Service web: answered by {got}"
    ));
    if dual {
        web_over_ipv6(node, &web_pods)?;
    }
    let got = in_client(node, &["nslookup", "kubernetes.default"])?;
    let want = format!("Address: {KUBERNETES_SERVICE_IP}");
    if !got.lines().any(|l| l.ends_with(&want)) {
        return fail(format!(
            "nslookup kubernetes.default: no {KUBERNETES_SERVICE_IP}: {got}"
        ));
    }
    let url = format!("http://{node_ip}:8080/hostname");
    let got = node.run(
        &mut Node::cmd("curl", &["-sf", "--max-time", "10", &url]),
        None,
    )?;
    if captured(&got) != "hostport" {
        return fail(format!(
            "hostPort 8080 at {node_ip} answered {got:?}, not hostport"
        ));
    }
    node.note(&format!("hostPort 8080 at {node_ip}: answered by {got}"));
    guard(node)
}

/// Dual stack: CoreDNS answers the Service's AAAA record, kube-proxy forwards its IPv6
/// ClusterIP to a web pod over IPv6.
fn web_over_ipv6(node: &Node, web_pods: &str) -> Res {
    let ip6 = node.kubectl(&[
        "get",
        "service",
        "web",
        "-o",
        "jsonpath={.spec.clusterIPs[1]}",
    ])?;
    let cidr6 = node.var("SERVICE_CIDR6");
    let prefix = format!("{}:", cidr6.split("::").next().unwrap_or(cidr6));
    if !ip6.starts_with(&prefix) {
        return fail(format!(
            "web Service has no IPv6 ClusterIP in {cidr6}: {ip6:?}"
        ));
    }
    let name = "web.default.svc.cluster.local";
    let mut last = String::new();
    let aaaa = node.wait_for(40, &format!("AAAA {name}"), || {
        let got = in_client(node, &["dig", "+short", "AAAA", name]);
        last = got.map_or_else(|e| e, |out| captured(&out).to_owned());
        last == ip6
    });
    if aaaa.is_err() {
        return fail(format!("AAAA {name}: {last:?}, not {ip6}"));
    }
    node.note(&format!("AAAA {name}: {ip6}"));
    let url = format!("http://[{ip6}]/hostname");
    let mut got = String::new();
    node.wait_for(30, &format!("web Service reached at [{ip6}]"), || {
        in_client(node, &["curl", "-sfg", "--max-time", "5", &url])
            .map(|out| got = out)
            .is_ok()
    })?;
    answered_by_web(&got, web_pods, &format!("web Service at [{ip6}]"))?;
    node.note(&format!("web Service at [{ip6}]: answered by {got}"));
    Ok(())
}

/// The guard: a pod's connection to an address off the machine fails, and node 1's guard
/// counts it rejected.
fn guard(node: &Node) -> Res {
    let host = node.node1();
    let mut off = vec!["192.0.2.1"];
    if !node.var("NODE_IP6").is_empty() {
        off.push("[2001:db8::1]");
    }
    for addr in off {
        let before = node.guard_rejected(&host)?;
        let url = format!("http://{addr}/");
        if in_client(node, &["curl", "-sg", "--max-time", "5", &url]).is_ok() {
            return fail(format!("a pod reached {addr}: the guard let it out"));
        }
        let after = node.guard_rejected(&host)?;
        if after <= before {
            return fail(format!(
                "guard counter did not move for {addr} ({before} -> {after})"
            ));
        }
        node.note(&format!(
            "guard: a pod's connection to {addr} rejected ({before} -> {after} packets)"
        ));
    }
    Ok(())
}

/// `kubectl exec client -- CMD`: its stdout.
fn in_client(node: &Node, cmd: &[&str]) -> Res<String> {
    node.kubectl(&[&["exec", "client", "--"], cmd].concat())
}

/// `got` (a hostname) is one of `web_pods` (`kubectl get pods -o name` lines).
fn answered_by_web(got: &str, web_pods: &str, what: &str) -> Res {
    let got = captured(got);
    if web_pods.lines().any(|p| p == format!("pod/{got}")) {
        return Ok(());
    }
    fail(format!(
        "{what} answered {got:?}, not a web pod: {web_pods}"
    ))
}

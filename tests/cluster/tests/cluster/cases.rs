//! `install` (deploy/ applied as an operator does) and `pods` (two pods wired, ping, sysctls,
//! nothing left after DEL, the agent's metrics).

use std::net::IpAddr;

use tern_cluster::{fail, Node, Res};

/// The files tern's DaemonSet writes on a node.
pub fn node_files(node: &Node) -> Vec<std::path::PathBuf> {
    let mut f = vec![
        node.cni_net.join("10-tern.conflist"),
        node.cni_net.join("tern-kubeconfig"),
        "/run/tern/agent.sock".into(),
        "/run/tern/metrics.sock".into(),
    ];
    // tern's plugins, the reference portmap and bandwidth deploy/'s chain runs, and the ledger of
    // the reference plugins tern placed (none was on this node before the tier)
    f.extend(
        [
            "tern",
            "tern-tuning",
            "tern-ipam",
            "tern-lookup",
            "portmap",
            "bandwidth",
            ".tern-reference-plugins",
        ]
        .iter()
        .map(|p| node.cni_bin.join(p)),
    );
    f
}

/// The agent's egress NAT table (`nft -s list table inet tern_nat`), empty when absent.
pub fn nat_table(node: &Node) -> String {
    node.run(
        &mut Node::cmd("nft", &["-s", "list", "table", "inet", "tern_nat"]),
        None,
    )
    .unwrap_or_default()
}

pub fn install(node: &Node) -> Res {
    let deploy = node.root.join("deploy");
    // The namespace first, on its own: the ConfigMap below must exist before the DaemonSet starts.
    let ns = deploy.join("00-namespace.yaml");
    node.kubectl(&["apply", "-f", &ns.to_string_lossy()])?;
    api_endpoint(node)?;
    // As an operator does: the egress NAT's cluster ranges set to this cluster's before applying.
    // each family's pod range, then its service range (the order the NAT table's sets keep)
    let (pods, services) = cluster_ranges(node);
    let ranges: Vec<String> = pods
        .iter()
        .zip(&services)
        .flat_map(|(p, s)| [p.clone(), s.clone()])
        .collect();
    let ranges = ranges.join(",");
    let copy = node.kt.join("deploy");
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(&copy).map_err(|e| format!("mkdir {}: {e}", copy.display()))?;
    let entries = std::fs::read_dir(&deploy).map_err(|e| format!("read deploy/: {e}"))?;
    let mut set = false;
    for e in entries.flatten() {
        let p = e.path();
        if !p.is_file() {
            continue;
        }
        let mut text =
            std::fs::read_to_string(&p).map_err(|e| format!("read {}: {e}", p.display()))?;
        if p.file_name().is_some_and(|n| n == "configmap.yaml") {
            let lines: Vec<String> = text
                .lines()
                .map(|l| match l.find("TERN_CLUSTER_CIDRS: ") {
                    Some(i) => {
                        set = true;
                        format!("{}TERN_CLUSTER_CIDRS: \"{ranges}\"", &l[..i])
                    }
                    None => l.to_owned(),
                })
                .collect();
            text = lines.join("\n") + "\n";
        }
        let to = copy.join(e.file_name());
        std::fs::write(&to, text).map_err(|e| format!("write {}: {e}", to.display()))?;
    }
    if !set {
        return fail("cannot set TERN_CLUSTER_CIDRS: deploy/configmap.yaml has no such key");
    }
    node.kubectl(&["apply", "-f", &format!("{}/", copy.display())])?;
    node.kubectl(&[
        "-n",
        "tern",
        "rollout",
        "status",
        "daemonset/tern-agent",
        "--timeout=120s",
    ])?;
    installed(node)?;
    nat_rules(node)?;
    node.wait_for(90, "node Ready", || node.node_ready())
}

/// The kube-proxy-less cluster's API server address for the agent, in namespace tern (the
/// DaemonSet reads ConfigMap kubernetes-services-endpoint when it exists).
pub fn api_endpoint(node: &Node) -> Res {
    let port = format!(
        "--from-literal=KUBERNETES_SERVICE_PORT={}",
        node.var("API_PORT")
    );
    node.kubectl(&[
        "-n",
        "tern",
        "create",
        "configmap",
        "kubernetes-services-endpoint",
        "--from-literal=KUBERNETES_SERVICE_HOST=127.0.0.1",
        &port,
    ])
    .map(drop)
}

/// This cluster's (pod ranges, service ranges), IPv4 first, IPv6 when the cluster is dual stack:
/// what an operator sets egress NAT's cluster ranges to.
pub fn cluster_ranges(node: &Node) -> (Vec<String>, Vec<String>) {
    let mut pods = vec![node.var("CLUSTER_CIDR").to_owned()];
    let mut services = vec![node.var("SERVICE_CIDR").to_owned()];
    if !node.var("CLUSTER_CIDR6").is_empty() {
        pods.push(node.var("CLUSTER_CIDR6").to_owned());
        services.push(node.var("SERVICE_CIDR6").to_owned());
    }
    (pods, services)
}

/// What the install put on the node: every file of [`node_files`], the kubeconfig mode 0600, the
/// node's podCIDRs in the conflist, the reference plugins the pinned release's bytes.
pub fn installed(node: &Node) -> Res {
    for f in node_files(node) {
        if !f.exists() {
            return fail(format!("{} not installed", f.display()));
        }
    }
    let kc = node.cni_net.join("tern-kubeconfig");
    let mode = std::fs::metadata(&kc)
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777)
        .map_err(|e| format!("stat {}: {e}", kc.display()))?;
    if mode != 0o600 {
        return fail(format!("kubeconfig mode {mode:o}"));
    }
    // The conflist's ranges are the node's podCIDRs (one per family), read by the install from
    // the real Node.
    let cidrs = node.pod_cidrs()?;
    let conflist = node.cni_net.join("10-tern.conflist");
    let text = std::fs::read_to_string(&conflist).map_err(|e| format!("read conflist: {e}"))?;
    for c in &cidrs {
        if !text.contains(&format!("\"{c}\"")) {
            return fail(format!("conflist lacks the node's podCIDR {c}: {text}"));
        }
    }
    // the reference plugins are the image's copies of the pinned release scripts/build-go built
    for p in ["portmap", "bandwidth"] {
        let (ours, built) = (
            node.cni_bin.join(p),
            format!("{}/plugins/{p}", node.var("GOBIN_DIR")),
        );
        if std::fs::read(&ours).ok() != std::fs::read(&built).ok() {
            return fail(format!("{} is not {built}", ours.display()));
        }
    }
    Ok(())
}

/// The agent's egress NAT: this node's podCIDRs masqueraded outside the cluster's ranges (both
/// families on a dual-stack cluster), within 30 s.
pub fn nat_rules(node: &Node) -> Res {
    let (cluster, service) = (node.var("CLUSTER_CIDR"), node.var("SERVICE_CIDR"));
    let (cluster6, service6) = (node.var("CLUSTER_CIDR6"), node.var("SERVICE_CIDR6"));
    let cidrs = node.pod_cidrs()?;
    let cidr = node.pod_cidr()?;
    let mut rules = vec![format!(
        "ip saddr {cidr} ip daddr != {{ {cluster}, {service}, 224.0.0.0/4 }} masquerade"
    )];
    if let Some(c6) = cidrs.iter().find(|c| c.is_ipv6()) {
        rules.push(format!(
            "ip6 saddr {c6} ip6 daddr != {{ {cluster6}, {service6}, ff00::/8 }} masquerade"
        ));
    }
    let want = if cluster6.is_empty() { 1 } else { 2 };
    if cidrs.len() != want {
        return fail(format!("node podCIDRs {cidrs:?}: want {want}"));
    }
    node.wait_for(30, "egress NAT table", || {
        let t = nat_table(node);
        rules.iter().all(|r| t.contains(r))
    })
}

pub fn pods(node: &Node) -> Res {
    let cidr = node.pod_cidr()?;
    node.create_pods(&["pod-a", "pod-b"])?;
    node.wait_ready(&["pod-a", "pod-b"], 90)?;
    let (ipa, ipb) = (node.pod_ip("pod-a")?, node.pod_ip("pod-b")?);
    node.note(&format!("pod-a {ipa} pod-b {ipb} (node podCIDR {cidr})"));
    for (pod, ip) in [("pod-a", ipa), ("pod-b", ipb)] {
        let IpAddr::V4(v4) = ip else {
            return fail(format!("{pod} IP {ip} is not IPv4"));
        };
        if !cidr.contains(v4) {
            return fail(format!("{pod} IP {ip} not in {cidr}"));
        }
    }
    node.ping_from("pod-a", &ipb.to_string())?;
    node.ping_from("pod-b", &ipa.to_string())?;
    // the host (the node's root netns), through the pod's link-local gateway
    node.ping_from("pod-a", &node.host_ipv4()?.to_string())?;
    for (key, want) in [
        ("tcp_keepalive_time", "600"),
        ("tcp_keepalive_intvl", "60"),
        ("tcp_keepalive_probes", "5"),
    ] {
        let got = node.in_pod("pod-a", &["cat", &format!("/proc/sys/net/ipv4/{key}")])?;
        if got.trim() != want {
            return fail(format!("{key} is {} in pod-a, not {want}", got.trim()));
        }
    }
    let routes = node.run(&mut Node::cmd("ip", &["route", "show"]), None)?;
    if !routes
        .lines()
        .any(|l| l.starts_with(&format!("{ipa} dev tern")))
    {
        return fail(format!("no host route to {ipa} through a tern veth"));
    }
    node.wired(ipa)?;
    node.wired(ipb)?;
    node.delete_pods(&["pod-a", "pod-b"])?;
    // the kubelet removes the sandbox (and so runs DEL) right after the pod is gone
    node.wait_for(60, "sandboxes of pod-a and pod-b removed", || {
        node.crictl(&["pods", "--name", "pod-[ab]", "-q"])
            .is_ok_and(|o| o.trim().is_empty())
    })?;
    node.nothing_left(ipa)?;
    node.nothing_left(ipb)?;
    metrics(node)
}

/// What Prometheus scrapes, where the pod's annotations say: tern's verbs counted by the agent
/// from the plugins' reports (at least pod-a's and pod-b's ADDs and DELs, by tern and
/// tern-tuning).
fn metrics(node: &Node) -> Res {
    let ann = |key: &str| {
        node.kubectl(&[
            "-n",
            "tern",
            "get",
            "daemonset",
            "tern-agent",
            "-o",
            &format!("jsonpath={{.spec.template.metadata.annotations.prometheus\\.io/{key}}}"),
        ])
    };
    let (port, path) = (ann("port")?, ann("path")?);
    let url = format!("http://127.0.0.1:{}{}", port.trim(), path.trim());
    let m = node
        .run(&mut Node::cmd("curl", &["-sf", &url]), None)
        .map_err(|e| format!("no metrics at {url}: {e}"))?;
    if !m
        .lines()
        .any(|l| l.starts_with("tern_build_info{version=\""))
    {
        return fail("no tern_build_info");
    }
    for p in ["tern", "tern-tuning"] {
        for v in ["ADD", "DEL"] {
            let key = format!("tern_cni_verb_total{{plugin=\"{p}\",verb=\"{v}\",code=\"0\"}}");
            let n = m
                .lines()
                .filter_map(|l| l.split_once(' '))
                .find(|(k, _)| *k == key)
                .and_then(|(_, n)| n.trim().parse::<f64>().ok());
            if n.unwrap_or(0.0) < 2.0 {
                let verbs: Vec<&str> = m
                    .lines()
                    .filter(|l| l.starts_with("tern_cni_verb"))
                    .collect();
                return fail(format!(
                    "tern_cni_verb_total {p} {v} code 0 is {n:?}, want >= 2: {}",
                    verbs.join("; ")
                ));
            }
        }
    }
    Ok(())
}

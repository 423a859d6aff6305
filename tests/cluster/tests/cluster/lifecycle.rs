//! The node's readiness through the runtime's CNI STATUS, and uninstall.

use std::path::Path;
use std::time::Duration;

use tern_cluster::{fail, Node, Res};

use crate::cases::nat_table;
use crate::day2::rollout_status;

/// The DaemonSet's pod leaves the node (a nodeSelector no node matches).
fn agent_away(node: &Node) -> Res {
    node.kubectl(&[
        "-n",
        "tern",
        "patch",
        "daemonset",
        "tern-agent",
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"nodeSelector":{"tern.test/nowhere":"true"}}}}}"#,
    ])?;
    node.wait_for(90, "tern-agent pod gone", || {
        node.agent_pods("{.metadata.name}")
            .is_ok_and(|p| p.is_empty())
    })
}

/// The nodeSelector removed; the init container reinstalls and mints a fresh token.
fn agent_back(node: &Node) -> Res {
    node.kubectl(&[
        "-n",
        "tern",
        "patch",
        "daemonset",
        "tern-agent",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]"#,
    ])?;
    rollout_status(node)
}

/// The agent gone and the token expired: the runtime's STATUS call (containerd 2 asks every CNI
/// network's STATUS on the CRI Status call) fails with tern's code 50, so the kubelet reports
/// NetworkReady=false and the node NotReady; no pod starts. The agent back: Ready again, pods
/// start.
pub fn network_not_ready(node: &Node) -> Res {
    node.wait_for(60, "node Ready", || node.node_ready())?;
    agent_away(node)?;
    // the agent's socket is gone or refuses: STATUS cannot count on a refresh
    if std::os::unix::net::UnixStream::connect("/run/tern/agent.sock").is_ok() {
        return fail("the agent socket still accepts connections after the agent left");
    }
    // with a valid token and no agent, the node stays Ready (the token still works)
    std::thread::sleep(Duration::from_secs(12));
    let (status, msg) = node.ready()?;
    if status != "True" {
        return fail(format!("node not Ready with a valid token: {msg}"));
    }
    node.expire_token()?;
    node.wait_for(60, "node NotReady through CNI STATUS", || {
        node.ready().is_ok_and(|(s, _)| s == "False")
    })?;
    let (_, msg) = node.ready()?;
    node.note(&format!("Ready=False: {msg}"));
    let reason = msg.find("network not ready");
    if !reason.is_some_and(|i| msg[i..].contains("has expired")) {
        return fail(format!("NotReady for another reason: {msg}"));
    }
    // a pod does not start while the network is not ready
    node.create_pods(&["pod-nr"])?;
    std::thread::sleep(Duration::from_secs(8));
    let ip = node.kubectl(&["get", "pod", "pod-nr", "-o", "jsonpath={.status.podIP}"])?;
    if !ip.trim().is_empty() {
        return fail(format!(
            "pod-nr got an IP ({ip}) while the network was not ready"
        ));
    }
    agent_back(node)?;
    node.wait_for(60, "node Ready again", || node.node_ready())?;
    node.wait_ready(&["pod-nr"], 90)?;
    node.delete_pods(&["pod-nr"])
}

const PLUGINS: [&str; 4] = ["tern", "tern-tuning", "tern-ipam", "tern-lookup"];
/// The reference plugins `tern-agent install` placed on this node (none were there before the
/// tier), and its ledger of them: kept while tern drains, removed by the uninstall after.
const REFERENCE: [&str; 3] = ["portmap", "bandwidth", ".tern-reference-plugins"];

/// The DaemonSet deleted as deploy/README.md says (`--cascade=foreground`) and its pod gone (its
/// preStop hook has run).
pub(crate) fn agent_deleted(node: &Node) -> Res {
    let pod = node.agent_pod()?;
    node.kubectl(&[
        "-n",
        "tern",
        "delete",
        "daemonset",
        "tern-agent",
        "--cascade=foreground",
        "--wait=true",
        "--timeout=60s",
    ])?;
    node.wait_for(60, &format!("agent pod {pod} gone"), || {
        !node.ok(&mut node.kubectl_cmd(&["-n", "tern", "get", "pod", &pod]))
    })
}

/// True when the agent's egress NAT table exists.
fn nat_exists(node: &Node) -> bool {
    !nat_table(node).is_empty()
}

/// Runs the uninstall an operator finishes by hand once the last tern pod is gone
/// (deploy/README.md, "Uninstall": tern's image through `ctr`, the node's CNI dirs bind-mounted).
fn uninstall_by_hand(node: &Node) -> Res {
    std::fs::create_dir_all("/run/cni/tern").map_err(|e| format!("mkdir /run/cni/tern: {e}"))?;
    let ctr = format!("{}/containerd/ctr", node.var("GOBIN_DIR"));
    let mount = |src: &str, dst: &str, mode: &str| {
        format!("type=bind,src={src},dst={dst},options=rbind:{mode}")
    };
    let bin = mount(&node.cni_bin.to_string_lossy(), "/host/opt/cni/bin", "rw");
    let net = mount(&node.cni_net.to_string_lossy(), "/host/etc/cni/net.d", "rw");
    let state = mount("/run/cni/tern", "/host/run/cni/tern", "ro");
    let out = node.run(
        &mut Node::cmd(
            &ctr,
            &[
                "--address",
                node.var("CRI_SOCK"),
                "-n",
                "k8s.io",
                "run",
                "--rm",
                "--privileged",
                "--net-host",
                "--mount",
                &bin,
                "--mount",
                &net,
                "--mount",
                &state,
                node.var("TERN_IMAGE"),
                "tern-uninstall",
                "tern-agent",
                "uninstall",
                // the case saw the sandbox removed (crictl), as deploy/README.md's finish asks
                "--sandbox-removal-wait",
                "0s",
            ],
        ),
        None,
    )?;
    node.note(&format!("uninstall by hand: {}", out.trim()));
    Ok(())
}

/// Drains and uninstalls, as deploy/README.md ("Uninstall") describes. A restarted
/// agent pod (DaemonSet kept) uninstalls nothing. The DaemonSet deleted with a pod still wired
/// by tern: the preStop hook makes the conflist draining (kept, `"draining": true`, the mark
/// beside it) and keeps the kubeconfig, the plugins and the egress NAT table; the runtime's
/// STATUS answers 50, so the node turns NotReady with tern's "draining" message and no new pod
/// starts; the rest of deploy/ deleted (`kubectl delete -f deploy/`); the wired pod, deleted
/// afterwards, is torn down with nothing left: its DEL (the last attachment's) releases the
/// kubeconfig and the egress NAT table, and the kubelet's repeat DEL of the stopped sandbox
/// (containerd 2) still finds the conflist and plugins, so the sandbox is removed. The
/// operator's finishing command then removes everything else of tern's and nothing else.
pub fn uninstall(node: &Node) -> Res {
    let conflist = node.cni_net.join("10-tern.conflist");
    let kubeconfig = node.cni_net.join("tern-kubeconfig");
    let mark = node.cni_net.join("tern-uninstalling");
    let old = node.agent_pod()?;
    node.kubectl(&[
        "-n",
        "tern",
        "delete",
        "pod",
        &old,
        "--wait=true",
        "--timeout=60s",
    ])?;
    if !conflist.exists() {
        return fail("a restarted agent pod removed the conflist");
    }
    rollout_status(node)?;
    // pod-u publishes a hostPort: its DEL through the draining chain must reach portmap too
    let pod_u = crate::chain::pod(node, "pod-u", "", "", "{containerPort: 80, hostPort: 8081}");
    node.kubectl_in(&["apply", "-f", "-"], &pod_u)?;
    node.wait_ready(&["pod-u"], 90)?;
    let ip = node.pod_ip("pod-u")?;
    if crate::chain::rules_of(&crate::chain::nat(node)?, ip, 8081).is_empty() {
        return fail("no portmap rule for pod-u's hostPort 8081");
    }
    let t0 = std::time::Instant::now();
    agent_deleted(node)?;
    node.note(&format!("{:?}: agent pod gone", t0.elapsed()));
    let deploy = node.root.join("deploy");
    node.kubectl(&[
        "delete",
        "-f",
        &format!("{}/", deploy.display()),
        "--ignore-not-found",
        "--wait=true",
        "--timeout=120s",
    ])?;
    node.note(&format!("{:?}: deploy/ deleted", t0.elapsed()));
    let text = std::fs::read_to_string(&conflist)
        .map_err(|e| format!("the conflist is gone while pod-u is wired by tern: {e}"))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("conflist: {e}"))?;
    let draining = json["plugins"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["type"] == "tern"))
        .is_some_and(|p| p["draining"] == true);
    if !draining {
        return fail(format!("the conflist is not draining: {text}"));
    }
    if !mark.exists() {
        return fail("no uninstall mark beside the draining conflist");
    }
    if !kubeconfig.exists() {
        return fail("the kubeconfig was removed while pod-u is wired by tern");
    }
    let missing: Vec<&str> = PLUGINS
        .iter()
        .chain(REFERENCE.iter())
        .copied()
        .filter(|p| !node.cni_bin.join(p).exists())
        .collect();
    if !missing.is_empty() {
        return fail(format!(
            "plugins removed while pod-u is wired by tern: {missing:?}"
        ));
    }
    if !nat_exists(node) {
        return fail("the egress NAT table was removed while pod-u is wired by tern");
    }
    // the runtime's STATUS answers 50 while draining: the kubelet reports the network not ready
    node.wait_for(60, "node NotReady through CNI STATUS (draining)", || {
        node.ready().is_ok_and(|(s, _)| s == "False")
    })?;
    let (_, msg) = node.ready()?;
    node.note(&format!("{:?}: Ready=False: {msg}", t0.elapsed()));
    if !msg.contains("draining") {
        return fail(format!("NotReady for another reason than draining: {msg}"));
    }
    node.create_pods(&["pod-v"])?;
    std::thread::sleep(Duration::from_secs(8));
    let v_ip = node.kubectl(&["get", "pod", "pod-v", "-o", "jsonpath={.status.podIP}"])?;
    if !v_ip.trim().is_empty() {
        return fail(format!("pod-v got an IP ({v_ip}) while tern was draining"));
    }
    node.delete_pods(&["pod-v", "pod-u"])?;
    node.wait_for(60, "sandbox of pod-u removed", || {
        node.crictl(&["pods", "--name", "pod-u", "-q"])
            .is_ok_and(|o| o.trim().is_empty())
    })?;
    node.nothing_left(ip)?;
    let left = crate::chain::rules_of(&crate::chain::nat(node)?, ip, 8081);
    if !left.is_empty() {
        return fail(format!(
            "portmap rules of pod-u left after its DEL through the draining chain:\n{}",
            left.join("\n")
        ));
    }
    node.note(&format!("{:?}: pod-u torn down", t0.elapsed()));
    // The last DEL released what no DEL needs, and kept what the repeat DEL needed.
    if kubeconfig.exists() {
        return fail("the kubeconfig is left after the last tern pod's DEL");
    }
    if nat_exists(node) {
        return fail("the egress NAT table is left after the last tern pod's DEL");
    }
    if !conflist.exists() {
        return fail("the conflist went with the last DEL: the runtime's repeat DEL cannot run");
    }
    uninstall_by_hand(node)?;
    node.note(&format!("{:?}: uninstalled by hand", t0.elapsed()));
    nothing_of_tern_left(node, "the uninstall with no tern pod left")
}

/// Nothing of tern's is left on the node (`after` names the step, for the message): no conflist,
/// kubeconfig, uninstall mark, plugin or reference plugin tern installed (a file the node had
/// before the tier stays, and so does the node's host-local), no egress NAT table, no tern link.
pub fn nothing_of_tern_left(node: &Node, after: &str) -> Res {
    let conflist = node.cni_net.join("10-tern.conflist");
    let kubeconfig = node.cni_net.join("tern-kubeconfig");
    let mark = node.cni_net.join("tern-uninstalling");
    let mut files = vec![conflist, kubeconfig, mark];
    files.extend(
        PLUGINS
            .iter()
            .chain(REFERENCE.iter())
            .map(|p| node.cni_bin.join(p)),
    );
    // a name the node had before the tier (its own portmap, say) is never tern's to remove
    let preexisting = std::fs::read_to_string(node.kt.join("preexisting")).unwrap_or_default();
    for f in files {
        let before = preexisting.lines().any(|l| Path::new(l) == f);
        if f.exists() != before {
            return fail(format!(
                "{} {} after {after}",
                f.display(),
                if before {
                    "removed (it was on the node before tern)"
                } else {
                    "left"
                }
            ));
        }
    }
    if !node.cni_bin.join("host-local").exists() {
        return fail("uninstall removed a file that is not tern's");
    }
    if nat_exists(node) {
        return fail(format!("the egress NAT table left after {after}"));
    }
    if !node.tern_links()?.is_empty() {
        return fail(format!("tern links left: {:?}", node.tern_links()?));
    }
    Ok(())
}

//! The day-two cases of pods: a sandbox that dies, the agent killed, the API server stopped, the
//! DaemonSet rolled to a new image.

use tern_cluster::{fail, Node, Res};

/// `kubectl -n tern rollout status daemonset/tern-agent --timeout=120s`.
pub fn rollout_status(node: &Node) -> Res {
    node.kubectl(&[
        "-n",
        "tern",
        "rollout",
        "status",
        "daemonset/tern-agent",
        "--timeout=120s",
    ])
    .map(drop)
}

/// The sandbox IDs of `pod` (crictl's name filter), with `--state ready` when `ready`.
fn sandboxes(node: &Node, pod: &str, ready: bool) -> Res<String> {
    let mut args = vec!["pods", "--name", pod, "-q"];
    if ready {
        args.extend(["--state", "ready"]);
    }
    Ok(node.crictl(&args)?.trim().to_owned())
}

/// A pod whose sandbox dies is given a new one by the kubelet (tern's DEL, then ADD) and works.
pub fn sandbox_recreated(node: &Node) -> Res {
    node.create_pods(&["pod-s", "pod-t"])?;
    node.wait_ready(&["pod-s", "pod-t"], 90)?;
    let ip1 = node.pod_ip("pod-s")?;
    let old = sandboxes(node, "pod-s", false)?;
    node.crictl(&["stopp", &old])?;
    node.wait_for(90, "a new sandbox for pod-s", || {
        sandboxes(node, "pod-s", true).is_ok_and(|s| !s.is_empty())
    })?;
    node.wait_ready(&["pod-s"], 90)?;
    let new = sandboxes(node, "pod-s", true)?;
    if new == old {
        return fail("sandbox not recreated");
    }
    node.wait_for(30, "pod-s's new IP reported", || {
        node.pod_ip("pod-s").is_ok()
    })?;
    let ip2 = node.pod_ip("pod-s")?;
    node.note(&format!("sandbox {old} ({ip1}) -> {new} ({ip2})"));
    if ip1 != ip2 {
        node.nothing_left(ip1)?;
    }
    node.ping_from("pod-t", &ip2.to_string())?;
    node.ping_from("pod-s", &node.pod_ip("pod-t")?.to_string())?;
    node.delete_pods(&["pod-s", "pod-t"])
}

/// The agent pod deleted: the plugin's token stays valid, pods start; the DaemonSet brings a new
/// one (its init container first). tern's ADD waits for the agent's NetworkPolicy admission,
/// connecting again while nothing listens; a pod whose wait ends first gets code 11 and starts on
/// a kubelet retry once the agent is back, within the 90 s.
pub fn agent_pod_deleted(node: &Node) -> Res {
    let old = node.agent_pod()?;
    node.kubectl(&["-n", "tern", "delete", "pod", &old, "--wait=false"])?;
    node.create_pods(&["pod-c"])?;
    node.wait_ready(&["pod-c"], 90)?;
    rollout_status(node)?;
    node.delete_pods(&["pod-c"])
}

/// The API server stopped: deleting a pod still completes (DEL never waits on the API), a new
/// pod cannot start (the kubelet cannot even see it) and starts once the server is back.
pub fn apiserver_down(node: &Node) -> Res {
    node.create_pods(&["pod-d"])?;
    node.wait_ready(&["pod-d"], 90)?;
    let ip = node.pod_ip("pod-d")?;
    let sandbox = sandboxes(node, "pod-d", false)?;
    node.sh(&["stop_apiserver"], &[])?;
    // the kubelet cannot learn of a deletion without the API: stop and remove the sandbox as the
    // kubelet would on eviction, through the CRI, which runs tern's DEL
    node.crictl(&["stopp", &sandbox])?;
    node.crictl(&["rmp", &sandbox])?;
    node.nothing_left(ip)?;
    node.start_apiserver(&[], &[])?;
    node.delete_pods(&["pod-d"])?;
    node.create_pods(&["pod-e"])?;
    node.wait_ready(&["pod-e"], 90)?;
    node.delete_pods(&["pod-e"])
}

/// tern's image (`tern-xtask image`) as `<TERN_IMAGE's repository>:TAG`, imported into the node's
/// runtime: its name. With `version`, its binaries report that version (`tern-xtask image
/// --version`: the same release build, the version stamp rewritten in the image's copies).
///
/// # Errors
/// tern-xtask or the import failing.
pub fn next_image(node: &Node, tag: &str, version: Option<&str>) -> Res<String> {
    let image = node.var("TERN_IMAGE");
    let next = format!("{}:{tag}", image.rsplit_once(':').map_or(image, |(r, _)| r));
    let archive = node.kt.join(format!("images/{tag}.oci.tar"));
    let archive = archive.to_string_lossy();
    let xtask = tern_testkit::exec::bin_dir().join("tern-xtask");
    let mut build = Node::cmd(&xtask.to_string_lossy(), &[]);
    build.args(["image", "--name", &next, "--out", &archive]);
    if let Some(v) = version {
        build.args(["--version", v]);
    }
    node.run(&mut build, None)?;
    node.sh(&["import_image", &archive, &next], &[])?;
    Ok(next)
}

/// The DaemonSet rolled to a new image: pods running through it keep their network.
pub fn rollout(node: &Node) -> Res {
    node.create_pods(&["pod-r", "pod-q"])?;
    node.wait_ready(&["pod-r", "pod-q"], 90)?;
    let ip = node.pod_ip("pod-r")?;
    let next = next_image(node, "rollout-test", None)?;
    node.kubectl(&[
        "-n",
        "tern",
        "set",
        "image",
        "daemonset/tern-agent",
        &format!("install={next}"),
        &format!("agent={next}"),
    ])?;
    rollout_status(node)?;
    let running = node.agent_pods("{.spec.containers[0].image}")?;
    if running != [next.as_str()] {
        return fail(format!("the agent runs {running:?}, not {next}"));
    }
    node.ping_from("pod-q", &ip.to_string())?;
    let routes = node.run(&mut Node::cmd("ip", &["route", "show"]), None)?;
    if !routes
        .lines()
        .any(|l| l.starts_with(&format!("{ip} dev tern")))
    {
        return fail(format!("host route to {ip} lost in the rollout"));
    }
    node.delete_pods(&["pod-r", "pod-q"])?;
    node.nothing_left(ip)
}

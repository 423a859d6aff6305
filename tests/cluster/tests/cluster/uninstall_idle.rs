//! `uninstall_no_pods`: the uninstall that finds no pods. After `helm`, the node's pods are
//! deleted and the DaemonSet at once: each pod's first DEL has run (no tern attachment is left)
//! but the kubelet removes a deleted pod's sandbox only at its container GC (every 60 s), and
//! containerd 2 DELs it again then. The preStop uninstall must keep the conflist (draining) and
//! the plugins until then: the case fails the moment the conflist is gone while a sandbox of
//! those pods is still on the node (a conflist removed at once, as before, fails the first
//! poll), and when a sandbox is left at the end. Then `helm uninstall`, and nothing of tern's
//! left ([`crate::helm::after_uninstall`]).

use std::time::{Duration, Instant};

use tern_cluster::{fail, Node, Res};

/// The sandboxes the runtime still holds for pods named `pod-h*`.
fn sandboxes(node: &Node) -> Res<usize> {
    Ok(node
        .crictl(&["pods", "--name", "pod-h", "-q"])?
        .lines()
        .count())
}

/// Deletes `pods` and returns once their objects are gone (each first DEL done), with a sandbox
/// of theirs still on the node; false when the kubelet's GC removed them all meanwhile.
fn deleted_with_sandboxes_left(node: &Node, pods: &[&str]) -> Res<bool> {
    node.delete_pods(pods)?;
    Ok(sandboxes(node)? > 0)
}

/// The case (module docs).
pub fn uninstall_no_pods(node: &Node) -> Res {
    let conflist = node.cni_net.join("10-tern.conflist");
    if !conflist.exists() {
        return fail("no tern conflist: this case runs after `helm`");
    }
    let pods = ["pod-h1", "pod-h2", "pod-h3"];
    let ips: Vec<_> = pods.iter().map(|p| node.pod_ip(p)).collect::<Res<_>>()?;
    // A GC pass between the deletion and the check would leave nothing to prove: once more
    // with a fresh pod (two misses in a row: about 1 in 400).
    if !deleted_with_sandboxes_left(node, &pods)? {
        node.note("the kubelet's GC removed the sandboxes at once: once more with pod-h4");
        node.create_pods(&["pod-h4"])?;
        node.wait_ready(&["pod-h4"], 90)?;
        if !deleted_with_sandboxes_left(node, &["pod-h4"])? {
            return fail("the kubelet's GC removed the sandboxes before the uninstall twice");
        }
    }
    let agent = node.agent_pod()?;
    let t0 = Instant::now();
    node.kubectl(&[
        "-n",
        "tern",
        "delete",
        "daemonset",
        "tern-agent",
        "--cascade=foreground",
        "--wait=false",
    ])?;
    let (mut sandboxes_gone, mut conflist_gone) = (None, None);
    while t0.elapsed() < Duration::from_secs(150) {
        let left = sandboxes(node)?;
        let present = conflist.exists();
        let now = t0.elapsed();
        if left > 0 && !present {
            return fail(format!(
                "the conflist was removed {now:?} after the DaemonSet's deletion with {left} \
                 sandbox(es) of deleted pods still on the node: their repeat DEL cannot run"
            ));
        }
        if left == 0 {
            sandboxes_gone.get_or_insert(now);
        }
        if !present {
            conflist_gone.get_or_insert(now);
        }
        let agent_gone = !node.ok(&mut node.kubectl_cmd(&["-n", "tern", "get", "pod", &agent]));
        if agent_gone && conflist_gone.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    node.note(&format!(
        "after the DaemonSet's deletion: sandboxes removed by the kubelet at {sandboxes_gone:?}, \
         conflist removed by the preStop uninstall at {conflist_gone:?}, agent pod gone by {:?}",
        t0.elapsed()
    ));
    if sandboxes_gone.is_none() || conflist_gone.is_none() {
        return fail(
            "sandboxes or the conflist still on the node 150 s after the DaemonSet's deletion",
        );
    }
    for ip in ips {
        node.nothing_left(ip)?;
    }
    crate::helm::after_uninstall(node)
}

//! Faults under churn, judged by continuous probes (issue 50): one fixture, [`under_churn`],
//! and the faults as cases (`fault_agent_sigkill` and `fault_daemonset_rollout` here, [`nft`],
//! [`api`]). The fixture starts three pods — a server, a client a NetworkPolicy allows and one
//! it denies — probes between them over TCP and UDP, both families, 4 a second each
//! ([`probes`]), runs a churn loop (pods added and removed, labels changed, policies added and
//! removed, none touching the probed pairs' verdicts; a fault may pause it), brings the fault,
//! and reports per fault: the denied pairs' answered probes (must be 0), each allowed pair's
//! longest gap (at most the fault's bound, decision 0044's promise), whether the table equals a
//! full render afterwards (the listing, then the agent pod replaced — a fresh agent replaces the
//! table whole — then the listing again, compared without handles, with set elements and the
//! table's blocks sorted), and that nothing of tern's is left or lost (each running pod's lease
//! and state, no other; the conflist and kubeconfig as before). A fault times a change into the
//! kernel after it ([`marker`]) and proves that it bit.

pub mod api;
pub mod churn;
mod marker;
pub mod nft;
pub mod probes;
pub(crate) mod render;

use std::time::{Duration, Instant};

use tern_cluster::node2::Host;
use tern_cluster::{fail, Node, Res};

use crate::day2::rollout_status;
use probes::Probes;

/// The probe pods' manifests and the policy that allows `probe-ok` alone into `probe-srv`.
/// With two nodes the server is on node 1 and the clients on node 2, so every probe crosses.
fn fixture_objects(node: &Node) -> String {
    let pod = |name: &str, labels: &str| {
        let manifest = match (node.two_nodes(), name) {
            (false, _) => node.pod_manifest(name),
            (true, "probe-srv") => node.pod_manifest_on(name, &node.name),
            (true, _) => node.pod_manifest_on(name, node.var("NODE2")),
        };
        manifest.replace(
            "labels: {app: tern-test}",
            &format!("labels: {{app: tern-test, {labels}}}"),
        )
    };
    let policy = format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
         metadata: {{name: probe-allow, namespace: default}}\n\
         spec:\n  podSelector: {{matchLabels: {{probe: srv}}}}\n  policyTypes: [Ingress]\n  ingress:\n  \
         - from: [{{podSelector: {{matchLabels: {{probe: ok}}}}}}]\n    ports: [{{protocol: TCP, port: {}}}, {{protocol: UDP, port: {}}}]\n",
        probes::TCP_PORT,
        probes::UDP_PORT
    );
    [
        policy,
        pod("probe-srv", "probe: srv"),
        pod("probe-ok", "probe: ok"),
        pod("probe-deny", "probe: deny"),
    ]
    .join("---\n")
}

/// What a fault may cost, and how to bring it.
pub struct Fault<'a> {
    /// The case's name, for the report.
    pub name: &'a str,
    /// The longest gap an allowed pair may see (decision 0044's promise for this fault).
    pub gap_bound: Duration,
    /// Brings the fault and returns once it is over (the node back as before it); it may pause
    /// the churn to look at the agent with no change pending.
    pub bring: &'a dyn Fn(&Node, &churn::Control) -> Res,
}

/// Churn before the fault and after it.
const SETTLE: Duration = Duration::from_secs(3);

/// The fixture around `fault` (module docs).
pub fn under_churn(node: &Node, fault: &Fault) -> Res {
    node.kubectl_in(&["apply", "-f", "-"], &fixture_objects(node))?;
    node.wait_ready(&["probe-srv", "probe-ok", "probe-deny"], 90)?;
    let before = render::tern_files(node)?;
    let probes = Probes::start(
        node,
        "probe-srv",
        &[("probe-ok", true), ("probe-deny", false)],
    )?;
    let control = churn::Control::default();
    let (ops, (from, to, brought, fault_secs)) = std::thread::scope(|s| {
        let churn = s.spawn(|| churn::run(node, &control));
        std::thread::sleep(SETTLE);
        let from = Instant::now();
        let brought = (fault.bring)(node, &control);
        control.resume();
        let fault_secs = from.elapsed();
        std::thread::sleep(SETTLE);
        let to = Instant::now();
        control.stop();
        (churn.join().unwrap_or(0), (from, to, brought, fault_secs))
    });
    let pairs = probes.stop();
    let mut report = format!(
        "{}: fault {:.1}s, churn {ops} ops; ",
        fault.name,
        fault_secs.as_secs_f64()
    );
    let (mut denied, mut worst) = (0usize, Duration::ZERO);
    for p in &pairs {
        let answered = p.answered.iter().filter(|&&t| t >= from && t <= to).count();
        if p.allowed {
            let gap = p.longest_gap(from, to);
            worst = worst.max(gap);
            report.push_str(&format!(
                "{} gap {} ms ({answered}/{}); ",
                p.name,
                gap.as_millis(),
                p.tries
            ));
        } else {
            denied += p.answered.len();
            report.push_str(&format!(
                "{} answered {} of {}; ",
                p.name,
                p.answered.len(),
                p.tries
            ));
        }
    }
    churn::clean_up(node)?;
    // the fixture's pods go whatever the checks say: the next cases count attachments
    let same = render::table_is_a_full_render(node);
    report.push_str(&format!("table equals a full render: {same:?}"));
    node.note(&report);
    eprintln!("[cluster] {report}");
    let kept = render::nothing_left_or_lost(node, &before);
    node.kubectl(&["delete", "networkpolicy", "probe-allow", "--wait=false"])?;
    node.delete_pods(&["probe-srv", "probe-ok", "probe-deny"])?;
    brought?;
    let same = same?;
    kept?;
    if denied > 0 {
        return fail(format!("denied pairs answered {denied} probe(s)"));
    }
    if pairs
        .iter()
        .filter(|p| p.allowed)
        .any(|p| p.answered.is_empty())
    {
        return fail("an allowed pair never answered");
    }
    if worst > fault.gap_bound {
        return fail(format!(
            "an allowed pair's gap {worst:?} is beyond {:?}",
            fault.gap_bound
        ));
    }
    if !same {
        return fail("the table after the fault differs from a fresh agent's full render");
    }
    Ok(())
}

/// `fault_agent_sigkill`: tern-agent's container SIGKILLed during churn, back by the kubelet.
pub fn agent_sigkill(node: &Node) -> Res {
    agent_sigkill_on(node, &node.node1())
}

/// `fault_agent_sigkill_node2` (two nodes): node 2's tern-agent SIGKILLed, the clients' node.
pub fn agent_sigkill_node2(node: &Node) -> Res {
    agent_sigkill_on(node, &node.node2()?)
}

/// tern-agent's container on `host` SIGKILLed during churn (by its host PID), back by the
/// kubelet.
fn agent_sigkill_on(node: &Node, host: &Host) -> Res {
    let bring = |node: &Node, _: &churn::Control| -> Res {
        let agent = node.agent_pod_of(&host.name)?;
        let restarts = |node: &Node| {
            node.kubectl(&["-n", "tern", "get", "pod", &agent, "-o",
                "jsonpath={.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].ready}"])
                .unwrap_or_default()
        };
        let was = restarts(node);
        let pid = node.container_pid(host, &agent, "agent")?;
        node.run(&mut Node::cmd("kill", &["-9", &pid.to_string()]), None)?;
        node.wait_for(60, "the agent restarted and ready", || {
            let now = restarts(node);
            now != was && now.trim_end().ends_with("true")
        })
    };
    let name = format!("agent SIGKILL on {}", host.name);
    under_churn(
        node,
        &Fault {
            name: &name,
            gap_bound: Duration::from_secs(1),
            bring: &bring,
        },
    )?;
    rollout_status(node)
}

/// `fault_daemonset_rollout`: the DaemonSet rolled (`kubectl rollout restart`) during churn: the
/// agent pod replaced (its preStop removes nothing while the DaemonSet stays), the new agent's
/// first transaction a whole replace; then a change timed into the kernel.
pub fn daemonset_rollout(node: &Node) -> Res {
    let bring = |node: &Node, churn: &churn::Control| -> Res {
        node.kubectl(&["-n", "tern", "rollout", "restart", "daemonset/tern-agent"])?;
        rollout_status(node)?;
        marker::a_change_within(node, churn, Duration::from_secs(5))
    };
    let r = under_churn(
        node,
        &Fault {
            name: "DaemonSet rolled",
            gap_bound: Duration::from_secs(1),
            bring: &bring,
        },
    );
    let removed = marker::delete(node);
    r?;
    removed
}

//! `agent_restart`: tern-agent's container SIGKILLed while 30 pods are created. With
//! `networkPolicy` in the conflist every ADD waits for the agent's admission; while nothing
//! listens on its socket the ADD connects again within its wait (docs/decisions/0004
//! and 0032), so the pods start once the kubelet has
//! restarted the agent, with no sandbox made twice. Measured against 30 pods created with the
//! agent up, in the same run: each pod's time from the create to Ready.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tern_cluster::{fail, Node, Res};

use crate::day2::rollout_status;

const PODS: usize = 30;

/// `PODS` pods `PREFIX-0`.. in one apply.
pub(crate) fn create_batch(node: &Node, prefix: &str) -> Res<Vec<String>> {
    let names: Vec<String> = (0..PODS).map(|i| format!("{prefix}-{i}")).collect();
    let docs: Vec<String> = names.iter().map(|n| node.pod_manifest(n)).collect();
    node.kubectl_in(&["apply", "-f", "-"], &docs.join("---\n"))?;
    Ok(names)
}

/// Each of `names`' time from `t0` to its Ready condition, polled every 200 ms (120 s at most).
pub(crate) fn ready_times(
    node: &Node,
    names: &[String],
    t0: Instant,
) -> Res<BTreeMap<String, Duration>> {
    let mut ready = BTreeMap::new();
    let tpl = "jsonpath={range .items[*]}{.metadata.name} \
               {.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}";
    while ready.len() < names.len() {
        if t0.elapsed() > Duration::from_secs(120) {
            return fail(format!(
                "{} of {} pods Ready after 120 s",
                ready.len(),
                names.len()
            ));
        }
        let out = node.kubectl(&["get", "pods", "-l", "app=tern-test", "-o", tpl])?;
        let now = t0.elapsed();
        for line in out.lines() {
            if let Some((name, "True")) = line.split_once(' ') {
                if names.iter().any(|n| n == name) {
                    ready.entry(name.to_owned()).or_insert(now);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(ready)
}

/// Sandboxes the runtime holds for each of `names`, summed beyond the first of each.
pub(crate) fn extra_sandboxes(node: &Node, names: &[String]) -> Res<usize> {
    let mut extra = 0;
    for n in names {
        let ids = node.crictl(&["pods", "--name", &format!("^{n}$"), "-q"])?;
        extra += ids.lines().count().saturating_sub(1);
    }
    Ok(extra)
}

/// The agent container's host PID (crictl inspect).
pub(crate) fn agent_pid(node: &Node) -> Res<String> {
    let id = node.crictl(&["ps", "--name", "^agent$", "-q"])?;
    let Some(id) = id.lines().next() else {
        return fail("no running agent container");
    };
    let pid = node.crictl(&[
        "inspect",
        "-o",
        "go-template",
        "--template",
        "{{.info.pid}}",
        id,
    ])?;
    Ok(pid.trim().to_owned())
}

pub(crate) fn max(t: &BTreeMap<String, Duration>) -> Duration {
    t.values().copied().max().unwrap_or_default()
}

/// Deletes `names` and waits for them to go.
pub(crate) fn delete(node: &Node, names: &[String]) -> Res {
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    node.delete_pods(&refs)
}

/// 30 pods with the agent up, then 30 while its container is SIGKILLed and restarted.
pub fn agent_restart(node: &Node) -> Res {
    let t0 = Instant::now();
    let base = create_batch(node, "base")?;
    let normal = ready_times(node, &base, t0)?;
    delete(node, &base)?;

    let pid = agent_pid(node)?;
    let agent = node.agent_pod()?;
    let t0 = Instant::now();
    node.run(&mut Node::cmd("kill", &["-9", &pid]), None)?;
    let during = create_batch(node, "kill")?;
    let mut back = None;
    let restarted = |node: &Node| {
        node.kubectl(&["-n", "tern", "get", "pod", &agent, "-o",
            "jsonpath={.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].ready}"])
            .is_ok_and(|s| !s.starts_with("0 ") && s.trim_end().ends_with("true"))
    };
    node.wait_for(60, "the agent restarted by the kubelet and ready", || {
        let r = restarted(node);
        if r {
            back = Some(t0.elapsed());
        }
        r
    })?;
    let restart = back.unwrap_or_default();
    let killed = ready_times(node, &during, t0)?;
    let extra = extra_sandboxes(node, &during)?;
    let refused = crate::agent_rollout::refused(node, "kill");
    let bound = restart + max(&normal) + Duration::from_secs(2);
    node.note(&format!(
        "30 pods with the agent up: all Ready in {:?}; 30 created as it was SIGKILLed: agent back in \
         {restart:?}, all Ready in {:?} (bound {bound:?}); sandboxes made twice {extra}; \
         FailedCreatePodSandBox events {refused}",
        max(&normal),
        max(&killed)
    ));
    delete(node, &during)?;
    rollout_status(node)?;
    if max(&killed) > bound {
        return fail(format!(
            "pods created during the agent's restart took {:?}, beyond {bound:?}",
            max(&killed)
        ));
    }
    if extra > 0 {
        return fail(format!(
            "{extra} sandbox(es) made twice during the agent's restart"
        ));
    }
    Ok(())
}

//! `agent_rollout_pod_start`: 30 pods created as the DaemonSet rolls (`kubectl rollout restart`:
//! the old agent pod terminated, a new one started and ready). With `networkPolicy` in the
//! conflist every ADD waits for the agent's admission, and while no agent listens the ADD
//! connects again within its wait (docs/decisions/0004 and 0032). Measured against 30 pods
//! created with the agent up in the same run: each pod's time from the create to Ready, the
//! sandboxes made more than once, the refused ADDs (FailedCreatePodSandBox). The bound (decision
//! 0044): every pod Ready within the rollout's time + the slowest normal start + 2 s, and nothing
//! of a refused ADD left once the pods are gone (leases and state those of running pods only).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tern_cluster::{fail, Node, Res};

use crate::agent_kill::{create_batch, delete, extra_sandboxes, max, ready_times};
use crate::day2::rollout_status;
use crate::faults::render;

/// The median of the times.
fn median(t: &BTreeMap<String, Duration>) -> Duration {
    let mut v: Vec<Duration> = t.values().copied().collect();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// FailedCreatePodSandBox events of pods named `PREFIX-*`: ADDs refused and retried.
pub fn refused(node: &Node, prefix: &str) -> usize {
    node.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "reason=FailedCreatePodSandBox",
        "-o",
        "jsonpath={range .items[*]}{.involvedObject.name}{\"\\n\"}{end}",
    ])
    .map(|o| {
        o.lines()
            .filter(|n| n.starts_with(&format!("{prefix}-")))
            .count()
    })
    .unwrap_or(0)
}

/// The case (module docs).
pub fn agent_rollout_pod_start(node: &Node) -> Res {
    let before = render::tern_files(node)?;
    let t0 = Instant::now();
    let base = create_batch(node, "base")?;
    let normal = ready_times(node, &base, t0)?;
    delete(node, &base)?;

    let t0 = Instant::now();
    node.kubectl(&["-n", "tern", "rollout", "restart", "daemonset/tern-agent"])?;
    let during = create_batch(node, "roll")?;
    rollout_status(node)?;
    let rolled = t0.elapsed();
    let times = ready_times(node, &during, t0)?;
    let extra = extra_sandboxes(node, &during)?;
    let refused = refused(node, "roll");
    let beyond = |d: Duration, n: Duration| d.saturating_sub(n).as_millis();
    let bound = rolled + max(&normal) + Duration::from_secs(2);
    let msg = format!(
        "30 pods with the agent up: Ready p50 {:?} max {:?}; 30 created as the DaemonSet rolled: \
         rollout done in {rolled:?}, Ready p50 {:?} max {:?} (beyond a normal start: p50 +{} ms, \
         max +{} ms; bound {bound:?}); sandboxes made twice {extra}; FailedCreatePodSandBox {refused}",
        median(&normal),
        max(&normal),
        median(&times),
        max(&times),
        beyond(median(&times), median(&normal)),
        beyond(max(&times), max(&normal)),
    );
    node.note(&msg);
    eprintln!("[cluster] {msg}");
    delete(node, &during)?;
    // nothing of a refused ADD left: every lease and state file is a running pod's
    render::nothing_left_or_lost(node, &before)?;
    if max(&times) > bound {
        return fail(format!(
            "pods created during the rollout took {:?}, beyond {bound:?}",
            max(&times)
        ));
    }
    if extra > 0 {
        return fail(format!("{extra} sandbox(es) made twice during the rollout"));
    }
    Ok(())
}

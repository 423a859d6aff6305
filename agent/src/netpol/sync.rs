//! The syncer: every 100 ms it looks at the store's generation; once every kind has been listed
//! and the store changed, it compiles the plan for this node, renders the table and, when the
//! script differs from the last one applied, replaces the table in one nft transaction. Every
//! resync period it also lists the table and restores it when someone else changed it.
//!
//! Invariants: no apply before the first full sync; a failed apply leaves the previous table
//! in force and is retried on the next tick; after `tern-agent uninstall` began, nothing is
//! applied.

use std::time::{Duration, Instant};

use tern_net::nft::Nft;
use tracing::{info, warn};

use super::compile::{compile, World};
use super::controller::Shared;
use super::model::{Namespace, Pod, Policy};
use super::ruleset::{replace_script, Size, FAMILY, TABLE};

/// How often the store's generation is looked at (also the longest batching of changes).
const TICK: Duration = Duration::from_millis(100);

/// The script for the store now, with its size and the number of policies in force.
fn render(s: &Shared) -> Option<(String, Size, usize)> {
    let (pods, namespaces, policies): (Vec<Pod>, Vec<Namespace>, Vec<Policy>) = {
        let st = s.store();
        if !st.synced() {
            return None;
        }
        (
            st.pods.values().cloned().collect(),
            st.namespaces.values().cloned().collect(),
            st.policies.values().cloned().collect(),
        )
    };
    let plan = compile(&World {
        node: &s.cfg.node_name,
        pods: &pods,
        namespaces: &namespaces,
        policies: &policies,
    });
    let (script, size) = replace_script(&plan);
    Some((script, size, plan.policies))
}

struct Applied {
    script: String,
    listing: Option<String>,
}

fn apply(
    s: &Shared,
    nft: &Nft,
    script: String,
    size: Size,
    policies: usize,
    started: Instant,
) -> Option<Applied> {
    let result = nft.apply(&script);
    let took = started.elapsed().as_secs_f64();
    let mut st = s.stats();
    st.syncs += 1;
    st.last_sync_seconds = took;
    st.sync_seconds_sum += took;
    match result {
        Ok(()) => {
            if !st.synced {
                info!(
                    table = TABLE,
                    pods = size.pods,
                    rules = size.rules,
                    policies,
                    seconds = took,
                    "network policy: first full sync applied"
                );
            }
            st.synced = true;
            st.applies += 1;
            st.size = size;
            st.policies = policies as u64;
            drop(st);
            let listing = nft.list_table(FAMILY, TABLE).unwrap_or_else(|e| {
                warn!(error = %e, "network policy: cannot list the table");
                None
            });
            Some(Applied { script, listing })
        }
        Err(e) => {
            st.apply_errors += 1;
            warn!(error = %e, "network policy: cannot apply the table; the previous one stays");
            None
        }
    }
}

/// The syncer thread: runs until the controller stops.
pub(super) fn run(s: &Shared, nft: &Nft) {
    info!(node = %s.cfg.node_name, table = TABLE, "network policy: starting; the table is replaced only after Pods, Namespaces and NetworkPolicies are all listed");
    let mut seen = u64::MAX;
    let mut applied: Option<Applied> = None;
    let mut last_check = Instant::now();
    while !s.stop.sleep(TICK) {
        if crate::uninstall::uninstalling(&s.run.kubeconfig) {
            info!(
                table = TABLE,
                "network policy: tern-agent uninstall began; the table is no longer kept"
            );
            return;
        }
        let generation = s.store().generation;
        let drift_check = applied.is_some() && last_check.elapsed() >= s.cfg.resync;
        if generation == seen && !drift_check {
            continue;
        }
        let started = Instant::now();
        let Some((script, size, policies)) = render(s) else {
            continue;
        };
        seen = generation;
        let mut stale = applied.as_ref().is_none_or(|a| a.script != script);
        if drift_check {
            last_check = Instant::now();
            let now = nft.list_table(FAMILY, TABLE).ok().flatten();
            if !stale && applied.as_ref().is_some_and(|a| a.listing != now) {
                warn!(
                    table = TABLE,
                    "network policy: the table was changed by someone else; restoring it"
                );
                s.stats().restores += 1;
                stale = true;
            }
        }
        if stale {
            match apply(s, nft, script, size, policies, started) {
                Some(a) => applied = Some(a),
                None => seen = u64::MAX, // retry at the next tick
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;
    use crate::netpol::controller::{Kind, NetpolConfig, NetpolStats, Store};
    use crate::netpol::model::{pod_from_json, policy_from_json};

    fn shared() -> Shared {
        Shared {
            run: crate::mint::ControllerSettings {
                api: crate::mint::ApiAccess {
                    api_server: "https://127.0.0.1:1".into(),
                    sa_dir: "/nonexistent".into(),
                    request_timeout: Duration::from_secs(1),
                },
                policy: crate::schedule::Policy::default(),
                kubeconfig: "/nonexistent/kubeconfig".into(),
            },
            cfg: NetpolConfig {
                node_name: "n1".into(),
                resync: Duration::from_secs(30),
                watch_timeout: Duration::from_secs(60),
                watch_idle: Duration::from_secs(180),
            },
            store: Mutex::new(Store::default()),
            stats: Mutex::new(NetpolStats::default()),
            stop: crate::stop_signal::StopSignal::default(),
        }
    }

    #[test]
    fn nothing_is_rendered_before_every_kind_is_listed() {
        let s = shared();
        {
            let mut st = s.store();
            let pod = pod_from_json(&json!({"metadata": {"namespace": "x", "name": "a"},
                "spec": {"nodeName": "n1"}, "status": {"podIP": "10.0.0.2"}}))
            .unwrap();
            st.pods.insert("x/a".into(), pod);
            let pol = policy_from_json(&json!({"metadata": {"namespace": "x", "name": "deny"},
                "spec": {"podSelector": {}}}))
            .unwrap();
            st.policies.insert("x/deny".into(), pol);
            st.mark_listed(Kind::Pods);
            st.mark_listed(Kind::Policies);
        }
        // A restarted agent that has not listed Namespaces yet keeps the old table: an early
        // render would miss every namespaceSelector peer.
        assert!(render(&s).is_none());
        s.store().mark_listed(Kind::Namespaces);
        let (script, size, policies) = render(&s).unwrap();
        assert_eq!((size.pods, policies), (1, 1));
        assert!(script.contains("10.0.0.2 : jump in_0"), "{script}");
    }
}

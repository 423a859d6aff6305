//! Churn, short: pods ADDed and DELeted through libcni with the default chain, 8 at once, half
//! of the ADDs with a running plugin SIGKILLed (at a random moment, or tern while host-local runs): every DEL exits 0
//! and nothing is left (no veth, route, lease, state, backup, pod sysctl or temp file). The long
//! run is `tern-bench churn`. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tern_testkit::churn::{Node, Spec};

#[test]
fn churn_with_kills_leaves_nothing() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("e2e").unwrap();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    // TERN_CHURN_PODS runs a longer churn through this test (tern-bench churn is the long run).
    let pods = std::env::var("TERN_CHURN_PODS")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(48);
    let spec = Spec {
        pods,
        parallel: 8,
        kill_percent: 50,
        max_kill_delay: Duration::from_millis(12),
        seed,
    };
    let r = node.run(&spec);
    eprintln!("churn (seed {seed}): {r:?}");
    assert_eq!(r.problems(), 0, "churn (seed {seed}) left problems: {r:#?}");
    assert_eq!(r.dels_ok, spec.pods, "{r:#?}");
    assert!(
        r.kills_landed > 0,
        "no kill landed: the run proves nothing about kills: {r:#?}"
    );
}

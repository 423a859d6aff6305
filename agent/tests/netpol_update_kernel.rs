//! The incremental compiler's scripts in a real kernel: a table kept by `Engine::flush` scripts
//! alone lists as the full render of the same objects applied whole. One netns gets the first
//! table replaced and then only each flush's script; another gets each step's full render
//! (`render(&compile(..))`) replaced whole; after every step the two `nft list table` outputs
//! are compared (each block's elements sorted: the kernel lists a hash set's elements in its
//! own order). The steps: pods admitted, relabelled, readdressed next to an ipBlock so that
//! intervals merge and split, deleted; namespaces relabelled; policies created (new chains and
//! sets), changed and deleted (chains and sets no rule names, deleted); ClusterNetworkPolicies
//! of both tiers created, moved in priority and deleted (tier chains jumped to, created before
//! and deleted after the pod chains that jump to them); Nodes moved between zones and
//! addresses. Needs root and nft.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod netpol_steps;

use netpol_steps::{listing, step, Mirror};
use tern_net::netns::NetNs;
use tern_net::nft::Nft;
use tern_netpol::ruleset::LogDenied;
use tern_netpol::Engine;
use tern_testkit::netns::TestNetns;

#[test]
fn flush_scripts_list_as_the_full_render_applied_whole() {
    if tern_testkit::root::skip() {
        return;
    }
    updates_list_as_replaces(None, "npu");
}

/// The same with denied connections logged: every chain with its log rule, the limit object
/// made once by the first replace and kept by every update.
#[test]
fn with_denied_logged_flush_scripts_list_as_the_full_render_too() {
    if tern_testkit::root::skip() {
        return;
    }
    updates_list_as_replaces(Some(LogDenied::default()), "npl");
}

fn updates_list_as_replaces(log: Option<LogDenied>, stem: &str) {
    let nft = Nft::find().unwrap();
    let (inc_ns, full_ns) = (
        TestNetns::new(&format!("{stem}-inc")),
        TestNetns::new(&format!("{stem}-full")),
    );
    let (inc, full) = (
        NetNs::open(inc_ns.path()).unwrap(),
        NetNs::open(full_ns.path()).unwrap(),
    );
    let (mut m, mut e) = (Mirror::default(), Engine::new("n1").logging(log));
    e.flush();
    inc.run_in(|| nft.apply(&e.table().replace_script()))
        .unwrap()
        .unwrap();
    let (mut updates, mut chains_made, mut sets_dropped) = (0, 0, 0);
    let mut tier_chains = 0;
    for i in 0..240 {
        let what = step(i, &mut m, &mut e);
        let f = e.flush();
        let want = m.full(log);
        assert_eq!(e.table(), &want, "step {i}: {what}");
        if !f.script.is_empty() {
            updates += 1;
            chains_made += usize::from(f.script.contains("\tchain "));
            sets_dropped += usize::from(f.script.contains("delete set "));
            tier_chains += usize::from(f.script.contains("jump a") || f.script.contains("jump b"));
            inc.run_in(|| nft.apply(&f.script))
                .unwrap()
                .unwrap_or_else(|err| {
                    panic!("step {i}: {what}: the kernel refused\n{}\n{err}", f.script)
                });
        }
        full.run_in(|| nft.apply(&want.replace_script()))
            .unwrap()
            .unwrap();
        let listed = listing(&inc, &nft);
        if log.is_some() {
            let logs = listed.iter().filter(|b| b.contains("log prefix")).count();
            // Every per-pod chain ending in NetworkPolicy's drop logs; one a cluster policy's
            // tiers alone judge ends in accept, and the tier chains' Deny is not logged.
            let chains = listed
                .iter()
                .filter(|b| b.starts_with(" chain in_") || b.starts_with(" chain eg_"))
                .filter(|b| !b.ends_with(" accept }"))
                .count();
            assert_eq!(logs, chains, "step {i}: every per-pod chain logs");
        }
        assert_eq!(
            listed,
            listing(&full, &nft),
            "step {i}: {what}: updated and replaced tables differ; the update was\n{}",
            f.script
        );
    }
    // The run exercised what it claims: updates, new chains, sets dropped.
    assert!(
        updates > 40 && chains_made > 5 && sets_dropped > 2 && tier_chains > 5,
        "{updates} {chains_made} {sets_dropped} {tier_chains}"
    );
}

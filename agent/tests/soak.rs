//! The agent's long soak: 1,000 fsynced kubeconfig rewrites through the refresh channel with a
//! reader in a tight loop, none partial. Ignored, so outside `cargo unit` (about a minute on 2
//! cores; the same property at 100 rewrites is in `channel`); `scripts/test` runs it (its cargo
//! tiers pass `--include-ignored`), alone `cargo test -p tern-agent --test soak -- --ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

#[test]
#[ignore = "about a minute: scripts/test runs it (--include-ignored)"]
fn kubeconfig_is_never_partial_during_a_thousand_rewrites() {
    common::assert_kubeconfig_never_partial(1000);
}

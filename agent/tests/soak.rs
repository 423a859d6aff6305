//! The agent's long soak: 1,000 fsynced kubeconfig rewrites through the refresh channel with a
//! reader in a tight loop, none partial. Outside `cargo unit` (about a minute on 2 cores); run by
//! `scripts/test` with the whole workspace, alone `cargo test -p tern-agent --test soak`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

#[test]
fn kubeconfig_is_never_partial_during_a_thousand_rewrites() {
    common::assert_kubeconfig_never_partial(1000);
}

//! The syncer: every 100 ms it looks at the store's generation (at once when an admission waits
//! for the table: a pod's ADD is held meanwhile); once every kind has been listed and the store
//! changed (its generation moved: the watchers leave it for events that change nothing the
//! compiler reads), it compiles the plan for this node and renders the table; when that differs
//! from the last one applied, it changes the kernel's table in one nft transaction: element adds
//! and deletes when only the sets' and maps' elements differ (a pod's address in the verdict
//! maps and peer sets: a few hundred bytes, `ruleset::update_script`), else a replace of the
//! whole table.
//! Every resync period it also lists the table and restores it (a replace) when someone else
//! changed it; with the store unchanged since the last render, that check compiles nothing.
//!
//! Invariants: no apply before the first full sync; a failed apply leaves the previous table
//! in force and is retried on the next tick (an update the kernel refused is followed by a
//! replace at once); after `tern-agent uninstall` began, nothing is applied; the kernel's table
//! after an update equals the replace of the same render (`tests/netpol_update_kernel.rs`);
//! [`Store::applied`](super::store::Store::applied) only moves to a generation the kernel
//! table reflects (what a waiting admission trusts).

use std::time::{Duration, Instant};

use tern_net::nft::Nft;
use tern_netpol::compile::{compile, World};
use tern_netpol::model::{Namespace, Pod, Policy};
use tern_netpol::ruleset::{render as render_table, update_script, Size, Table, FAMILY, TABLE};
use tracing::{info, warn};

use super::store::{Shared, Store};

/// How often the store's generation is looked at (also the longest batching of changes).
const TICK: Duration = Duration::from_millis(100);

/// What [`render`] made: the table for the store at `generation`, its size and the number of
/// policies in force.
struct Rendered {
    generation: u64,
    table: Table,
    size: Size,
    policies: usize,
}

/// The script for the store now (admitted addresses in place of the API's).
fn render(s: &Shared) -> Option<Rendered> {
    let (generation, pods, namespaces, policies): (u64, Vec<Pod>, Vec<Namespace>, Vec<Policy>) = {
        let st = s.store();
        if !st.synced() {
            return None;
        }
        (
            st.generation,
            st.pods_with_admitted(),
            st.namespaces.values().map(|n| (**n).clone()).collect(),
            st.policies.values().cloned().collect(),
        )
    };
    let plan = compile(&World {
        node: &s.cfg.node_name,
        pods: &pods,
        namespaces: &namespaces,
        policies: &policies,
    });
    let (table, size) = render_table(&plan);
    s.stats().compiles += 1;
    Some(Rendered {
        generation,
        table,
        size,
        policies: plan.policies,
    })
}

/// Sleeps one tick, or less when an admission waits for a change not tried yet (`tried`: the
/// last generation rendered, applied or not, so a refused table is retried once a tick, not in
/// a busy loop); true when the controller stops.
fn sleep(s: &Shared, tried: u64) -> bool {
    let until = Instant::now() + TICK;
    let mut st = s.store();
    let wanted = |st: &Store| st.waiting > 0 && st.generation != tried;
    while !s.stop.is_stopped() && !wanted(&st) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        st = s
            .changed
            .wait_timeout(st, left)
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
    }
    s.stop.is_stopped()
}

/// Records that the kernel table reflects the store at `generation` and wakes admissions.
fn mark_applied(s: &Shared, generation: u64) {
    let mut st = s.store();
    st.applied = st.applied.max(generation);
    drop(st);
    s.notify();
}

/// The last table applied, its size and policies, and the table as listed right after it (the
/// drift check's reference).
struct Applied {
    table: Table,
    size: Size,
    policies: usize,
    listing: Option<String>,
}

/// How [`apply`] changes the kernel's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// Element adds and deletes (`ruleset::update_script`).
    Update,
    /// The whole table replaced.
    Replace,
}

/// Runs `script` (one transaction) and counts the sync; true when the kernel took it.
fn apply(
    s: &Shared,
    nft: &Nft,
    (script, change): (&str, Change),
    size: Size,
    policies: usize,
    started: Instant,
) -> bool {
    let result = nft.apply(script);
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
            if change == Change::Update {
                st.updates += 1;
            }
            st.size = size;
            st.policies = policies as u64;
            true
        }
        Err(e) => {
            st.apply_errors += 1;
            match change {
                Change::Update => {
                    warn!(error = %e, "network policy: cannot update the table's elements; replacing it");
                }
                Change::Replace => {
                    warn!(error = %e, "network policy: cannot apply the table; the previous one stays");
                }
            }
            false
        }
    }
}

/// The table as the kernel lists it now (`None` when it cannot be listed).
fn listing(nft: &Nft) -> Option<String> {
    nft.list_table(FAMILY, TABLE).unwrap_or_else(|e| {
        warn!(error = %e, "network policy: cannot list the table");
        None
    })
}

/// The syncer thread: runs until the controller stops.
pub(super) fn run(s: &Shared, nft: &Nft) {
    info!(node = %s.cfg.node_name, table = TABLE, "network policy: starting; the table is replaced only after Pods, Namespaces and NetworkPolicies are all listed");
    let mut seen = u64::MAX;
    let mut tried = u64::MAX;
    let mut applied: Option<Applied> = None;
    let mut last_check = Instant::now();
    while !sleep(s, tried) {
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
        let rendered = match applied.as_ref() {
            // Only the drift check is due: the store is as last rendered, so is the table.
            Some(a) if generation == seen => Some(Rendered {
                generation,
                table: a.table.clone(),
                size: a.size,
                policies: a.policies,
            }),
            _ => render(s),
        };
        let Some(Rendered {
            generation,
            table,
            size,
            policies,
        }) = rendered
        else {
            continue;
        };
        seen = generation;
        tried = generation;
        let mut stale = applied.as_ref().is_none_or(|a| a.table != table);
        let mut drifted = false;
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
                drifted = true;
            }
        }
        if stale {
            // An update only from a table the kernel is known to hold.
            let update = applied
                .as_ref()
                .filter(|_| !drifted)
                .and_then(|a| update_script(&a.table, &table));
            let done = update
                .is_some_and(|u| apply(s, nft, (&u, Change::Update), size, policies, started))
                || apply(
                    s,
                    nft,
                    (&table.replace_script(), Change::Replace),
                    size,
                    policies,
                    started,
                );
            if done {
                // admissions waiting for this table go first; the drift check's listing after
                mark_applied(s, generation);
                applied = Some(Applied {
                    table,
                    size,
                    policies,
                    listing: listing(nft),
                });
            } else {
                seen = u64::MAX; // retry at the next tick
            }
        } else if applied.is_some() {
            mark_applied(s, generation);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;

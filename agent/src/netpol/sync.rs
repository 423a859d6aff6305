//! The syncer: it wakes as soon as the store's generation moves (and every 100 ms, for retries
//! and restores); once every kind has been listed and the store
//! changed (its generation moved: the watchers leave it for events that change nothing the
//! compiler reads), it runs the incremental compiler (`tern_netpol::engine`) over what changed
//! and sends the kernel what that touched in one transaction: set elements, verdict map
//! entries, a new chain or set, one no rule names any more. An update the engine gives as a
//! `ruleset::TablePlan` (element moves of plain sets and verdict maps; plain and ipBlock
//! (interval) address sets and chains made and removed, with their elements and rules: a remote
//! pod created, deleted or relabelled, a policy created, changed or deleted, a new local pod's
//! chain) goes as one nf_tables netlink batch the agent writes itself (`elements.rs`), anything
//! else (elements moved inside an ipBlock's set, named-port sets made or changed, the log rule)
//! as an nft script (`nft -f -`); a batch the kernel refuses is
//! followed by the nft script of the same flush (decision 0022). The first table after a start, and any table
//! after a transaction the kernel refused, replaces the whole table instead.
//! A thread of its own ([`drift`]) lists the table once a period and asks for a restore (a
//! replace) when someone else changed it; that check compiles nothing, and no change or
//! admission waits for a listing.
//!
//! Invariants: no apply before the first full sync; a failed apply leaves the previous table
//! in force and is retried on the next tick as a replace; after `tern-agent uninstall` began,
//! nothing is applied; the kernel's table after a run of updates equals a replace of the same
//! objects' full render (`tests/netpol_update_kernel.rs`, over netlink
//! `tests/netpol_netlink_kernel.rs`);
//! [`Store::applied`](super::store::Store::applied) only moves to a generation the kernel
//! table reflects (what a waiting admission trusts).

use std::time::{Duration, Instant};

use tern_net::netlink::nftables::ElementWriter;
use tern_net::nft::Nft;
use tern_netpol::ruleset::{Size, TablePlan, TABLE};
use tracing::{info, warn};

use super::store::{Shared, Store};

/// The longest sleep between two looks at the store: a refused table's retry, a restore.
const TICK: Duration = Duration::from_millis(100);

/// What one compile made: the store's generation it covers, the script that brings the
/// kernel's table to it (`Change::Replace`: the whole table), the table's size and the
/// policies in force.
struct Compiled {
    generation: u64,
    script: String,
    /// The update as the netlink writer's parts, when it is one (never for a replace).
    plan: Option<TablePlan>,
    change: Change,
    size: Size,
    policies: usize,
}

/// Compiles what changed since the last compile; `whole`: the kernel's table is not known to
/// be the last one (a start, a refused transaction, a drift), so the script replaces it.
/// `None` before every kind is listed.
fn compile(s: &Shared, whole: bool) -> Option<Compiled> {
    let mut st = s.store();
    if !st.synced() {
        return None;
    }
    let generation = st.generation;
    let f = st.engine.flush();
    let (script, plan, change) = if whole {
        (st.engine.table().replace_script(), None, Change::Replace)
    } else {
        (f.script, f.plan, Change::Update)
    };
    let size = st.engine.size();
    let policies = st.engine.policies_in_force();
    let cluster_in_force = st.engine.cluster_policies_in_force() as u64;
    drop(st);
    let mut stats = s.stats();
    stats.compiles += 1;
    stats.cluster_policies_in_force = cluster_in_force;
    stats.pods_compiled += f.pods as u64;
    stats.sets_compiled += f.sets as u64;
    Some(Compiled {
        generation,
        script,
        plan,
        change,
        size,
        policies,
    })
}

/// Sleeps one tick, or less once the store moved past `tried` (the last generation compiled,
/// applied or not, or seen before every kind was listed: so a refused table is retried once a
/// tick, not in a busy loop); true when the controller stops. Why wake at once rather than at
/// the tick: a change waited up to a tick (100 ms) for its compile, where the compile and its
/// transaction take about 10 ms at fleet scale; changes that arrive meanwhile still go in one
/// transaction.
fn sleep(s: &Shared, tried: u64) -> bool {
    let until = Instant::now() + TICK;
    let mut st = s.store();
    let wanted = |st: &Store| st.generation != tried;
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

/// How [`apply`] changes the kernel's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// What the compile touched: elements, chains and sets (`ruleset::Journal::script`).
    Update,
    /// The whole table replaced.
    Replace,
}

/// How a transaction reaches the kernel.
enum Path<'a> {
    /// A script through an exec of nft.
    Nft(&'a Nft, &'a str),
    /// Element moves, sets, chains and rules: one netlink batch (`elements.rs`).
    Netlink(&'a ElementWriter, &'a TablePlan),
}

/// Makes one transaction and counts the sync; true when the kernel took it.
fn apply(
    s: &Shared,
    path: Path<'_>,
    change: Change,
    size: Size,
    policies: usize,
    started: Instant,
) -> bool {
    let result = match path {
        Path::Nft(nft, script) => nft.apply(script).map_err(|e| e.to_string()),
        Path::Netlink(writer, plan) => {
            if !elements::write(writer, plan) {
                s.stats().netlink_errors += 1;
                return false;
            }
            s.stats().netlink_updates += 1;
            Ok(())
        }
    };
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

/// The syncer thread: runs until the controller stops. `netlink`: element-only updates go
/// over an nf_tables netlink socket opened in the calling thread's network namespace (the
/// one nft runs in); else every transaction is an exec of nft.
pub(crate) fn run(s: &Shared, nft: &Nft, netlink: bool) {
    let writer = netlink.then(elements::writer).flatten();
    info!(node = %s.cfg.node_name, table = TABLE, "network policy: starting; the table is replaced only after Pods, Namespaces and NetworkPolicies are all listed");
    let mut seen = u64::MAX;
    while !sleep(s, seen) {
        if crate::uninstall::uninstalling(&s.run.kubeconfig) {
            info!(
                table = TABLE,
                "network policy: tern-agent uninstall began; the table is no longer kept"
            );
            return;
        }
        let generation = s.store().generation;
        let mut whole = !s.drift.ours();
        if s.drift.take_restore() {
            s.stats().restores += 1;
            whole = true;
        }
        if generation == seen && !whole {
            continue;
        }
        let started = Instant::now();
        let Some(c) = compile(s, whole) else {
            seen = generation;
            continue;
        };
        seen = c.generation;
        if c.script.is_empty() {
            mark_applied(s, c.generation);
            continue;
        }
        s.drift.transaction_starts();
        let (size, policies) = (c.size, c.policies);
        let by_netlink = c.plan.as_ref().zip(writer.as_ref());
        let done = by_netlink.is_some_and(|(plan, w)| {
            apply(s, Path::Netlink(w, plan), c.change, size, policies, started)
        }) || apply(
            s,
            Path::Nft(nft, &c.script),
            c.change,
            size,
            policies,
            started,
        ) || (c.change == Change::Update && {
            let replace = s.store().engine.table().replace_script();
            let path = Path::Nft(nft, &replace);
            apply(s, path, Change::Replace, size, policies, started)
        });
        s.drift.transaction_ended(done);
        if done {
            mark_applied(s, c.generation);
        }
    }
}

pub(crate) mod drift;
pub(super) mod elements;

#[cfg(test)]
pub(crate) mod tests;

//! This node's `spec.podCIDRs`, followed while the agent runs. A Node deleted and registered
//! again (its kubelet restarted before the pod GC removed the agent's pod) can come back with
//! other podCIDRs from the controller manager; other nodes route the new ones at once, so what
//! this node derived from the old ones must follow, or its new pods get addresses nothing routes:
//! the conflist's IPAM ranges `tern-agent install` rendered (`--pod-cidrs-conflist`) and the
//! egress NAT's pod ranges.
//!
//! Sources: the route controller's Node watch with `--node-routes` (its reflector's subscriber
//! [`PublishOwn`]; no request of its own), else
//! a GET of this Node every `--watch-timeout`. The cell keeps the last non-empty podCIDRs seen;
//! a Node that is gone publishes nothing, so nothing changes until it is back.
//!
//! Invariants: the conflist is rewritten only when a follower range differs, atomically (temp
//! file, rename), never created when absent and never once uninstall has begun (the mark is
//! checked under the conf dir's lock uninstall drains under); only ranges of
//! the shape `install` renders are touched ([`crate::conflist::with_pod_ranges`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tern_kube::client::nodes::NodeEntry;
use tern_watch::{Change, Consumer, Relisted, Store};
use tracing::{debug, info, warn};

use crate::mint::ControllerSettings;
use crate::schedule::Rng;
use crate::stop_signal::StopSignal;

/// The last non-empty `spec.podCIDRs` of this node seen, with a generation that grows with each
/// change; the controllers that follow it are woken on a change.
#[derive(Debug, Default)]
pub struct NodeCidrs {
    state: Mutex<(u64, Vec<String>)>,
    listeners: Mutex<Vec<Arc<StopSignal>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl NodeCidrs {
    /// Records `cidrs` (a Node's `spec.podCIDRs`, as the API gives them) and wakes the
    /// listeners when they differ from the last; an empty list (no podCIDRs yet) is ignored.
    /// Returns whether they changed.
    pub fn publish(&self, cidrs: &[String]) -> bool {
        {
            let mut st = lock(&self.state);
            if cidrs.is_empty() || st.1 == cidrs {
                return false;
            }
            // Only lists install could render: each a CIDR, none twice (the API server validates
            // spec.podCIDRs; this keeps a bad one out of the conflist all the same).
            let bad = cidrs
                .iter()
                .enumerate()
                .any(|(i, c)| c.parse::<ipnetwork::IpNetwork>().is_err() || cidrs[..i].contains(c));
            if bad {
                warn!(pod_cidrs = ?cidrs, "this node's spec.podCIDRs are not distinct CIDRs: ignored");
                return false;
            }
            st.0 += 1;
            st.1 = cidrs.to_vec();
        }
        for l in lock(&self.listeners).iter() {
            l.wake();
        }
        true
    }

    /// The generation (0: nothing seen yet) and the podCIDRs.
    pub fn current(&self) -> (u64, Vec<String>) {
        lock(&self.state).clone()
    }

    /// The generation alone.
    pub fn generation(&self) -> u64 {
        lock(&self.state).0
    }

    /// Wakes `signal`'s sleepers at each change.
    pub(crate) fn listen(&self, signal: Arc<StopSignal>) {
        lock(&self.listeners).push(signal);
    }
}

/// A subscriber of the route controller's Node reflector: publishes this node's podCIDRs in
/// `cells` after each list and each change of this node's Node.
pub(crate) struct PublishOwn {
    /// This node's `metadata.name`.
    pub(crate) node_name: String,
    /// Where they are published.
    pub(crate) cells: Arc<NodeCidrs>,
}

impl PublishOwn {
    fn publish(&self, nodes: &Store<NodeEntry>) {
        if let Some(me) = nodes.get(&self.node_name) {
            self.cells.publish(&me.pod_cidrs);
        }
    }
}

impl Consumer<NodeEntry> for PublishOwn {
    fn replaced(&mut self, nodes: &Store<NodeEntry>, _: &Relisted<NodeEntry>) {
        self.publish(nodes);
    }

    fn changed(&mut self, nodes: &Store<NodeEntry>, change: &Change<NodeEntry>) {
        if *change.key == *self.node_name {
            self.publish(nodes);
        }
    }
}

/// Settings of the follower thread.
#[derive(Debug, Clone)]
pub struct FollowConfig {
    /// This node's `metadata.name`.
    pub node_name: String,
    /// The conflist `install` wrote, as mounted here (`--pod-cidrs-conflist`); `None`: nothing
    /// to rewrite (the thread then only polls, for the egress NAT).
    pub conflist: Option<PathBuf>,
    /// GET this Node this often (no `--node-routes` watch to learn from); `None`: the route
    /// controller publishes.
    pub poll: Option<Duration>,
}

/// The running follower: polls the Node when asked to and keeps the conflist's ranges.
pub struct Follower {
    stop: Arc<StopSignal>,
    thread: Option<JoinHandle<()>>,
}

impl Follower {
    /// Starts the thread.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn start(
        run: ControllerSettings,
        cfg: FollowConfig,
        cidrs: Arc<NodeCidrs>,
    ) -> anyhow::Result<Follower> {
        let stop = Arc::new(StopSignal::default());
        cidrs.listen(Arc::clone(&stop));
        let s = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("pod-cidrs".into())
            .spawn(move || follow(&s, &run, &cfg, &cidrs))?;
        Ok(Follower {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread; the conflist stays as it is.
    pub fn stop(mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How long a failed conflist rewrite waits before the next try.
const REWRITE_RETRY: Duration = Duration::from_secs(10);

fn follow(stop: &StopSignal, run: &ControllerSettings, cfg: &FollowConfig, cidrs: &NodeCidrs) {
    info!(node = %cfg.node_name, conflist = ?cfg.conflist, poll = ?cfg.poll, "following this node's podCIDRs");
    let mut rng = Rng::from_entropy();
    let mut failures = 0u32;
    let mut errors = std::collections::BTreeMap::new();
    // The conflist is checked against the Node at once (it may have changed while the agent was
    // down); the egress NAT alone read the Node itself at start.
    let mut next_poll = Instant::now()
        + cfg
            .poll
            .filter(|_| cfg.conflist.is_none())
            .unwrap_or_default();
    let mut done = 0u64;
    let mut retry_at: Option<Instant> = None;
    loop {
        if let Some(every) = cfg.poll {
            if Instant::now() >= next_poll {
                let got = crate::mint::in_cluster_client(&run.api)
                    .and_then(|(c, _)| c.get_node(&cfg.node_name, run.api.request_timeout));
                next_poll = Instant::now()
                    + match got {
                        Ok(n) => {
                            failures = 0;
                            cidrs.publish(&n.pod_cidrs);
                            every
                        }
                        Err(e) => {
                            let d = run.api_failure(&mut failures, &mut errors, &e, &mut rng);
                            debug!(error = %e, retry_in = ?d, node = %cfg.node_name, "cannot read this node's podCIDRs");
                            d.min(every)
                        }
                    };
            }
        }
        let (generation, now) = cidrs.current();
        let due = generation != done || retry_at.is_some_and(|t| Instant::now() >= t);
        if let (Some(path), true) = (&cfg.conflist, due && generation > 0) {
            match rewrite_conflist(path, &now, &run.kubeconfig) {
                Ok(()) => retry_at = None,
                Err(e) => {
                    warn!(error = format!("{e:#}"), conflist = %path.display(), retry_in = ?REWRITE_RETRY, "cannot make the conflist's pod ranges follow this node's podCIDRs");
                    retry_at = Some(Instant::now() + REWRITE_RETRY);
                }
            }
        }
        done = generation;
        let mut wait = Duration::from_secs(3600);
        if cfg.poll.is_some() {
            wait = wait.min(next_poll.saturating_duration_since(Instant::now()));
        }
        if let Some(t) = retry_at {
            wait = wait.min(t.saturating_duration_since(Instant::now()));
        }
        if stop.sleep_unless(wait, || cidrs.generation() != done) {
            return;
        }
    }
}

/// Rewrites `path`'s follower ranges for `cidrs` when they differ: read, [`with_pod_ranges`],
/// written atomically (mode 0644, as `install` writes it), all under the conf dir's lock
/// ([`tern_net::drain::lock_conf_dir`]). An absent conflist (not installed, or uninstalled) and a
/// begun uninstall leave everything as it is.
///
/// [`with_pod_ranges`]: crate::conflist::with_pod_ranges
///
/// # Errors
/// The conflist cannot be read, is not JSON, or cannot be written.
fn rewrite_conflist(path: &Path, cidrs: &[String], kubeconfig: &Path) -> anyhow::Result<()> {
    // Checked and written under the lock uninstall drains under: a drain between the check and
    // the write would be undone.
    let conf_dir = path.parent().unwrap_or(Path::new("."));
    let Some(_held) = tern_net::drain::lock_conf_dir_if_present(conf_dir)
        .with_context(|| format!("lock {}", conf_dir.display()))?
    else {
        debug!(conf_dir = %conf_dir.display(), "no CNI conf dir: no conflist to follow");
        return Ok(());
    };
    if crate::uninstall::uninstalling(kubeconfig) {
        debug!("tern-agent uninstall began; the conflist is no longer kept");
        return Ok(());
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            debug!(conflist = %path.display(), "no conflist to follow (not installed)");
            return Ok(());
        }
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    };
    let conflist: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))?;
    let Some(next) = crate::conflist::with_pod_ranges(&conflist, cidrs) else {
        return Ok(());
    };
    let body = serde_json::to_string_pretty(&next)? + "\n";
    tern_kube::write_atomic(path, body.as_bytes(), 0o644)?;
    warn!(conflist = %path.display(), pod_cidrs = ?cidrs, "this node's podCIDRs changed (its Node registered again): the conflist's IPAM ranges now follow them; pods started before keep addresses from the old ranges, which other nodes no longer route: delete those pods to move them");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_ignores_empty_and_repeats_and_wakes_listeners() {
        let c = NodeCidrs::default();
        assert_eq!(c.current(), (0, vec![]));
        assert!(!c.publish(&[]));
        assert!(!c.publish(&["banana".to_owned()]), "not a CIDR");
        assert!(
            !c.publish(&["10.1.0.0/24".to_owned(), "10.1.0.0/24".to_owned()]),
            "twice"
        );
        let a = vec!["10.1.0.0/24".to_owned()];
        assert!(c.publish(&a));
        assert!(!c.publish(&a));
        assert_eq!(c.current(), (1, a));
        let signal = Arc::new(StopSignal::default());
        c.listen(Arc::clone(&signal));
        let seen = c.generation();
        let cells = Arc::new(c);
        let c2 = Arc::clone(&cells);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            c2.publish(&["10.2.0.0/24".to_owned()]);
        });
        let start = Instant::now();
        assert!(!signal.sleep_unless(Duration::from_secs(30), || cells.generation() != seen));
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "woken by the change"
        );
        assert_eq!(cells.generation(), 2);
        t.join().unwrap();
    }

    #[test]
    fn the_conflist_follows_only_when_installed_and_not_uninstalling() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("10-tern.conflist");
        let kubeconfig = dir.path().join("tern-kubeconfig");
        let cidrs = ["10.1.0.0/24".to_owned()];
        rewrite_conflist(&path, &cidrs, &kubeconfig).unwrap();
        assert!(!path.exists(), "never created");
        let installed = crate::conflist::render(
            crate::conflist::DEFAULT_TEMPLATE,
            &kubeconfig,
            "n1",
            Some(&crate::conflist::ranges_for(&["10.9.0.0/24".into()])),
        )
        .unwrap();
        let text = serde_json::to_string_pretty(&installed).unwrap() + "\n";
        std::fs::write(&path, &text).unwrap();
        std::fs::write(dir.path().join(crate::uninstall::UNINSTALLING_MARK), "").unwrap();
        rewrite_conflist(&path, &cidrs, &kubeconfig).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            text,
            "uninstalling"
        );
        std::fs::remove_file(dir.path().join(crate::uninstall::UNINSTALLING_MARK)).unwrap();
        rewrite_conflist(&path, &cidrs, &kubeconfig).unwrap();
        let now: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            now["plugins"][0]["ipam"]["ranges"],
            crate::conflist::ranges_for(&cidrs)
        );
        std::fs::write(&path, "{").unwrap();
        assert!(rewrite_conflist(&path, &cidrs, &kubeconfig).is_err());
    }

    /// A rewrite racing uninstall never undoes its drain: rewrites in a loop (each changes the
    /// ranges) while uninstall marks and drains; afterwards tern's entry is draining, every round.
    /// Without the conf dir's lock a rewrite that checked the mark before uninstall wrote it
    /// landed after the drain (10 of 300 rounds in a reviewer's stress test).
    #[test]
    fn a_rewrite_racing_uninstall_never_undoes_the_drain() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let plan = tern_net::drain::DrainPlan {
            conflist: "10-tern.conflist".into(),
            kubeconfig: "tern-kubeconfig".into(),
            plugins: vec!["tern".into()],
            remove_egress_nat: false,
            remove_node_routes: false,
            remove_network_policy: false,
        };
        for round in 0..400 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(&plan.conflist);
            let kubeconfig = dir.path().join(&plan.kubeconfig);
            let ranges = crate::conflist::ranges_for(&["10.9.0.0/24".into()]);
            let installed = crate::conflist::render(
                crate::conflist::DEFAULT_TEMPLATE,
                &kubeconfig,
                "n1",
                Some(&ranges),
            )
            .unwrap();
            std::fs::write(&path, serde_json::to_string_pretty(&installed).unwrap()).unwrap();
            let stop = AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    let pairs = [["10.1.0.0/24".to_owned()], ["10.2.0.0/24".to_owned()]];
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        rewrite_conflist(&path, &pairs[i % 2], &kubeconfig).unwrap();
                        i += 1;
                    }
                });
                std::thread::sleep(Duration::from_micros(200 + (round % 7) * 150));
                crate::uninstall::mark_and_drain(&plan, dir.path()).unwrap();
                std::thread::sleep(Duration::from_millis(2));
                stop.store(true, Ordering::Relaxed);
            });
            let now: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            assert_eq!(
                now["plugins"][0]["draining"],
                serde_json::Value::Bool(true),
                "round {round}: the drain was undone"
            );
        }
    }
}

//! The plugins' verb reports ([`tern_node::report`]): the datagram socket in the agent's run
//! directory, the thread that receives them, and the metric families they feed.
//!
//! Invariants: a datagram counts only when it parses as exactly one report; anything else (too
//! long, truncated, not ASCII, an unknown plugin or verb, a code or duration out of range) is
//! counted as rejected and otherwise ignored. The receive buffer has a fixed size: nothing a
//! sender says sizes an allocation. Label values come from fixed sets (3 plugins, 6 verbs, codes
//! 0–999), so a sender cannot grow the series without bound.

use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context as _;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tern_node::report::{VerbReport, MAX_REPORT};
use tracing::{debug, warn};

/// Upper bounds of the verb duration buckets (seconds): fine from 1 ms to 100 ms, where the
/// plugins' verbs fall, then coarse up to 10 s (a slow IPAM, an API lookup at its deadline).
pub const VERB_BUCKETS: [f64; 14] = [
    0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 1.0, 10.0,
];

/// Labels of `tern_cni_verb_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbCodeLabels {
    /// `tern`, `tern-tuning` or `tern-ipam`.
    pub plugin: &'static str,
    /// `CNI_COMMAND`: `ADD`, `DEL`, `CHECK`, `STATUS`, `GC` or `VERSION`.
    pub verb: &'static str,
    /// 0 for success, else the CNI error code.
    pub code: u32,
}

/// Labels of `tern_cni_verb_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    /// As in [`VerbCodeLabels`].
    pub plugin: &'static str,
    /// As in [`VerbCodeLabels`].
    pub verb: &'static str,
}

type HistogramFamily = Family<VerbLabels, Histogram, fn() -> Histogram>;

fn verb_histogram() -> Histogram {
    Histogram::new(VERB_BUCKETS)
}

/// The verb metrics; clones share the same counts.
#[derive(Clone, Debug)]
pub struct VerbMetrics {
    total: Family<VerbCodeLabels, Counter>,
    duration: HistogramFamily,
    rejected: Counter,
}

impl Default for VerbMetrics {
    fn default() -> Self {
        VerbMetrics {
            total: Family::default(),
            duration: Family::new_with_constructor(verb_histogram as fn() -> Histogram),
            rejected: Counter::default(),
        }
    }
}

impl VerbMetrics {
    /// Counts one datagram: a valid report into the verb families, anything else as rejected.
    pub fn record(&self, datagram: &[u8]) {
        match VerbReport::parse(datagram) {
            Some(r) => {
                let verb = r.verb;
                self.total
                    .get_or_create(&VerbCodeLabels {
                        plugin: r.plugin,
                        verb,
                        code: r.code,
                    })
                    .inc();
                // Microseconds to seconds: exact to the histogram's precision (f64).
                #[allow(clippy::cast_precision_loss)]
                let secs = r.micros as f64 / 1e6;
                self.duration
                    .get_or_create(&VerbLabels {
                        plugin: r.plugin,
                        verb,
                    })
                    .observe(secs);
            }
            None => {
                self.rejected.inc();
                debug!(len = datagram.len(), "verb report rejected");
            }
        }
    }

    /// Reports of `plugin`'s `verb` with `code` counted so far.
    pub fn count(&self, plugin: &'static str, verb: &'static str, code: u32) -> u64 {
        self.total
            .get(&VerbCodeLabels { plugin, verb, code })
            .map_or(0, |c| c.get())
    }

    /// Reports counted as rejected so far.
    pub fn rejected(&self) -> u64 {
        self.rejected.get()
    }

    /// Adds the families to `registry`: `tern_cni_verb_total{plugin,verb,code}`,
    /// `tern_cni_verb_duration_seconds{plugin,verb}` and
    /// `tern_agent_verb_reports_rejected_total`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "tern_cni_verb",
            "CNI verbs run by tern's plugins, by plugin, verb and result code (0: success).",
            self.total.clone(),
        );
        registry.register(
            "tern_cni_verb_duration_seconds",
            "Time of the plugins' own work per verb, from the dispatcher's start to the result written.",
            self.duration.clone(),
        );
        registry.register(
            "tern_agent_verb_reports_rejected",
            "Datagrams on the verb report socket that were not a valid report.",
            self.rejected.clone(),
        );
    }
}

/// The receiving side: the bound socket and its thread.
#[derive(Debug)]
pub struct VerbReceiver {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// How long one receive waits before the thread looks at its stop flag again.
const POLL: Duration = Duration::from_millis(500);

impl VerbReceiver {
    /// Binds `path` (its directory made 0700 when it has to be created; the socket 0600,
    /// replacing a stale one) and starts the thread that feeds `metrics`.
    ///
    /// # Errors
    /// The directory cannot be made, another process is bound there, or binding fails.
    pub fn start(path: &Path, metrics: VerbMetrics) -> anyhow::Result<VerbReceiver> {
        let dir = path
            .parent()
            .context("verb report socket has no directory")?;
        if !dir.is_dir() {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .with_context(|| format!("chmod 0700 {}", dir.display()))?;
        }
        if let Ok(m) = std::fs::symlink_metadata(path) {
            if !m.file_type().is_socket() {
                anyhow::bail!(
                    "{} exists and is not a socket; remove it or choose another --metrics-socket",
                    path.display()
                );
            }
            let probe = UnixDatagram::unbound().context("probe socket")?;
            if probe.connect(path).is_ok() {
                anyhow::bail!("another process is bound to {}", path.display());
            }
            std::fs::remove_file(path)
                .with_context(|| format!("remove stale socket {}", path.display()))?;
        }
        let sock = UnixDatagram::bind(path).with_context(|| format!("bind {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("chmod 0600 {}", path.display()))?;
        sock.set_read_timeout(Some(POLL))?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("verb-reports".into())
            .spawn(move || receive(&sock, &metrics, &s))?;
        Ok(VerbReceiver {
            path: path.to_owned(),
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread (at once: an empty datagram wakes it) and removes the socket.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Ok(s) = UnixDatagram::unbound() {
            let _ = s.set_nonblocking(true);
            let _ = s.send_to(&[], &self.path);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn receive(sock: &UnixDatagram, metrics: &VerbMetrics, stop: &AtomicBool) {
    // One byte more than the longest report: a longer datagram fills the buffer (the kernel
    // drops the rest) and is rejected by its length.
    let mut buf = [0u8; MAX_REPORT + 1];
    loop {
        let got = sock.recv(&mut buf);
        if stop.load(Ordering::SeqCst) {
            return;
        }
        match got {
            Ok(n) => metrics.record(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                warn!(error = %e, "verb report socket");
                std::thread::sleep(POLL);
            }
        }
    }
}

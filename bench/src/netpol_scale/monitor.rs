//! `nft monitor` in each agent's netns, read by a thread that stamps every line on receipt (epoch
//! seconds) and folds the lines into transactions (one ends with nft's `# new generation` line):
//! when it began and ended, whether it replaced `inet tern_netpol`, and which marker addresses
//! (the fixtures' `10.251.*`, the changing policy's `172.16.*`/`172.17.*`, the ADD phase's
//! `10.202.*`) it added or deleted.
//! The lines themselves are not kept: a replace of a 30,000-policy table is megabytes.
//!
//! Invariant: a transaction of another table (the readiness probe's) is recorded with no flags.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::cluster::api::now;
use crate::Res;

/// One transaction as `nft monitor` showed it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tx {
    pub(crate) start: f64,
    pub(crate) gen: f64,
    pub(crate) ours: bool,
    pub(crate) replace: bool,
    pub(crate) lines: usize,
    pub(crate) added: HashSet<String>,
    pub(crate) deleted: HashSet<String>,
    pub(crate) sets_deleted: bool,
}

#[derive(Default)]
struct State {
    txs: Vec<Tx>,
    cur: Option<Tx>,
    probe_seen: bool,
}

/// One agent's monitor.
pub(crate) struct Monitor {
    child: Child,
    state: Arc<Mutex<State>>,
}

const MARKS: [&str; 4] = ["10.251.", "172.16.", "172.17.", "10.202."];

/// The marker addresses, networks and ranges (`a-b`: an interval set's element) of `line`.
fn tokens(line: &str, into: &mut HashSet<String>) {
    for t in line.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '/' || c == '-')) {
        if MARKS.iter().any(|m| t.starts_with(m)) {
            into.insert(t.to_string());
        }
    }
}

/// An IPv4 address as a number.
fn v4(s: &str) -> Option<u32> {
    s.parse::<std::net::Ipv4Addr>().ok().map(u32::from)
}

/// Whether the element `token` (an address, a range `a-b` or a network) is `mark` or, for an
/// address mark, holds it (the engine merges adjacent addresses into one interval element).
fn holds(token: &str, mark: &str) -> bool {
    if token == mark {
        return true;
    }
    let Some(m) = v4(mark) else {
        return false;
    };
    if let Some((a, b)) = token.split_once('-') {
        return matches!((v4(a), v4(b)), (Some(a), Some(b)) if a <= m && m <= b);
    }
    if let Some((net, len)) = token.split_once('/') {
        if let (Some(n), Ok(len)) = (v4(net), len.parse::<u32>()) {
            let mask = u32::MAX.checked_shl(32 - len.min(32)).unwrap_or(0);
            return n & mask == m & mask;
        }
    }
    false
}

fn fold(st: &mut State, ts: f64, line: &str) {
    if line.contains("tern_np_probe") {
        st.probe_seen = true;
    }
    let tx = st.cur.get_or_insert_with(|| Tx {
        start: ts,
        ..Tx::default()
    });
    tx.lines += 1;
    if line.starts_with("# new generation") {
        tx.gen = ts;
        if let Some(done) = st.cur.take() {
            st.txs.push(done);
        }
        return;
    }
    if line.contains("inet tern_netpol") {
        tx.ours = true;
    }
    if line.starts_with("add table inet tern_netpol") {
        tx.replace = true;
    }
    // The incremental engine drops a set no rule names any more whole, elements and all.
    if line.starts_with("delete set inet tern_netpol") {
        tx.sets_deleted = true;
    }
    if MARKS.iter().any(|m| line.contains(m)) {
        if line.starts_with("delete") {
            tokens(line, &mut tx.deleted);
        } else {
            tokens(line, &mut tx.added);
        }
    }
}

impl Monitor {
    /// Starts `nft monitor` in NS and returns once it is subscribed (a probe table's transaction
    /// reached it: a monitor started 0.3 s before a transaction missed it, seen in the bash harness
    /// this replaced).
    pub(crate) fn start(ns: &str) -> Res<Self> {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, "nft", "monitor"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("nft monitor in {ns}: {e}"))?;
        crate::cluster::track(child.id());
        let out = child.stdout.take().ok_or("nft monitor: no stdout")?;
        let state = Arc::new(Mutex::new(State::default()));
        let st = Arc::clone(&state);
        thread::spawn(move || {
            let mut r = BufReader::with_capacity(1 << 20, out);
            let mut line = String::new();
            while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                let ts = now();
                if let Ok(mut g) = st.lock() {
                    fold(&mut g, ts, line.trim_end());
                }
                line.clear();
            }
        });
        let m = Monitor { child, state };
        // A deadline, not a count of probes: at a load average of 12 (a shape-B load beside other
        // builds) `nft monitor` took longer than 200 probes to subscribe.
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while std::time::Instant::now() < deadline {
            let _ = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    ns,
                    "nft",
                    "add table inet tern_np_probe; delete table inet tern_np_probe",
                ])
                .status();
            if m.state.lock().map(|g| g.probe_seen).unwrap_or(false) {
                return Ok(m);
            }
            thread::sleep(Duration::from_millis(50));
        }
        Err(format!("nft monitor in {ns} not subscribed within 120 s"))
    }

    /// The transactions of the agent's table that began at or after `t0`.
    pub(crate) fn since(&self, t0: f64) -> Vec<Tx> {
        self.state
            .lock()
            .map(|g| {
                g.txs
                    .iter()
                    .filter(|t| t.ours && t.start >= t0)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first transaction at or after `t0` that shows `mark` added (`present`) or gone (a
    /// replace without it, or a delete of it).
    pub(crate) fn find(&self, t0: f64, mark: &str, present: bool) -> Option<Tx> {
        self.state.lock().ok().and_then(|g| {
            g.txs
                .iter()
                .filter(|t| t.ours && t.start >= t0)
                .find(|t| {
                    let added = t.added.iter().any(|e| holds(e, mark));
                    if present {
                        added
                    } else {
                        ((t.replace || t.sets_deleted) && !added)
                            || t.deleted.iter().any(|e| holds(e, mark))
                    }
                })
                .cloned()
        })
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        crate::cluster::untrack(self.child.id());
    }
}

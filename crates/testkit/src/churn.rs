//! Churn: many pods ADDed and DELeted through libcni (`tests/cnitool`) with the default chain
//! (tern + host-local, then tern-tuning with the TCP keepalive sysctls), several at once, with
//! SIGKILLs of the running plugins mixed in as a runtime's timeout delivers them; then an audit
//! of everything an attachment can leave behind. The short run is an end-to-end test, the long
//! one `tern-bench churn`.
//!
//! Invariants: everything lives in one throwaway host netns and the driver's temp dir; each pod
//! gets its own netns (deleted after its DEL); a kill hits only the plugins libcni exec'd, as a
//! runtime's timeout does (the driver survives, an IPAM child is orphaned), and the DEL follows
//! at once, without waiting for orphans.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::exec::{conflist, Cnitool, ExecError};
use crate::netns::TestNetns;
use crate::node::{files_under, tuning_attachment_files};
use crate::procs;

/// The chain's TCP keepalive sysctls: key, value written by tern-tuning.
pub const KEEPALIVE: [(&str, &str); 3] = [
    ("net.ipv4.tcp_keepalive_time", "600"),
    ("net.ipv4.tcp_keepalive_intvl", "60"),
    ("net.ipv4.tcp_keepalive_probes", "5"),
];

/// How a churn run goes.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Pods, each ADDed once and DELeted once.
    pub pods: usize,
    /// Pods in flight at once (worker threads).
    pub parallel: usize,
    /// Percentage of ADDs whose running plugin is SIGKILLed: half of them at a uniformly random
    /// time in `0..max_kill_delay` after the ADD starts (tern or tern-tuning, whichever runs),
    /// half of them tern while its IPAM child (host-local) runs, which is left running.
    pub kill_percent: u64,
    /// See [`Spec::kill_percent`].
    pub max_kill_delay: Duration,
    /// Seed of the random choices (print it to replay a run).
    pub seed: u64,
}

/// What a churn run saw.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Pods run.
    pub pods: usize,
    /// ADDs that exited 0.
    pub adds_ok: usize,
    /// ADDs that failed (killed ones included).
    pub adds_failed: usize,
    /// ADDs during which at least one plugin was killed.
    pub kills_landed: usize,
    /// Processes killed, by name.
    pub killed: BTreeMap<String, usize>,
    /// DELs that exited 0.
    pub dels_ok: usize,
    /// DELs that did not, with their output.
    pub del_failures: Vec<String>,
    /// Per-pod problems after DEL (pod end left, keepalive not restored).
    pub pod_leaks: Vec<String>,
    /// What the final audit found on the node.
    pub node_leaks: Vec<String>,
    /// Empty host-local reservation files (host-local's own torn write: it creates the file,
    /// then writes the ID; killed in between, no DEL can match it). Not tern's; removed.
    pub host_local_torn: usize,
    /// Wall time of the pods (without the audit).
    pub elapsed: Duration,
}

impl Report {
    /// Leaks of any kind and failed DELs: zero on a clean run.
    pub fn problems(&self) -> usize {
        self.del_failures.len() + self.pod_leaks.len() + self.node_leaks.len()
    }
}

/// A node for churn: its host netns and the libcni driver with the chain written.
pub struct Node {
    host: TestNetns,
    tool: Cnitool,
}

/// The network name of the churn chain.
const NETWORK: &str = "churn";

impl Node {
    /// A fresh host netns (with an uplink) and driver, the chain written with private dirs.
    ///
    /// # Errors
    /// The driver's temp dir or conflist could not be written.
    pub fn new(tag: &str) -> Result<Node, ExecError> {
        let host = TestNetns::new(&format!("churn-{tag}-h"));
        host.add_uplink();
        let mut tool = Cnitool::new()?;
        tool.in_netns(Some(host.name()));
        let scratch = tool.scratch().to_path_buf();
        let sysctl: serde_json::Map<String, Value> = KEEPALIVE
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        let list = conflist(
            NETWORK,
            "1.0.0",
            vec![
                json!({
                    "type": "tern",
                    "stateDir": scratch.join("state"),
                    "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.99.0.0/22"}]],
                             "dataDir": scratch.join("ipam")},
                }),
                json!({"type": "tern-tuning", "sysctl": sysctl, "dataDir": scratch.join("tuning")}),
            ],
        );
        tool.write_conflist(&list)?;
        Ok(Node { host, tool })
    }

    /// Runs `spec` and audits the node.
    pub fn run(&self, spec: &Spec) -> Report {
        let report = Mutex::new(Report {
            pods: spec.pods,
            ..Report::default()
        });
        let next = std::sync::atomic::AtomicUsize::new(0);
        let start = Instant::now();
        std::thread::scope(|s| {
            for w in 0..spec.parallel.max(1) {
                let (report, next) = (&report, &next);
                let mut rng =
                    Rng(spec.seed ^ (0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(w as u64 + 1)));
                s.spawn(move || loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= spec.pods {
                        break;
                    }
                    let kill = (rng.next() % 100 < spec.kill_percent).then(|| {
                        if rng.next().is_multiple_of(2) {
                            return Kill::WhileIpam;
                        }
                        let max = u64::try_from(spec.max_kill_delay.as_micros())
                            .unwrap_or(u64::MAX)
                            .max(1);
                        Kill::After(Duration::from_micros(rng.next() % max))
                    });
                    self.one_pod(i, kill, report);
                });
            }
        });
        let mut report = report.into_inner().unwrap_or_else(|e| e.into_inner());
        report.elapsed = start.elapsed();
        // Orphans of killed plugins (an IPAM child outliving tern) finish on their own time.
        std::thread::sleep(Duration::from_millis(300));
        report.host_local_torn = self.remove_torn_reservations(&mut report.node_leaks);
        report.node_leaks.extend(self.audit());
        report
    }

    fn one_pod(&self, i: usize, kill: Option<Kill>, report: &Mutex<Report>) {
        let pod = TestNetns::new(&format!("churn-p{i}"));
        let cid = format!("churn-{i}");
        let mut cmd = self.tool.command("add", Some(&pod.path()));
        cmd.env("CNI_CONTAINERID", &cid)
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut killed = Vec::new();
        let add_ok = match cmd.spawn() {
            Err(e) => {
                lock(report)
                    .del_failures
                    .push(format!("{cid}: spawn ADD: {e}"));
                return;
            }
            Ok(mut child) => {
                let pgid = i32::try_from(child.id()).unwrap_or(i32::MAX);
                match kill {
                    None => {}
                    // As a runtime's timeout: the plugin libcni exec'd dies, its IPAM child
                    // (host-local) is orphaned and goes on while the runtime DELs.
                    Some(Kill::WhileIpam) => {
                        let seen =
                            procs::wait_for_member(pgid, "host-local", Duration::from_secs(5));
                        if seen.is_some() {
                            killed = procs::kill_members_named(pgid, &["tern"]);
                        }
                    }
                    Some(Kill::After(delay)) => {
                        std::thread::sleep(delay);
                        killed = procs::kill_members_named(pgid, &["tern", "tern-tuning"]);
                    }
                }
                child.wait().is_ok_and(|s| s.success())
            }
        };
        let mut del = self.tool.command("del", Some(&pod.path()));
        del.env("CNI_CONTAINERID", &cid);
        let del_out = del.output();
        let after = pod.exec(&[
            "sh",
            "-c",
            "cat /proc/sys/net/ipv4/tcp_keepalive_time /proc/sys/net/ipv4/tcp_keepalive_intvl \
             /proc/sys/net/ipv4/tcp_keepalive_probes; ip -o link show",
        ]);
        drop(pod);
        let mut r = lock(report);
        if add_ok {
            r.adds_ok += 1;
        } else {
            r.adds_failed += 1;
        }
        if !killed.is_empty() {
            r.kills_landed += 1;
        }
        for k in killed {
            *r.killed.entry(k).or_default() += 1;
        }
        match del_out {
            Ok(o) if o.status.success() => r.dels_ok += 1,
            Ok(o) => r.del_failures.push(format!(
                "{cid}: DEL {}: {}{}",
                o.status,
                String::from_utf8_lossy(&o.stdout).trim(),
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => r.del_failures.push(format!("{cid}: spawn DEL: {e}")),
        }
        let text = String::from_utf8_lossy(&after.stdout);
        let values: Vec<&str> = text.lines().take(3).collect();
        // A fresh netns starts from the kernel's defaults, not from the host's values.
        if values != ["7200", "75", "9"] {
            r.pod_leaks
                .push(format!("{cid}: pod keepalive after DEL {values:?}"));
        }
        if text.lines().skip(3).any(|l| !l.contains(" lo:")) {
            r.pod_leaks
                .push(format!("{cid}: links left in the pod: {text:?}"));
        }
    }

    /// Removes and counts host-local's empty reservation files; a reservation that still holds
    /// an ID is a leak.
    fn remove_torn_reservations(&self, leaks: &mut Vec<String>) -> usize {
        let mut torn = 0;
        for p in files_under(&self.tool.scratch().join("ipam")) {
            if name_of(&p).parse::<std::net::IpAddr>().is_err() {
                continue;
            }
            match std::fs::read_to_string(&p) {
                Ok(c) if c.trim().is_empty() => {
                    torn += usize::from(std::fs::remove_file(&p).is_ok());
                }
                Ok(c) => leaks.push(format!("lease {} of {:?} left", name_of(&p), c.trim())),
                Err(e) => leaks.push(format!("lease {} unreadable: {e}", name_of(&p))),
            }
        }
        torn
    }

    /// Everything the node still holds of any attachment.
    fn audit(&self) -> Vec<String> {
        let mut leaks = Vec::new();
        let links = self.host.ip(&["-o", "link", "show"]);
        for l in links.lines().filter(|l| l.contains(": tern")) {
            leaks.push(format!("host link left: {l}"));
        }
        for fam in ["-4", "-6"] {
            let routes = self.host.ip(&[fam, "route", "show", "table", "all"]);
            for r in routes
                .lines()
                .filter(|r| r.contains("dev tern") || r.starts_with("10.99."))
            {
                leaks.push(format!("host route left: {r}"));
            }
        }
        let scratch = self.tool.scratch();
        let state = files_under(&scratch.join("state"));
        let tuning = tuning_attachment_files(&scratch.join("tuning"));
        for (dir, files) in [("state", state), ("tuning", tuning)] {
            for f in files {
                leaks.push(format!("{dir} file left: {}", f.display()));
            }
        }
        for f in files_under(scratch)
            .into_iter()
            .filter(|p| name_of(p).contains(".tmp"))
        {
            leaks.push(format!("temp file left: {}", f.display()));
        }
        leaks
    }
}

fn lock(r: &Mutex<Report>) -> std::sync::MutexGuard<'_, Report> {
    r.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn name_of(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// When and what a kill hits.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// The running plugins (tern, tern-tuning) this long after the ADD started.
    After(Duration),
    /// tern, as soon as its IPAM child (host-local) is seen running.
    WhileIpam,
}

/// xorshift64*: reproducible from the seed, good enough to spread kills.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0.max(1);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

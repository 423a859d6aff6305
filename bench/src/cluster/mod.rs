//! The bring-up and teardown `tern-bench netpol-scale` and `tern-bench scale` share: etcd and
//! kube-apiserver v1.34.4 started by the real-cluster tier's own bring-up (`tests/cluster/lib.sh`,
//! its ports: hence the host-tests lock) bound to HUB on a bridge, deploy/'s RBAC, kwok, and
//! agents each in a netns of their own on that bridge ([`agents`]); and what is read of the
//! processes from outside: CPU (utime + stime, with the children waited for: the agent's nft),
//! VmRSS and /metrics.
//!
//! Invariant: every process started here has a pid file under `kt`; teardown stops them all.

mod agents;
pub(crate) mod api;
pub(crate) mod writer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sys::signal::{SigSet, Signal};

use crate::env::ip;
use crate::Res;

/// HUB: the API server's address on the bridge `BRIDGE` (10.95/16: nothing else here routes it).
pub(crate) const HUB: &str = "10.95.255.254";
const BRIDGE: &str = "tnps0";
/// The tier's API port (tests/cluster/lib.sh).
pub(crate) const API_PORT: u16 = 16443;

/// The run's directories and binaries.
#[derive(Clone, Debug)]
pub(crate) struct Cluster {
    pub(crate) root: PathBuf,
    pub(crate) kt: PathBuf,
    pub(crate) agent_bin: PathBuf,
}

/// etcd's revision moved past every agent's resourceVersion (puts of a key outside /registry
/// through etcd's JSON gateway) and compacted to it, with the API server down.
pub(crate) fn compact_etcd() -> Res<String> {
    let post = |what: &str, body: &str| -> Res<String> {
        let out = Command::new("curl")
            .args([
                "-sf",
                "-X",
                "POST",
                &format!("http://127.0.0.1:23790/v3/kv/{what}"),
                "-d",
                body,
            ])
            .output()
            .map_err(|e| format!("curl etcd: {e}"))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let mut rev = String::new();
    for _ in 0..20 {
        // key "/tern-scale/advance", value "x", base64
        let r = post(
            "put",
            r#"{"key":"L3Rlcm4tc2NhbGUvYWR2YW5jZQ==","value":"eA=="}"#,
        )?;
        let v: serde_json::Value =
            serde_json::from_str(&r).map_err(|e| format!("etcd put: {e}: {r}"))?;
        rev = v["header"]["revision"].as_str().unwrap_or("").to_string();
    }
    post(
        "compaction",
        &serde_json::json!({"revision": rev, "physical": true}).to_string(),
    )?;
    Ok(rev)
}

pub(crate) fn agent_ns(k: usize) -> String {
    format!("tnps-{k}")
}

impl Cluster {
    /// Runs SCRIPT in bash with the tier's bring-up (`tests/cluster/lib.sh`) sourced.
    pub(crate) fn bash(&self, script: &str) -> Res<String> {
        let pre = format!(
            "set -euo pipefail\nexport KT={kt} TERN_CLUSTER_API_ADDR={HUB} TERN_CLUSTER_IP_FAMILY=ipv4\nROOT={root}\nHUB={HUB}\nagent_bin={bin}\n. \"$ROOT/tests/cluster/lib.sh\"\n",
            kt = self.kt.display(),
            root = self.root.display(),
            bin = self.agent_bin.display()
        );
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("{pre}{script}"))
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("bash: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "bring-up step failed ({script:.60}...): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The bridge holding HUB/16 in the root netns (the API server binds there); etcd,
    /// kube-apiserver (its certificate naming HUB too; tokens of at most 1 h, the grant the
    /// agents' refresh schedule is measured against) on HUB; deploy/'s namespace, service
    /// accounts and RBAC (not the DaemonSet: no kubelet here); kwok's binary. Fails when the etcd
    /// or the API server it started is not the one answering: a run killed without its teardown
    /// leaves its own on the tier's ports, the health checks pass against those, and the run then
    /// loads a stale cluster (seen 2026-12-06: 409 on every Namespace of the killed run).
    pub(crate) fn up(&self) -> Res<()> {
        std::fs::create_dir_all(&self.kt).map_err(|e| format!("{}: {e}", self.kt.display()))?;
        ip(&["link", "add", BRIDGE, "type", "bridge"])?;
        ip(&["link", "set", BRIDGE, "up"])?;
        ip(&["addr", "add", &format!("{HUB}/16"), "dev", BRIDGE])?;
        self.bash(&format!(
            "[ -x \"$K8S_BIN/kube-apiserver\" ] || flock /run/tern-build-go.lock bash \"$ROOT/scripts/build-go\" kubernetes etcd >/dev/null\n\
             flock /run/tern-build-go.lock bash \"$ROOT/scripts/build-go\" kwok >/dev/null\n\
             make_pki\ncert apiserver kube-apiserver \"\" \"IP:127.0.0.1,IP:{HUB},DNS:localhost,DNS:kubernetes\"\n\
             start_etcd\nstart_apiserver --service-account-max-token-expiration 1h\n\
             kubectl apply -f \"$ROOT/deploy/00-namespace.yaml\" -f \"$ROOT/deploy/serviceaccounts.yaml\" -f \"$ROOT/deploy/rbac.yaml\" >/dev/null\n\
             for c in etcd apiserver; do kill -0 \"$(cat \"$KT/$c/pid\")\" 2>/dev/null || \
             {{ echo \"$c exited at start ($(tail -c 300 \"$KT/$c/log\")): another on the tier's ports? a run killed without teardown leaves its own\" >&2; exit 1; }}; done"
        ))
        .map(drop)
    }

    /// kwok, keeping the annotated Nodes Ready (tests/scale/kwok.yaml: Node stages only, so kwok
    /// leaves the Pods alone; their addresses are written by this bench).
    /// `extra`: more of kwok's flags (a Lease duration).
    pub(crate) fn kwok(&self, extra: &str) -> Res<()> {
        self.bash(&format!(
            "start kwok \"$GOBIN_DIR/kwok/kwok\" --kubeconfig \"$KT/pki/admin.kubeconfig\" --config \"$ROOT/tests/scale/kwok.yaml\" \
             --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake{extra}",
        ))
        .map(drop)
    }

    pub(crate) fn pid(&self, dir: &Path) -> Res<u32> {
        let f = dir.join("pid");
        std::fs::read_to_string(&f)
            .map_err(|e| format!("{}: {e}", f.display()))?
            .trim()
            .parse()
            .map_err(|e| format!("{}: {e}", f.display()))
    }

    /// Stops everything (agents, kwok, the API server, etcd), removes the netns and the bridge;
    /// copies the logs to OUT first.
    pub(crate) fn down(&self, agents: usize, out: &Path) {
        let _ = self.bash(&format!(
            "set +e\nfor p in \"$KT\"/agent-*/pid; do [ -f \"$p\" ] && kill \"$(cat \"$p\")\" 2>/dev/null; done\nsleep 1\n\
             for k in $(seq 0 {last}); do ip netns del tnps-$k 2>/dev/null; done\nip netns del tnps-pod 2>/dev/null\n\
             mkdir -p {out}\nfor d in \"$KT\"/agent-* \"$KT\"/apiserver \"$KT\"/kwok \"$KT\"/etcd; do [ -f \"$d/log\" ] && cp \"$d/log\" {out}/$(basename \"$d\").log; done\n\
             stop kwok\nstop apiserver KILL\nstop etcd\nip link del {BRIDGE} 2>/dev/null\nrm -rf \"$KT\"\ntrue",
            last = agents as i64 - 1,
            out = out.display()
        ));
    }
}

/// What every bench on this bring-up does before it starts: refuses when `kt` is left from an
/// earlier run, empties OUT, and tears down (`c.down`) on SIGINT/SIGTERM. NAME prefixes errors.
///
/// # Errors
/// The message to print; the caller exits 1.
pub(crate) fn prepare(name: &str, c: &Cluster, agents: usize, out: &Path) -> Res<()> {
    if c.kt.exists() {
        return Err(format!(
            "{name}: {} exists: a previous run? remove it (and its netns, bridge {BRIDGE}) first",
            c.kt.display()
        ));
    }
    let _ = std::fs::remove_dir_all(out);
    let _ = std::fs::create_dir_all(out);
    let (cd, out) = (c.clone(), out.to_path_buf());
    on_signal(move || cd.down(agents, &out)).map_err(|e| format!("{name}: {e}"))
}

/// Runs `down` once SIGINT or SIGTERM arrives (a ^C, `timeout`, a kill), then exits 130, as the
/// bash harnesses' trap did: both are blocked in the calling thread, so call it before any
/// thread starts (every thread inherits the mask), and waited for on a thread of its own. The
/// processes started here get an empty mask (std resets it at spawn), so they stop as usual.
pub(crate) fn on_signal(down: impl FnOnce() + Send + 'static) -> Res<()> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block()
        .map_err(|e| format!("block SIGINT/SIGTERM: {e}"))?;
    std::thread::spawn(move || {
        if let Ok(sig) = set.wait() {
            eprintln!("tern-bench: {sig}: tearing down");
            down();
            std::process::exit(130);
        }
    });
    Ok(())
}

/// CPU seconds of PID itself and of its waited-for children (utime + stime, cutime + cstime).
pub(crate) fn cpu(pid: u32) -> (f64, f64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<f64> = rest.split(' ').map(|x| x.parse().unwrap_or(0.0)).collect();
    let g = |i: usize| f.get(i).copied().unwrap_or(0.0) / 100.0;
    (g(11) + g(12), g(13) + g(14))
}

/// VmRSS of PID, KiB.
pub(crate) fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// VmHWM (peak resident) of PID, KiB.
pub(crate) fn hwm_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// Prometheus text as series → value (series with their labels, as printed).
pub(crate) fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Agent k's /metrics (127.0.0.1:9412 in its netns).
pub(crate) fn agent_metrics(k: usize) -> BTreeMap<String, f64> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &agent_ns(k),
            "curl",
            "-s",
            "-m",
            "5",
            "http://127.0.0.1:9412/metrics",
        ])
        .output();
    out.map(|o| parse_metrics(&String::from_utf8_lossy(&o.stdout)))
        .unwrap_or_default()
}

/// The sum of every series of NAME (any labels) in M.
pub(crate) fn sum(m: &BTreeMap<String, f64>, name: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| k.as_str() == name || k.starts_with(&format!("{name}{{")))
        .map(|(_, v)| v)
        .sum()
}

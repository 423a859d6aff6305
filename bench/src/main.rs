//! `tern-bench`: one run of tern beside the reference chain (ptp), both delegating to the same
//! IPAM (Debian's host-local), invoked exactly as a runtime does: exec of the plugin binary with
//! the `CNI_*` environment and the netconf on stdin, from inside a throwaway host netns.
//!
//! Measures, per plugin and per parallelism (1 and 8 by default):
//! - ADD and DEL latency (p50, p99, in ms): wall time from spawn to reaped exit, stdout read;
//! - pods per second: pods / (wall time of the ADD phase + wall time of the DEL phase);
//! - the kernel's own veth-deletion time (one `RTM_DELLINK` over netlink, timed alone) at the same
//!   parallelism, beside DEL; and its veth-creation time (one `RTM_NEWLINK` of a pair whose peer
//!   is made in a pod netns, as tern makes it), in the ADD floor at parallelism 1;
//! - peak RSS per invocation, untimed pass: the plugin process alone (`VmHWM` read at its
//!   `PTRACE_EVENT_EXIT` stop, before its address space is torn down, so a child's memory is not
//!   counted) and, separately, host-local invoked directly with the same netconf.
//!
//! Chains, run as libcni runs a conflist (ADD in order with the previous result as
//! `prevResult`, DEL in reverse with the cached result), timed from the first spawn to the last
//! exit: the reference chain (ptp + host-local + tuning), tern + tern-tuning with host-local, and
//! tern + tern-tuning with tern-ipam (which tern runs in-process); also tern alone with tern-ipam.
//! tern-tuning and tern-ipam are taken from the directory holding `--tern`.
//!
//! Pod lookup ("tern+lookup"): tern exactly as the "tern" row, plus `kubernetes.kubeconfig`
//! pointing at the Kubernetes API server stand-in (`tern-apiserver`, HTTPS on loopback inside the
//! host netns, a token it issued); every container ID is registered as pod `default/<cid>` with a
//! fresh UID before its timed region, and every invocation carries `CNI_ARGS` naming it
//! (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`, `K8S_POD_UID`). The lookup cost is its ADD p50 minus
//! tern's; the run fails unless the stand-in saw exactly one GET of each pod per ADD phase. tern
//! makes the GET through `tern-lookup` (its API helper, exec'd from `CNI_PATH`), whose peak RSS
//! the RSS pass measures apart: exec'd directly with the same pod call, for another pod.
//!
//! Tuning plugins alone ("tern-tuning", "tuning"): each exec'd on a pod netns whose
//! `eth0` (a veth pair inside the pod) was made untimed, with the same three sysctls and a
//! `prevResult` naming `eth0`, on ADD and DEL.
//!
//! Invariants: every pod netns is created before, and deleted after, its timed region; each phase
//! starts from an empty host (no pods) and ends with every pod deleted; nothing is written outside
//! the throwaway host netns, the pod netns and a private work dir (host-local `dataDir`, tern
//! `stateDir`), all removed at exit, also on failure. Only `tern_net::netns::NetNs::run_in` enters
//! a namespace: each worker is one such scoped thread, whose children inherit its netns.
//!
//! Usage (root): `tern-bench [--pods N] [--rounds R] [--parallel 1,8] [--rss-samples N] [--tern PATH]
//! [--ptp PATH] [--ref-dir DIR] [--state-dir DIR] [--tern-b PATH]` (`--tern-b`: a second tern build
//! run beside the first in the same rounds, for an A/B). A run killed midway (Ctrl-C) leaves its
//! netns `tern-bench-<pid>-*`, `/tmp/tern-bench-<pid>` and `/run/tern-bench-<pid>` (a tmpfs where
//! `/run` is not one); remove them by hand: `ip netns del`, `umount`, `rm -r`. Nothing is swept
//! automatically: a name alone cannot tell a dead run from a live one in another PID namespace.
//! `TERN_BENCH_RSS_DETAIL=1` also prints, per
//! sampled process, its anonymous and file-backed resident memory at exit. IPAM data dirs are in the work dir
//! (under the temp dir, on the same filesystem as `/var/lib/cni` on these machines); tern's
//! `stateDir` and the tuning plugins' `dataDir` under `/run` on tmpfs, as their defaults are on a
//! node (the bench mounts a tmpfs there when this host's `/run` is not one). `scripts/bench` builds and runs it.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use nix::sys::ptrace;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tern_apiserver::ApiServer;
use tern_kube::helper::{Call, PodCall, PodReply, HELPER};
use tern_kube::token::BearerToken;
use tern_net::netlink::Handle;
use tern_net::netns::NetNs;

type Res<T> = Result<T, String>;

/// Command-line settings.
#[derive(Clone, Debug)]
struct Opts {
    pods: usize,
    rounds: usize,
    parallel: Vec<usize>,
    rss_samples: usize,
    tern: PathBuf,
    ptp: PathBuf,
    ref_dir: PathBuf,
    state_dir: Option<PathBuf>,
    /// A second tern build, run as the "tern" row's twin ("tern-b") in the same rounds, for an
    /// A/B of two builds under the same drift (`--tern-b PATH`).
    tern_b: Option<PathBuf>,
}

fn parse_opts() -> Res<Opts> {
    let root = std::env::current_dir().map_err(|e| format!("cwd: {e}"))?;
    let mut o = Opts {
        pods: 200,
        rounds: 4,
        parallel: vec![1, 8],
        rss_samples: 20,
        // tern-bench is built beside tern.
        tern: std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.join("tern")))
            .unwrap_or_else(|| root.join("target/release/tern")),
        ptp: PathBuf::from("/usr/lib/cni/ptp"),
        ref_dir: PathBuf::from("/usr/lib/cni"),
        state_dir: None,
        tern_b: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--pods" => o.pods = val()?.parse().map_err(|e| format!("--pods: {e}"))?,
            "--rounds" => o.rounds = val()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--rss-samples" => {
                o.rss_samples = val()?.parse().map_err(|e| format!("--rss-samples: {e}"))?
            }
            "--parallel" => {
                o.parallel = val()?
                    .split(',')
                    .map(|s| s.parse().map_err(|e| format!("--parallel {s}: {e}")))
                    .collect::<Res<_>>()?
            }
            "--tern" => o.tern = PathBuf::from(val()?),
            "--ptp" => o.ptp = PathBuf::from(val()?),
            "--state-dir" => o.state_dir = Some(PathBuf::from(val()?)),
            "--tern-b" => o.tern_b = Some(PathBuf::from(val()?)),
            "--ref-dir" => o.ref_dir = PathBuf::from(val()?),
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if o.pods == 0 || o.parallel.contains(&0) {
        return Err("--pods and --parallel must be positive".into());
    }
    Ok(o)
}

/// Runs `ip args...`, failing with its stderr.
fn ip(args: &[&str]) -> Res<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Everything the run creates; `Drop` removes it all.
struct Env {
    tag: String,
    host: String,
    host_ns: NetNs,
    work: PathBuf,
    /// Per-attachment state on tmpfs, where the plugins keep it by default (tern's `stateDir`
    /// `/run/cni/tern`, both tuning plugins' `dataDir` `/run/cni/tuning`).
    run_work: PathBuf,
    /// Whether the bench mounted a tmpfs on `run_work` (this host's `/run` is not one).
    run_mounted: bool,
    pods: Vec<String>,
    /// The API server stand-in, listening on loopback inside the host netns (started by
    /// [`Env::start_api`]); stopped from inside that netns on drop.
    api: Option<ApiServer>,
    /// Pod GETs the stand-in saw during lookup ADD phases, and those ADDs (checked equal per phase).
    lookup_gets: AtomicUsize,
    lookup_adds: AtomicUsize,
}

impl Env {
    fn new() -> Res<Env> {
        let tag = format!("tern-bench-{}", std::process::id());
        let host = format!("{tag}-host");
        // Fresh directories only: a leftover of a run killed midway under a reused PID (or
        // anything else by that name) is never reused, mounted over or removed by this run.
        let fresh = |dir: &Path| -> Res<()> {
            std::fs::create_dir(dir).map_err(|e| {
                format!(
                    "mkdir {}: {e} (a run killed midway leaves it: see the usage notes)",
                    dir.display()
                )
            })
        };
        let work = std::env::temp_dir().join(&tag);
        fresh(&work)?;
        let run_work = Path::new("/run").join(&tag);
        if let Err(e) = fresh(&run_work) {
            let _ = std::fs::remove_dir_all(&work);
            return Err(e);
        }
        // Both directories are this run's own from here: on failure, undo what was made.
        let mut mounted = false;
        let made = ensure_tmpfs(&run_work).and_then(|m| {
            mounted = m;
            ip(&["netns", "add", &host])
        });
        if let Err(e) = made {
            remove_run_work(&run_work, mounted);
            let _ = std::fs::remove_dir_all(&work);
            return Err(e);
        }
        let run_mounted = mounted;
        // A node-like host: lo up and an uplink with a default route (so 169.254.1.1, tern's
        // gateway, is covered by a route as on a real node). No dummy links on these kernels.
        let setup = || -> Res<NetNs> {
            ip(&["-n", &host, "link", "set", "lo", "up"])?;
            ip(&[
                "-n", &host, "link", "add", "uplink0", "type", "veth", "peer", "name", "uplink1",
            ])?;
            ip(&["-n", &host, "link", "set", "uplink0", "up"])?;
            ip(&["-n", &host, "link", "set", "uplink1", "up"])?;
            ip(&[
                "-n",
                &host,
                "addr",
                "add",
                "10.250.0.1/24",
                "dev",
                "uplink0",
            ])?;
            ip(&["-n", &host, "route", "add", "default", "via", "10.250.0.2"])?;
            NetNs::open(format!("/run/netns/{host}")).map_err(|e| e.to_string())
        };
        let host_ns = match setup() {
            Ok(ns) => ns,
            Err(e) => {
                let _ = ip(&["netns", "del", &host]);
                let _ = std::fs::remove_dir_all(&work);
                remove_run_work(&run_work, run_mounted);
                return Err(e);
            }
        };
        Ok(Env {
            tag,
            host,
            host_ns,
            work,
            run_work,
            run_mounted,
            pods: Vec::new(),
            api: None,
            lookup_gets: AtomicUsize::new(0),
            lookup_adds: AtomicUsize::new(0),
        })
    }

    /// Starts the API server stand-in in the host netns and writes a kubeconfig for it (a bearer
    /// token it issued, its CA) to `<work>/kubeconfig`, returned.
    fn start_api(&mut self) -> Res<PathBuf> {
        let api = self
            .host_ns
            .run_in(ApiServer::start)
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("API server stand-in: {e}"))?;
        let token = api.issue_token("kube-system", "tern-cni", 24 * 3600);
        let kc = tern_kube::kubeconfig::render(
            &api.url(),
            api.ca_pem().as_bytes(),
            &BearerToken::new(token),
        );
        let path = self.work.join("kubeconfig");
        std::fs::write(&path, kc).map_err(|e| format!("write {}: {e}", path.display()))?;
        self.api = Some(api);
        Ok(path)
    }

    /// Registers pod `default/<cid>` with a fresh UID in the stand-in and returns the `CNI_ARGS`
    /// a runtime would pass for it.
    fn pod_args(&self, cid: &str) -> Res<String> {
        let api = self.api.as_ref().ok_or("API server stand-in not started")?;
        let uid = tern_apiserver::uuid();
        api.set_pod("default", cid, &uid, &[], false);
        Ok(format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={cid};K8S_POD_UID={uid}"
        ))
    }

    /// GETs of pods the stand-in has seen since the last call, and the paths not seen exactly
    /// once among them. Resets its log.
    fn take_pod_gets(&self) -> (usize, Vec<String>) {
        let Some(api) = &self.api else {
            return (0, Vec::new());
        };
        let mut per: HashMap<String, usize> = HashMap::new();
        for r in api.requests() {
            if r.method == "GET" && r.path.starts_with("/api/v1/namespaces/default/pods/") {
                *per.entry(r.path).or_default() += 1;
            }
        }
        api.reset_counts();
        let total = per.values().sum();
        (
            total,
            per.into_iter()
                .filter(|(_, n)| *n != 1)
                .map(|(p, _)| p)
                .collect(),
        )
    }

    /// Gives every pod netns in `names` an `eth0` (one end of a veth pair whose other end stays
    /// in the pod too), untimed: what a meta plugin alone finds after the main plugin's ADD.
    fn add_ifaces(&self, names: &[String]) -> Res<()> {
        for n in names {
            ip(&[
                "-n", n, "link", "add", "eth0", "type", "veth", "peer", "name", "peer0",
            ])?;
            ip(&["-n", n, "link", "set", "eth0", "up"])?;
        }
        Ok(())
    }

    /// Creates `n` fresh pod netns (outside any timed region) and returns their names.
    fn make_pods(&mut self, n: usize) -> Res<Vec<String>> {
        let base = self.pods.len();
        let mut names = Vec::with_capacity(n);
        for i in base..base + n {
            let name = format!("{}-pod{i}", self.tag);
            ip(&["netns", "add", &name])?;
            self.pods.push(name.clone());
            names.push(name);
        }
        Ok(names)
    }

    fn drop_pods(&mut self, names: &[String]) {
        for n in names {
            let _ = ip(&["netns", "del", n]);
        }
        self.pods.retain(|p| !names.contains(p));
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(api) = self.api.take() {
            // Its shutdown connects to its own loopback address, which exists only there.
            let _ = self.host_ns.run_in(move || drop(api));
        }
        for p in std::mem::take(&mut self.pods) {
            let _ = ip(&["netns", "del", &p]);
        }
        let _ = ip(&["netns", "del", &self.host]);
        let _ = std::fs::remove_dir_all(&self.work);
        remove_run_work(&self.run_work, self.run_mounted);
    }
}

/// Makes `dir` live on tmpfs, as `/run` does on every systemd node (where tern keeps its
/// `stateDir` and the tuning plugins their `dataDir`): mounts a private tmpfs there unless it
/// already is one. Returns whether it mounted. Without it, a host whose `/run` is on disk (some
/// containers and VMs) charges the plugins a journalled create and rename per ADD that no node
/// pays (≈0.2 ms per tern ADD, measured on such a host).
fn ensure_tmpfs(dir: &Path) -> Res<bool> {
    let fs = nix::sys::statfs::statfs(dir).map_err(|e| format!("statfs {}: {e}", dir.display()))?;
    if fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC {
        return Ok(false);
    }
    nix::mount::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some("mode=0755,size=64m"),
    )
    .map_err(|e| format!("mount tmpfs on {}: {e}", dir.display()))?;
    println!(
        "bench: {} is not tmpfs on this host: mounted a tmpfs on {} for the plugins' state, as on a node",
        dir.parent().unwrap_or(dir).display(),
        dir.display()
    );
    Ok(true)
}

/// Removes the bench's directory under `/run`, unmounting the tmpfs the bench put there.
fn remove_run_work(dir: &Path, mounted: bool) {
    if mounted {
        let _ = nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// One plugin of a subject: its binary and its own netconf (with `cniVersion` and `name`).
#[derive(Clone, Debug)]
struct Step {
    binary: PathBuf,
    conf: Value,
}

/// One plugin, or one chain of plugins, under test.
#[derive(Clone, Debug)]
struct Subject {
    label: &'static str,
    /// One step: a plugin alone (DEL without prevResult, as before). More: a chain run as libcni
    /// runs a conflist — ADD in order, each with the previous result as `prevResult`; DEL in
    /// reverse, each with the chain's cached result as `prevResult`; timed from the first spawn
    /// to the last reaped exit.
    steps: Vec<Step>,
    cni_path: String,
    /// Whether its RSS pass also measures host-local exec'd directly.
    rss_host_local: bool,
    /// Pod lookup: every invocation carries `CNI_ARGS` naming a pod (`default/<cid>`, fresh UID)
    /// registered in the stand-in before the timed region.
    lookup: bool,
    /// A meta plugin alone: every pod netns gets `eth0` untimed ([`Env::add_ifaces`]) and every
    /// invocation (ADD and DEL) a `prevResult` naming it ([`iface_prev`]).
    on_iface: bool,
}

impl Subject {
    fn single(label: &'static str, binary: PathBuf, conf: Value, cni_path: &str) -> Subject {
        Subject {
            label,
            steps: vec![Step { binary, conf }],
            cni_path: cni_path.to_owned(),
            rss_host_local: false,
            lookup: false,
            on_iface: false,
        }
    }

    /// The previous result its first step gets on ADD (and a single step on DEL) in pod `ns`.
    fn first_prev(&self, ns: &str) -> Option<Value> {
        self.on_iface.then(|| iface_prev(ns))
    }
}

/// The result a main plugin would have returned for `eth0` in pod netns `ns` (path).
fn iface_prev(ns: &str) -> Value {
    json!({"cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": ns}],
        "ips": [{"address": "10.107.0.2/32", "interface": 0, "gateway": "169.254.1.1"}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "169.254.1.1"}]})
}

/// Every subject; `kubeconfig` (the stand-in's) adds the "tern+lookup" row.
fn subjects(o: &Opts, work: &Path, run_work: &Path, kubeconfig: Option<&Path>) -> Vec<Subject> {
    let hl = |subnet: &str, dir: &str| json!({"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": work.join(dir)});
    let ti = |subnet: &str, dir: &str| json!({"type": "tern-ipam", "ranges": [[{"subnet": subnet}]], "dataDir": work.join(dir)});
    let state = |dir: &str| {
        o.state_dir
            .clone()
            .unwrap_or_else(|| run_work.to_path_buf())
            .join(dir)
    };
    let tern_conf = |name: &str, ipam: Value, st: &str| {
        json!({"cniVersion": "1.0.0", "name": name, "type": "tern", "mtu": 1500,
            "stateDir": state(st), "ipam": ipam})
    };
    // The same three sysctls for both tuning plugins (10-tern.conflist's).
    let sysctl = json!({"net.ipv4.tcp_keepalive_time": "600", "net.ipv4.tcp_keepalive_intvl": "60",
        "net.ipv4.tcp_keepalive_probes": "5"});
    let tuning = |name: &str, ty: &str, dir: &str| json!({"cniVersion": "1.0.0", "name": name, "type": ty, "sysctl": sysctl, "dataDir": run_work.join(dir)});
    let ref_path = o.ref_dir.display().to_string();
    let tern_dir = o.tern.parent().unwrap_or(Path::new("."));
    // tern's plugins first, the reference ones after (host-local and tuning are only there).
    let both_path = format!("{}:{ref_path}", tern_dir.display());
    let mut v = vec![
        Subject {
            rss_host_local: true,
            ..Subject::single(
                "tern",
                o.tern.clone(),
                tern_conf("bench-tern", hl("10.100.0.0/16", "ipam-tern"), "tern-state"),
                &ref_path,
            )
        },
        Subject {
            rss_host_local: true,
            // ipMasq off: tern does no masquerading, so neither does the reference here.
            ..Subject::single(
                "ptp",
                o.ptp.clone(),
                json!({"cniVersion": "1.0.0", "name": "bench-ptp", "type": "ptp", "mtu": 1500,
                    "ipMasq": false, "ipam": hl("10.101.0.0/16", "ipam-ptp")}),
                &ref_path,
            )
        },
        // IPAM alone, exec'd directly with tern's netconf: the floor under both plugins.
        Subject::single(
            "hl",
            o.ref_dir.join("host-local"),
            json!({"cniVersion": "1.0.0", "name": "bench-hl", "type": "tern",
                "ipam": hl("10.102.0.0/16", "ipam-hl")}),
            &ref_path,
        ),
        // tern with tern-ipam, which it runs in-process.
        Subject::single(
            "tern/ti",
            o.tern.clone(),
            tern_conf(
                "bench-tern-ti",
                ti("10.103.0.0/16", "ipam-tern-ti"),
                "tern-ti-state",
            ),
            &both_path,
        ),
    ];
    if let Some(b) = &o.tern_b {
        v.push(Subject {
            rss_host_local: false,
            ..Subject::single(
                "tern-b",
                b.clone(),
                tern_conf(
                    "bench-tern-b",
                    hl("10.119.0.0/16", "ipam-tern-b"),
                    "tern-b-state",
                ),
                &ref_path,
            )
        });
    }
    v.push(Subject {
        label: "ref-chain",
        steps: vec![
            Step {
                binary: o.ptp.clone(),
                conf: json!({"cniVersion": "1.0.0", "name": "bench-ref-chain", "type": "ptp", "mtu": 1500,
                    "ipMasq": false, "ipam": hl("10.104.0.0/16", "ipam-ref-chain")}),
            },
            Step {
                binary: o.ref_dir.join("tuning"),
                conf: tuning("bench-ref-chain", "tuning", "tuning-ref"),
            },
        ],
        cni_path: ref_path.clone(),
        rss_host_local: false,
        lookup: false,
        on_iface: false,
    });
    for (label, name, ipam, st, td) in [
        (
            "tt-chain/hl",
            "bench-tt-hl",
            hl("10.105.0.0/16", "ipam-tt-hl"),
            "tt-hl-state",
            "tuning-tt-hl",
        ),
        (
            "tt-chain/ti",
            "bench-tt-ti",
            ti("10.106.0.0/16", "ipam-tt-ti"),
            "tt-ti-state",
            "tuning-tt-ti",
        ),
    ] {
        v.push(Subject {
            label,
            steps: vec![
                Step {
                    binary: o.tern.clone(),
                    conf: tern_conf(name, ipam, st),
                },
                Step {
                    binary: tern_dir.join("tern-tuning"),
                    conf: tuning(name, "tern-tuning", td),
                },
            ],
            cni_path: both_path.clone(),
            rss_host_local: false,
            lookup: false,
            on_iface: false,
        });
    }
    // tern exactly as the "tern" row, plus the pod lookup against the stand-in.
    if let Some(kc) = kubeconfig {
        let mut conf = tern_conf(
            "bench-tern-lookup",
            hl("10.108.0.0/16", "ipam-tern-lookup"),
            "tern-lookup-state",
        );
        conf["kubernetes"] = json!({"kubeconfig": kc});
        // No agent runs here; the token is valid for the whole run, so none is needed.
        conf["agentSocket"] = json!(run_work.join("agent.sock"));
        v.push(Subject {
            lookup: true,
            ..Subject::single("tern+lookup", o.tern.clone(), conf, &both_path)
        });
    }
    // The tuning plugins alone on a pod that already has eth0.
    v.push(Subject {
        on_iface: true,
        ..Subject::single(
            "tern-tuning",
            tern_dir.join("tern-tuning"),
            tuning("bench-tt-alone", "tern-tuning", "tuning-tt-alone"),
            &both_path,
        )
    });
    v.push(Subject {
        on_iface: true,
        ..Subject::single(
            "tuning",
            o.ref_dir.join("tuning"),
            tuning("bench-tuning-alone", "tuning", "tuning-ref-alone"),
            &ref_path,
        )
    });
    v
}

/// The command a runtime would run: a clean environment with the `CNI_*` variables.
/// `args` is `CNI_ARGS`, not set when empty.
fn plugin_cmd(
    bin: &Path,
    verb: &str,
    cid: &str,
    netns: &str,
    cni_path: &str,
    args: &str,
) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("CNI_COMMAND", verb)
        .env("CNI_CONTAINERID", cid)
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", cni_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if !args.is_empty() {
        cmd.env("CNI_ARGS", args);
    }
    cmd
}

fn feed(child: &mut Child, stdin: &[u8]) -> Res<()> {
    if let Some(mut pipe) = child.stdin.take() {
        // A plugin may exit without reading stdin (host-local's VERSION): EPIPE is not an error.
        match pipe.write_all(stdin) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                return Err(format!("write plugin stdin: {e}"))
            }
            _ => {}
        }
    }
    Ok(())
}

fn drain(child: &mut Child) -> String {
    let mut out = String::new();
    if let Some(mut pipe) = child.stdout.take() {
        let _ = pipe.read_to_string(&mut out);
    }
    out
}

/// Execs one plugin invocation and returns its wall time; an exit other than 0 is an error
/// carrying the plugin's stdout (the CNI error JSON).
fn invoke(
    bin: &Path,
    verb: &str,
    cid: &str,
    netns: &str,
    cni_path: &str,
    args: &str,
    stdin: &[u8],
) -> Res<Duration> {
    invoke_out(bin, verb, cid, netns, cni_path, args, stdin).map(|(d, _)| d)
}

/// [`invoke`], also returning the plugin's stdout.
fn invoke_out(
    bin: &Path,
    verb: &str,
    cid: &str,
    netns: &str,
    cni_path: &str,
    args: &str,
    stdin: &[u8],
) -> Res<(Duration, String)> {
    let t0 = Instant::now();
    let mut child = plugin_cmd(bin, verb, cid, netns, cni_path, args)
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
    feed(&mut child, stdin)?;
    let out = drain(&mut child);
    let status = child.wait().map_err(|e| format!("wait: {e}"))?;
    let took = t0.elapsed();
    if status.success() {
        Ok((took, out))
    } else {
        Err(format!(
            "{} {verb} {cid}: {status}: {}",
            bin.display(),
            out.trim()
        ))
    }
}

/// Execs one invocation under ptrace (untimed) and returns the process's own peak RSS in KiB:
/// `VmHWM` read at the `PTRACE_EVENT_EXIT` stop of its main thread. Other stops pass through,
/// signals re-injected. Must run on one thread from spawn to reap (ptrace ties tracer threads).
fn invoke_peak_rss(
    bin: &Path,
    verb: &str,
    cid: &str,
    netns: &str,
    cni_path: &str,
    args: &str,
    stdin: &[u8],
) -> Res<(u64, String)> {
    let mut child = plugin_cmd(bin, verb, cid, netns, cni_path, args)
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
    let raw = i32::try_from(child.id()).map_err(|e| format!("pid: {e}"))?;
    let pid = Pid::from_raw(raw);
    // The plugin is blocked reading stdin until we feed it: seize first, so its exit is seen.
    if let Err(e) = ptrace::seize(pid, ptrace::Options::PTRACE_O_TRACEEXIT) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("ptrace seize {pid}: {e}"));
    }
    feed(&mut child, stdin)?;
    let mut hwm = None;
    let status = loop {
        match waitpid(pid, Some(WaitPidFlag::__WALL)).map_err(|e| format!("waitpid: {e}"))? {
            WaitStatus::PtraceEvent(p, _, ev) if ev == ptrace::Event::PTRACE_EVENT_EXIT as i32 => {
                hwm = vm_hwm_kib(p);
                let _ = ptrace::cont(p, None);
            }
            WaitStatus::Stopped(p, sig) => {
                let _ = ptrace::cont(p, Some(sig));
            }
            WaitStatus::PtraceEvent(p, _, _) | WaitStatus::PtraceSyscall(p) => {
                let _ = ptrace::cont(p, None);
            }
            s @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => break s,
            _ => {}
        }
    };
    let out = drain(&mut child);
    if !matches!(status, WaitStatus::Exited(_, 0)) {
        return Err(format!(
            "{} {verb} {cid}: {status:?}: {}",
            bin.display(),
            out.trim()
        ));
    }
    hwm.map(|h| (h, out))
        .ok_or_else(|| format!("no VmHWM for {} {verb}", bin.display()))
}

/// `VmHWM` of a live process, in KiB.
fn vm_hwm_kib(pid: Pid) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    if std::env::var_os("TERN_BENCH_RSS_DETAIL").is_some() {
        // Where the resident memory is at exit: anonymous (heap, stacks) vs file-backed (text).
        let name = status.lines().next().unwrap_or_default();
        let rss: Vec<&str> = status
            .lines()
            .filter(|l| {
                l.starts_with("Rss")
                    || l.starts_with("VmHWM")
                    || l.starts_with("VmExe")
                    || l.starts_with("VmLib")
            })
            .collect();
        eprintln!(
            "  [{name}] {}",
            rss.join(" | ")
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The netconf of chain step `conf` with `prev` as `prevResult`.
fn with_prev(conf: &Value, prev: Option<&Value>) -> Res<Vec<u8>> {
    let mut c = conf.clone();
    if let Some(p) = prev {
        c["prevResult"] = p.clone();
    }
    serde_json::to_vec(&c).map_err(|e| e.to_string())
}

/// One chain ADD as libcni runs it: returns its wall time and the final result.
fn chain_add(subj: &Subject, cid: &str, ns: &str, args: &str) -> Res<(Duration, Value)> {
    let t0 = Instant::now();
    let mut prev: Option<Value> = subj.first_prev(ns);
    for step in &subj.steps {
        let stdin = with_prev(&step.conf, prev.as_ref())?;
        let (_, out) = invoke_out(&step.binary, "ADD", cid, ns, &subj.cni_path, args, &stdin)?;
        prev = Some(
            serde_json::from_str(&out)
                .map_err(|e| format!("{} ADD result: {e}: {out}", step.binary.display()))?,
        );
    }
    let took = t0.elapsed();
    prev.map(|p| (took, p))
        .ok_or_else(|| "empty chain".to_owned())
}

/// One chain DEL as libcni runs it: every step in reverse, with the cached result.
fn chain_del(
    subj: &Subject,
    cid: &str,
    ns: &str,
    args: &str,
    cached: Option<&Value>,
) -> Res<Duration> {
    let t0 = Instant::now();
    for step in subj.steps.iter().rev() {
        let stdin = with_prev(&step.conf, cached)?;
        invoke(&step.binary, "DEL", cid, ns, &subj.cni_path, args, &stdin)?;
    }
    Ok(t0.elapsed())
}

/// Latencies of one phase plus its wall time.
#[derive(Debug, Default)]
struct Phase {
    lat: Vec<Duration>,
    wall: Duration,
}

fn pct(v: &[Duration], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort();
    // Nearest rank: the smallest value with at least p of the samples at or below it.
    let rank = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1].as_secs_f64() * 1e3
}

/// Splits `items` into `n` round-robin chunks.
fn chunks<T: Clone>(items: &[T], n: usize) -> Vec<Vec<T>> {
    let mut out = vec![Vec::new(); n];
    for (i, it) in items.iter().enumerate() {
        out[i % n].push(it.clone());
    }
    out
}

/// Runs `work(item)` for every item on `par` workers, each a scoped thread inside the host netns,
/// started together; returns every latency and the wall time from start to the last finish.
fn run_parallel<T: Clone + Send + Sync>(
    host: &NetNs,
    items: &[T],
    par: usize,
    work: &(dyn Fn(&T) -> Res<Duration> + Sync),
) -> Res<Phase> {
    let parts = chunks(items, par);
    let barrier = Barrier::new(parts.len() + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .iter()
            .map(|part| {
                let barrier = &barrier;
                s.spawn(move || -> Res<Vec<Duration>> {
                    host.run_in(|| {
                        barrier.wait();
                        part.iter().map(work).collect::<Res<Vec<_>>>()
                    })
                    .map_err(|e| e.to_string())?
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        let mut lat = Vec::with_capacity(items.len());
        let mut first_err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(v)) => lat.extend(v),
                Ok(Err(e)) => first_err = first_err.or(Some(e)),
                Err(_) => first_err = first_err.or(Some("worker panicked".to_owned())),
            }
        }
        let wall = t0.elapsed();
        match first_err {
            Some(e) => Err(e),
            None => Ok(Phase { lat, wall }),
        }
    })
}

/// One row of the table.
#[derive(Debug)]
struct Row {
    label: &'static str,
    par: usize,
    pods: usize,
    add: Phase,
    del: Phase,
    kdel: Phase,
    /// The kernel's veth creation timed alone (first row of each parallelism only).
    kadd: Phase,
}

impl Row {
    fn pods_per_sec(&self) -> f64 {
        self.pods as f64 / (self.add.wall + self.del.wall).as_secs_f64()
    }
}

/// ADD then DEL of `pods` fresh pods at parallelism `par`; every pod netns made before and deleted
/// after the timed phases. On an ADD failure, DELs what may exist before returning the error.
fn bench_subject(
    env: &mut Env,
    subj: &Subject,
    pods: usize,
    par: usize,
    round: &str,
) -> Res<(Phase, Phase)> {
    let names = env.make_pods(pods)?;
    let r = bench_subject_on(env, subj, &names, par, round);
    env.drop_pods(&names);
    r
}

/// The container ID of pod `i` of `round` for `subj` (also the pod name in the stand-in).
fn container_id(subj: &Subject, tag: &str, round: &str, i: usize) -> String {
    format!("{}-{tag}-{round}-{i}", subj.label.replace(['/', '+'], "-"))
}

/// [`bench_subject`] on pod netns `names`, made by the caller. For a lookup subject, checks that
/// the stand-in saw exactly one GET of each pod during the ADD phase.
fn bench_subject_on(
    env: &Env,
    subj: &Subject,
    names: &[String],
    par: usize,
    round: &str,
) -> Res<(Phase, Phase)> {
    if subj.on_iface {
        env.add_ifaces(names)?;
    }
    // (container ID, netns path, CNI_ARGS)
    let items: Vec<(String, String, String)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| -> Res<_> {
            let cid = container_id(subj, &env.tag, round, i);
            let args = if subj.lookup {
                env.pod_args(&cid)?
            } else {
                String::new()
            };
            Ok((cid, format!("/run/netns/{n}"), args))
        })
        .collect::<Res<_>>()?;
    if subj.lookup {
        env.take_pod_gets();
    }
    let (added, gets, deleted) = if let [step] = subj.steps.as_slice() {
        let cp = subj.cni_path.as_str();
        let add = |(cid, ns, args): &(String, String, String)| {
            let stdin = with_prev(&step.conf, subj.first_prev(ns).as_ref())?;
            invoke(&step.binary, "ADD", cid, ns, cp, args, &stdin)
        };
        let del = |(cid, ns, args): &(String, String, String)| {
            let stdin = with_prev(&step.conf, subj.first_prev(ns).as_ref())?;
            invoke(&step.binary, "DEL", cid, ns, cp, args, &stdin)
        };
        let added = run_parallel(&env.host_ns, &items, par, &add);
        let gets = env.take_pod_gets();
        (added, gets, run_parallel(&env.host_ns, &items, par, &del))
    } else {
        let results: Mutex<HashMap<String, Value>> = Mutex::default();
        let add = |(cid, ns, args): &(String, String, String)| {
            let (took, res) = chain_add(subj, cid, ns, args)?;
            if let Ok(mut m) = results.lock() {
                m.insert(cid.clone(), res);
            }
            Ok(took)
        };
        let added = run_parallel(&env.host_ns, &items, par, &add);
        let gets = env.take_pod_gets();
        let cached = results.into_inner().unwrap_or_default();
        let del = |(cid, ns, args): &(String, String, String)| {
            chain_del(subj, cid, ns, args, cached.get(cid))
        };
        (added, gets, run_parallel(&env.host_ns, &items, par, &del))
    };
    let (added, deleted) = (added?, deleted?);
    if subj.lookup {
        let (total, odd) = gets;
        env.lookup_gets.fetch_add(total, Ordering::Relaxed);
        env.lookup_adds.fetch_add(items.len(), Ordering::Relaxed);
        if total != items.len() || !odd.is_empty() {
            return Err(format!(
                "{} round {round}: the stand-in saw {total} pod GETs for {} ADDs (paths not GET exactly once: {odd:?})",
                subj.label,
                items.len()
            ));
        }
    }
    Ok((added, deleted))
}

/// The kernel's own veth work, timed alone: per pod, one `RTM_NEWLINK` making a veth pair whose
/// peer (`eth0`) is created directly in a fresh pod netns, as tern makes it (timed; both ends
/// then set up, untimed), and later one `RTM_DELLINK` of the host end (timed). Returns the
/// creation and the deletion phases.
fn bench_kernel_veth(env: &mut Env, pods: usize, par: usize) -> Res<(Phase, Phase)> {
    let names = env.make_pods(pods)?;
    let items: Vec<(String, String)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (format!("kdel{i}"), n.clone()))
        .collect();
    let add = |(veth, pod): &(String, String)| -> Res<Duration> {
        // Sockets and the netns are opened untimed: a plugin's ADD opens its own, counted in
        // its ADD time.
        let h = Handle::new().map_err(|e| e.to_string())?;
        let ns = NetNs::open(format!("/run/netns/{pod}")).map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        h.create_veth(veth, "eth0", &ns, Some(1500), None)
            .map_err(|e| e.to_string())?;
        let took = t0.elapsed();
        let in_pod = Handle::in_netns(&ns).map_err(|e| e.to_string())?;
        for (handle, name) in [(&h, veth.as_str()), (&in_pod, "eth0")] {
            let link = handle
                .link_by_name(name)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("{name} vanished"))?;
            handle.set_up(link.index).map_err(|e| e.to_string())?;
        }
        Ok(took)
    };
    let del = |(veth, _): &(String, String)| -> Res<Duration> {
        let h = Handle::new().map_err(|e| e.to_string())?;
        let link = h
            .link_by_name(veth)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{veth} vanished"))?;
        let t0 = Instant::now();
        h.delete_link(link.index).map_err(|e| e.to_string())?;
        Ok(t0.elapsed())
    };
    let r = run_parallel(&env.host_ns, &items, par, &add)
        .and_then(|a| Ok((a, run_parallel(&env.host_ns, &items, par, &del)?)));
    env.drop_pods(&names);
    r
}

/// Peak RSS samples (KiB) of one binary: ADD, DEL.
type AddDelKib = [Vec<u64>; 2];

/// What [`bench_rss`] measured: per chain step; host-local exec'd directly; and for a lookup
/// subject, `tern-lookup` exec'd directly with the pod call tern makes (another pod of the
/// stand-in, so each pod is still read exactly once).
type RssSamples = (Vec<AddDelKib>, Option<AddDelKib>, Option<Vec<u64>>);

/// Peak RSS (KiB) of `samples` chain ADDs and DELs: per step, its ADD samples and its DEL
/// samples; then, when the subject asks for it, host-local invoked directly with the first step's
/// netconf (ADD, DEL). Untimed, sequential, in the host netns.
fn bench_rss(env: &mut Env, subj: &Subject, samples: usize, host_local: &Path) -> Res<RssSamples> {
    let names = env.make_pods(samples)?;
    let r = rss_on(env, subj, &names, host_local);
    env.drop_pods(&names);
    r
}

/// [`bench_rss`] on pod netns `names`, made by the caller.
fn rss_on(env: &Env, subj: &Subject, names: &[String], host_local: &Path) -> Res<RssSamples> {
    if subj.on_iface {
        env.add_ifaces(names)?;
    }
    let cp = subj.cni_path.as_str();
    let r = env.host_ns.run_in(|| -> Res<_> {
        let mut steps: Vec<AddDelKib> = subj.steps.iter().map(|_| Default::default()).collect();
        let mut hl: AddDelKib = Default::default();
        let mut helper: Vec<u64> = Vec::new();
        for (i, n) in names.iter().enumerate() {
            let ns = format!("/run/netns/{n}");
            let cid = container_id(subj, &env.tag, "rss", i);
            let args = if subj.lookup {
                env.pod_args(&cid)?
            } else {
                String::new()
            };
            let mut prev: Option<Value> = subj.first_prev(&ns);
            for (k, step) in subj.steps.iter().enumerate() {
                let stdin = with_prev(&step.conf, prev.as_ref())?;
                let (kib, out) =
                    invoke_peak_rss(&step.binary, "ADD", &cid, &ns, cp, &args, &stdin)?;
                steps[k][0].push(kib);
                prev = Some(serde_json::from_str(&out).map_err(|e| format!("ADD result: {e}"))?);
            }
            let cached = if subj.steps.len() > 1 {
                prev
            } else {
                subj.first_prev(&ns)
            };
            for (k, step) in subj.steps.iter().enumerate().rev() {
                let stdin = with_prev(&step.conf, cached.as_ref())?;
                let (kib, _) = invoke_peak_rss(&step.binary, "DEL", &cid, &ns, cp, &args, &stdin)?;
                steps[k][1].push(kib);
            }
            if subj.lookup {
                let (kib, _) = lookup_helper_peak_rss(env, &subj.steps[0], &cid, cp)?;
                helper.push(kib);
            }
            if subj.rss_host_local {
                let stdin = with_prev(&subj.steps[0].conf, None)?;
                let hcid = format!("hl-{cid}");
                for (j, verb) in ["ADD", "DEL"].into_iter().enumerate() {
                    let (kib, _) = invoke_peak_rss(host_local, verb, &hcid, &ns, cp, "", &stdin)?;
                    hl[j].push(kib);
                }
            }
        }
        Ok((
            steps,
            subj.rss_host_local.then_some(hl),
            subj.lookup.then_some(helper),
        ))
    });
    r.map_err(|e| e.to_string())?
}

/// Peak RSS of `tern-lookup` (beside `step`'s binary) exec'd directly with the pod call tern
/// makes for `step`'s netconf, for a fresh pod named after `cid`.
fn lookup_helper_peak_rss(env: &Env, step: &Step, cid: &str, cni_path: &str) -> Res<(u64, String)> {
    let name = format!("lk-{cid}");
    let args = env.pod_args(&name)?;
    let uid = args
        .split(';')
        .find_map(|kv| kv.strip_prefix("K8S_POD_UID="))
        .ok_or("pod args without a UID")?;
    let path = |v: &Value| v.as_str().map(PathBuf::from).ok_or("netconf path missing");
    let call = Call::Pod(PodCall {
        kubeconfig: path(&step.conf["kubernetes"]["kubeconfig"])?,
        agent_socket: path(&step.conf["agentSocket"])?,
        namespace: "default".into(),
        name,
        uid: Some(uid.to_owned()),
        deadline_ms: 5000,
    });
    let helper = step.binary.with_file_name(HELPER);
    let stdin = serde_json::to_vec(&call).map_err(|e| e.to_string())?;
    let (kib, out) = invoke_peak_rss(&helper, "ADD", cid, "", cni_path, "", &stdin)?;
    serde_json::from_str::<PodReply>(&out).map_err(|e| format!("{HELPER} answered {out}: {e}"))?;
    Ok((kib, out))
}

/// Median (upper) of KiB samples, 0 when empty.
fn median(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.get(s.len() / 2).copied().unwrap_or(0)
}

fn kib_stats(v: &[u64]) -> String {
    let mut s = v.to_vec();
    s.sort_unstable();
    let med = s.get(s.len() / 2).copied().unwrap_or(0);
    let max = s.last().copied().unwrap_or(0);
    format!(
        "median {:>6.2} MiB  max {:>6.2} MiB",
        med as f64 / 1024.0,
        max as f64 / 1024.0
    )
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "MET"
    } else {
        "NOT MET"
    }
}

fn run(o: &Opts) -> Res<()> {
    for b in [&o.tern, &o.ptp] {
        if !b.is_file() {
            return Err(format!("{} is missing (cargo build --release -p tern; apt-get install containernetworking-plugins)", b.display()));
        }
    }
    let host_local = o.ref_dir.join("host-local");
    let mut env = Env::new()?;
    let cni_path = o.ref_dir.display().to_string();
    let kubeconfig = env.start_api()?;
    let subs = subjects(o, &env.work, &env.run_work, Some(&kubeconfig));
    println!(
        "tern-bench: {} pods per subject per parallelism in {} rotating rounds, parallelism {:?}, cniVersion 1.0.0, IPAM host-local ({}), host netns {}",
        o.pods,
        o.rounds,
        o.parallel,
        host_local.display(),
        env.host
    );
    println!(
        "  tern: {}\n  ptp:  {} (ipMasq false)",
        o.tern.display(),
        o.ptp.display()
    );

    // Warm-up (page cache, first-exec costs): a few pods through each, untimed.
    for s in &subs {
        bench_subject(&mut env, s, 4, 1, "warm")?;
    }
    // Each parallelism runs in rounds, the subjects' order rotating every round, so that load
    // from elsewhere on the machine (drift) falls on all of them alike.
    let rounds = o.rounds.min(o.pods).max(1);
    let mut rows: Vec<Row> = Vec::new();
    for &par in &o.parallel {
        let mut kdel = Phase::default();
        let mut kadd = Phase::default();
        let mut acc: Vec<(Phase, Phase)> = subs.iter().map(|_| Default::default()).collect();
        for r in 0..rounds {
            let n = o.pods / rounds + usize::from(r < o.pods % rounds);
            let (ka, kd) = bench_kernel_veth(&mut env, n, par)?;
            kadd.lat.extend(ka.lat);
            kdel.lat.extend(kd.lat);
            kdel.wall += kd.wall;
            for j in 0..subs.len() {
                let i = (j + r) % subs.len();
                let (add, del) = bench_subject(&mut env, &subs[i], n, par, &format!("p{par}r{r}"))?;
                acc[i].0.lat.extend(add.lat);
                acc[i].0.wall += add.wall;
                acc[i].1.lat.extend(del.lat);
                acc[i].1.wall += del.wall;
            }
        }
        let mut kdel = Some(kdel);
        let mut kadd = Some(kadd);
        for (s, (add, del)) in subs.iter().zip(acc) {
            rows.push(Row {
                label: s.label,
                par,
                pods: o.pods,
                add,
                del,
                kdel: kdel.take().unwrap_or_default(),
                kadd: kadd.take().unwrap_or_default(),
            });
        }
    }

    println!();
    println!(
        "{:<11} {:>3} {:>5} | {:>8} {:>8} | {:>8} {:>8} | {:>15} {:>15} | {:>7}",
        "plugin",
        "par",
        "pods",
        "ADD p50",
        "ADD p99",
        "DEL p50",
        "DEL p99",
        "kernel vethdel",
        "p50 / p99",
        "pods/s"
    );
    for r in &rows {
        let k = if r.kdel.lat.is_empty() {
            String::from("(same as above)")
        } else {
            format!(
                "{:>6.3} / {:>6.3}",
                pct(&r.kdel.lat, 0.5),
                pct(&r.kdel.lat, 0.99)
            )
        };
        println!(
            "{:<11} {:>3} {:>5} | {:>8.3} {:>8.3} | {:>8.3} {:>8.3} | {:>31} | {:>7.1}",
            r.label,
            r.par,
            r.pods,
            pct(&r.add.lat, 0.5),
            pct(&r.add.lat, 0.99),
            pct(&r.del.lat, 0.5),
            pct(&r.del.lat, 0.99),
            k,
            r.pods_per_sec()
        );
    }
    println!("(latencies in ms: spawn to reaped exit; pods/s = pods / (ADD phase wall + DEL phase wall));");
    println!(" hl = host-local exec'd directly with the same kind of netconf: the IPAM floor under both plugins;");
    println!(" tern/ti = tern with tern-ipam (run in-process by tern); tern+lookup = tern as in the tern row plus");
    println!("   the pod lookup (kubeconfig, CNI_ARGS K8S_POD_NAMESPACE/NAME/UID) against the API server stand-in");
    println!("   in the host netns (HTTPS on loopback, one GET per ADD); tern-tuning, tuning = each tuning plugin");
    println!("   alone with a prevResult on a pod netns whose eth0 was made untimed (pods/s meaningless there);");
    println!(" chains, run as libcni runs a conflist:");
    println!("   ref-chain = ptp + host-local + tuning; tt-chain/hl = tern + tern-tuning with host-local;");
    println!("   tt-chain/ti = tern + tern-tuning with tern-ipam; both tuning plugins set the same 3 sysctls;");
    println!(
        " kernel vethdel = one RTM_DELLINK of a veth whose peer is in a pod netns, timed alone)"
    );

    println!("\nratios tern/ptp, and the targets:");
    for &par in &o.parallel {
        let find = |l: &str| rows.iter().find(|r| r.par == par && r.label == l);
        if let (Some(t), Some(p)) = (find("tern"), find("ptp")) {
            let add = pct(&t.add.lat, 0.5) / pct(&p.add.lat, 0.5);
            let del = pct(&t.del.lat, 0.5) / pct(&p.del.lat, 0.5);
            println!(
                "  par {par}: ADD p50 {add:.2}x (target <= 0.50x: {}), ADD p99 {:.2}x, DEL p50 {del:.2}x (target <= 1.00x: {}), DEL p99 {:.2}x, pods/s {:.2}x",
                verdict(add <= 0.5),
                pct(&t.add.lat, 0.99) / pct(&p.add.lat, 0.99),
                verdict(del <= 1.0),
                pct(&t.del.lat, 0.99) / pct(&p.del.lat, 0.99),
                t.pods_per_sec() / p.pods_per_sec()
            );
        }
    }

    if let Some(b) = &o.tern_b {
        println!("A/B: tern-b ({}) against tern, same rounds:", b.display());
        for &par in &o.parallel {
            let find = |l: &str| rows.iter().find(|r| r.par == par && r.label == l);
            if let (Some(a), Some(b)) = (find("tern"), find("tern-b")) {
                println!(
                    "  par {par}: ADD p50 {:.3} vs {:.3} ms ({:+.3}), ADD p99 {:+.3} ms, DEL p50 {:+.3} ms",
                    pct(&b.add.lat, 0.5),
                    pct(&a.add.lat, 0.5),
                    pct(&b.add.lat, 0.5) - pct(&a.add.lat, 0.5),
                    pct(&b.add.lat, 0.99) - pct(&a.add.lat, 0.99),
                    pct(&b.del.lat, 0.5) - pct(&a.del.lat, 0.5),
                );
            }
        }
    }

    println!("chains against the reference chain (ptp + host-local + tuning):");
    for &par in &o.parallel {
        let find = |l: &str| rows.iter().find(|r| r.par == par && r.label == l);
        let Some(reference) = find("ref-chain") else {
            continue;
        };
        for label in ["tt-chain/hl", "tt-chain/ti"] {
            if let Some(t) = find(label) {
                let add = pct(&t.add.lat, 0.5) / pct(&reference.add.lat, 0.5);
                let target = if label == "tt-chain/ti" {
                    format!(" (target <= 0.40x: {})", verdict(add <= 0.4))
                } else {
                    String::new()
                };
                println!(
                    "  par {par} {label}: ADD p50 {add:.2}x{target}, ADD p99 {:.2}x, DEL p50 {:.2}x, DEL p99 {:.2}x, pods/s {:.2}x",
                    pct(&t.add.lat, 0.99) / pct(&reference.add.lat, 0.99),
                    pct(&t.del.lat, 0.5) / pct(&reference.del.lat, 0.5),
                    pct(&t.del.lat, 0.99) / pct(&reference.del.lat, 0.99),
                    t.pods_per_sec() / reference.pods_per_sec()
                );
            }
        }
    }

    println!("kube lookup cost on ADD p50 = tern+lookup - tern (goal: at most 3 ms):");
    for &par in &o.parallel {
        let find = |l: &str| rows.iter().find(|r| r.par == par && r.label == l);
        if let (Some(t), Some(l)) = (find("tern"), find("tern+lookup")) {
            let d50 = pct(&l.add.lat, 0.5) - pct(&t.add.lat, 0.5);
            println!(
                "  par {par}: {d50:.3} ms ({}); ADD p99 tern+lookup - tern = {:.3} ms",
                verdict(d50 <= 3.0),
                pct(&l.add.lat, 0.99) - pct(&t.add.lat, 0.99)
            );
        }
    }
    println!(
        "  stand-in: {} pod GETs for {} tern+lookup ADDs, warm-up included (exactly one GET of each pod per ADD, checked per phase; the RSS pass is checked apart)",
        env.lookup_gets.load(Ordering::Relaxed),
        env.lookup_adds.load(Ordering::Relaxed)
    );

    println!(
        "tern-tuning alone / tuning alone (same 3 sysctls, with prevResult, eth0 already there):"
    );
    for &par in &o.parallel {
        let find = |l: &str| rows.iter().find(|r| r.par == par && r.label == l);
        if let (Some(t), Some(r)) = (find("tern-tuning"), find("tuning")) {
            println!(
                "  par {par}: ADD p50 {:.2}x, ADD p99 {:.2}x, DEL p50 {:.2}x, DEL p99 {:.2}x",
                pct(&t.add.lat, 0.5) / pct(&r.add.lat, 0.5),
                pct(&t.add.lat, 0.99) / pct(&r.add.lat, 0.99),
                pct(&t.del.lat, 0.5) / pct(&r.del.lat, 0.5),
                pct(&t.del.lat, 0.99) / pct(&r.del.lat, 0.99),
            );
        }
    }

    // Start-up floor: VERSION does no work, so its latency is exec + runtime start + exit.
    println!(
        "\nstart-up floor (VERSION, {} runs each, par 1): p50 / p99 ms",
        o.pods
    );
    let version = br#"{"cniVersion":"1.0.0"}"#;
    let mut tern_startup = None;
    for (label, bin) in [
        ("tern", o.tern.clone()),
        ("ptp", o.ptp.clone()),
        ("host-local", host_local.clone()),
    ] {
        let items: Vec<usize> = (0..o.pods).collect();
        let work = |_: &usize| invoke(&bin, "VERSION", "v", "", &cni_path, "", version);
        let ph = run_parallel(&env.host_ns, &items, 1, &work)?;
        println!(
            "  {label:<10} {:>7.3} / {:>7.3}",
            pct(&ph.lat, 0.5),
            pct(&ph.lat, 0.99)
        );
        if label == "tern" {
            tern_startup = Some(pct(&ph.lat, 0.5));
        }
    }
    // What no tern ADD with an exec'd host-local can beat at parallelism 1: host-local's own
    // ADD (hl row), tern's own process start-up, and the kernel making the veth pair; tern's
    // other kernel work (addresses, routes, sysctls, the pod netns) comes on top.
    let find = |l: &str| rows.iter().find(|r| r.par == 1 && r.label == l);
    let kadd = rows
        .iter()
        .find(|r| r.par == 1 && !r.kadd.lat.is_empty())
        .map(|r| pct(&r.kadd.lat, 0.5));
    if let (Some(hl), Some(p), Some(start), Some(kadd)) =
        (find("hl"), find("ptp"), tern_startup, kadd)
    {
        let hl_add = pct(&hl.add.lat, 0.5);
        let floor = hl_add + start + kadd;
        println!(
            "  tern ADD floor with host-local at par 1 = hl ADD p50 {hl_add:.3} + tern start-up p50 {start:.3} + kernel veth creation p50 {kadd:.3} = {floor:.3} ms = {:.2}x ptp ADD p50 (tern's other kernel work comes on top)",
            floor / pct(&p.add.lat, 0.5)
        );
    } else {
        println!("  (the tern ADD floor is printed for parallelism 1 only: add 1 to --parallel)");
    }

    println!(
        "\npeak RSS per invocation ({} samples each; the process itself, VmHWM at exit):",
        o.rss_samples
    );
    let mut tern_max = 0;
    let mut tuning_alone: HashMap<&str, [u64; 2]> = HashMap::new();
    for s in subs.iter().filter(|s| s.label != "hl") {
        let (steps, hl, helper) = bench_rss(&mut env, s, o.rss_samples, &host_local)?;
        if s.lookup {
            // One GET per tern ADD, one per direct tern-lookup run, each of its own pod.
            let (gets, odd) = env.take_pod_gets();
            if gets != 2 * o.rss_samples || !odd.is_empty() {
                return Err(format!(
                    "RSS pass: the stand-in saw {gets} pod GETs for {} tern+lookup ADDs and as many tern-lookup runs ({odd:?})",
                    o.rss_samples
                ));
            }
        }
        if let (true, [[add, del]]) = (s.on_iface, steps.as_slice()) {
            tuning_alone.insert(s.label, [median(add), median(del)]);
        }
        for (step, [add, del]) in s.steps.iter().zip(&steps) {
            // The 3 MiB target is tern's own, with or without the lookup (whose TLS client runs in
            // tern-lookup, shown below it).
            if step.binary == o.tern {
                tern_max = add
                    .iter()
                    .chain(del)
                    .copied()
                    .max()
                    .unwrap_or(tern_max)
                    .max(tern_max);
            }
            let bin = step
                .binary
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            println!(
                "  {:<11} {:<11} ADD: {}   DEL: {}",
                s.label,
                bin,
                kib_stats(add),
                kib_stats(del)
            );
        }
        if let Some(h) = helper {
            println!(
                "  tern-lookup (the helper tern execs for the lookup), exec'd directly: {}",
                kib_stats(&h)
            );
        }
        if let Some([add, del]) = hl {
            println!(
                "  host-local under {:<5} netconf, exec'd directly: ADD: {}   DEL: {}",
                s.label,
                kib_stats(&add),
                kib_stats(&del)
            );
        }
    }
    println!(
        "  target: tern peak RSS < 3 MiB: {} (max {:.2} MiB)",
        verdict(tern_max < 3 * 1024),
        tern_max as f64 / 1024.0
    );
    if let (Some(t), Some(r)) = (tuning_alone.get("tern-tuning"), tuning_alone.get("tuning")) {
        println!(
            "  tern-tuning / tuning alone, median peak RSS: ADD {:.2}x ({:.2} / {:.2} MiB), DEL {:.2}x ({:.2} / {:.2} MiB)",
            t[0] as f64 / r[0] as f64,
            t[0] as f64 / 1024.0,
            r[0] as f64 / 1024.0,
            t[1] as f64 / r[1] as f64,
            t[1] as f64 / 1024.0,
            r[1] as f64 / 1024.0
        );
    }
    Ok(())
}

fn main() {
    let code = match parse_opts().and_then(|o| run(&o)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tern-bench: {e}");
            1
        }
    };
    std::process::exit(code);
}

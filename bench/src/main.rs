//! `tern-bench`: one run of tern beside the reference chain (ptp), both delegating to the same
//! IPAM (Debian's host-local), invoked exactly as a runtime does: exec of the plugin binary with
//! the `CNI_*` environment and the netconf on stdin, from inside a throwaway host netns.
//!
//! Measures, per plugin and per parallelism (1 and 8 by default):
//! - ADD and DEL latency (p50, p99, in ms): wall time from spawn to reaped exit, stdout read;
//! - pods per second: pods / (wall time of the ADD phase + wall time of the DEL phase);
//! - the kernel's own veth-deletion time (one `RTM_DELLINK` over netlink, timed alone) at the same
//!   parallelism, beside DEL;
//! - peak RSS per invocation, untimed pass: the plugin process alone (`VmHWM` read at its
//!   `PTRACE_EVENT_EXIT` stop, before its address space is torn down, so a child's memory is not
//!   counted) and, separately, host-local invoked directly with the same netconf.
//!
//! Invariants: every pod netns is created before, and deleted after, its timed region; each phase
//! starts from an empty host (no pods) and ends with every pod deleted; nothing is written outside
//! the throwaway host netns, the pod netns and a private work dir (host-local `dataDir`, tern
//! `stateDir`), all removed at exit, also on failure. Only `tern_net::netns::NetNs::run_in` enters
//! a namespace: each worker is one such scoped thread, whose children inherit its netns.
//!
//! Usage (root): `tern-bench [--pods N] [--rounds R] [--parallel 1,8] [--rss-samples N] [--tern PATH]
//! [--ptp PATH] [--ref-dir DIR] [--state-dir DIR]`; `TERN_BENCH_RSS_DETAIL=1` also prints, per
//! sampled process, its anonymous and file-backed resident memory at exit. tern's `stateDir` defaults to the work dir
//! (under the temp dir, on the same filesystem as `/var/lib/cni` on these machines). `scripts/bench` builds and runs it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use nix::sys::ptrace;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use serde_json::{json, Value};
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
}

fn parse_opts() -> Res<Opts> {
    let root = std::env::current_dir().map_err(|e| format!("cwd: {e}"))?;
    let mut o = Opts {
        pods: 200,
        rounds: 4,
        parallel: vec![1, 8],
        rss_samples: 20,
        tern: root.join("target/release/tern"),
        ptp: PathBuf::from("/usr/lib/cni/ptp"),
        ref_dir: PathBuf::from("/usr/lib/cni"),
        state_dir: None,
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
    pods: Vec<String>,
}

impl Env {
    fn new() -> Res<Env> {
        let tag = format!("tern-bench-{}", std::process::id());
        let host = format!("{tag}-host");
        let work = std::env::temp_dir().join(&tag);
        std::fs::create_dir_all(&work).map_err(|e| format!("mkdir {}: {e}", work.display()))?;
        ip(&["netns", "add", &host])?;
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
                return Err(e);
            }
        };
        Ok(Env {
            tag,
            host,
            host_ns,
            work,
            pods: Vec::new(),
        })
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
        for p in std::mem::take(&mut self.pods) {
            let _ = ip(&["netns", "del", &p]);
        }
        let _ = ip(&["netns", "del", &self.host]);
        let _ = std::fs::remove_dir_all(&self.work);
    }
}

/// One plugin under test.
#[derive(Clone, Debug)]
struct Subject {
    label: &'static str,
    binary: PathBuf,
    conf: Value,
}

fn subjects(o: &Opts, work: &Path) -> Vec<Subject> {
    let ipam = |subnet: &str, dir: &str| json!({"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": work.join(dir)});
    vec![
        Subject {
            label: "tern",
            binary: o.tern.clone(),
            conf: json!({"cniVersion": "1.0.0", "name": "bench-tern", "type": "tern", "mtu": 1500,
                "stateDir": o.state_dir.clone().unwrap_or_else(|| work.join("tern-state")), "ipam": ipam("10.100.0.0/16", "ipam-tern")}),
        },
        Subject {
            label: "ptp",
            binary: o.ptp.clone(),
            // ipMasq off: tern does no masquerading, so neither does the reference here.
            conf: json!({"cniVersion": "1.0.0", "name": "bench-ptp", "type": "ptp", "mtu": 1500,
                "ipMasq": false, "ipam": ipam("10.101.0.0/16", "ipam-ptp")}),
        },
        Subject {
            // IPAM alone, exec'd directly with tern's netconf: the floor under both plugins.
            label: "hl",
            binary: o.ref_dir.join("host-local"),
            conf: json!({"cniVersion": "1.0.0", "name": "bench-hl", "type": "tern",
                "ipam": ipam("10.102.0.0/16", "ipam-hl")}),
        },
    ]
}

/// The command a runtime would run: a clean environment with the `CNI_*` variables.
fn plugin_cmd(bin: &Path, verb: &str, cid: &str, netns: &str, cni_path: &str) -> Command {
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
    stdin: &[u8],
) -> Res<Duration> {
    let t0 = Instant::now();
    let mut child = plugin_cmd(bin, verb, cid, netns, cni_path)
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
    feed(&mut child, stdin)?;
    let out = drain(&mut child);
    let status = child.wait().map_err(|e| format!("wait: {e}"))?;
    let took = t0.elapsed();
    if status.success() {
        Ok(took)
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
    stdin: &[u8],
) -> Res<u64> {
    let mut child = plugin_cmd(bin, verb, cid, netns, cni_path)
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
    hwm.ok_or_else(|| format!("no VmHWM for {} {verb}", bin.display()))
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
    cni_path: &str,
    pods: usize,
    par: usize,
    round: &str,
) -> Res<(Phase, Phase)> {
    let names = env.make_pods(pods)?;
    let stdin = serde_json::to_vec(&subj.conf).map_err(|e| e.to_string())?;
    let items: Vec<(String, String)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            (
                format!("{}-{}-{round}-{i}", subj.label, env.tag),
                format!("/run/netns/{n}"),
            )
        })
        .collect();
    let add = |(cid, ns): &(String, String)| invoke(&subj.binary, "ADD", cid, ns, cni_path, &stdin);
    let del = |(cid, ns): &(String, String)| invoke(&subj.binary, "DEL", cid, ns, cni_path, &stdin);
    let added = run_parallel(&env.host_ns, &items, par, &add);
    let deleted = run_parallel(&env.host_ns, &items, par, &del);
    env.drop_pods(&names);
    Ok((added?, deleted?))
}

/// The kernel's own veth deletion: per pod, a veth pair (host end here, `eth0` in a fresh pod
/// netns, both up) made untimed, then one `RTM_DELLINK` of the host end over netlink, timed.
fn bench_kernel_del(env: &mut Env, pods: usize, par: usize) -> Res<Phase> {
    let names = env.make_pods(pods)?;
    let mut items = Vec::with_capacity(pods);
    for (i, n) in names.iter().enumerate() {
        let veth = format!("kdel{i}");
        ip(&[
            "-n", &env.host, "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns",
            n,
        ])?;
        ip(&["-n", &env.host, "link", "set", &veth, "up"])?;
        ip(&["-n", n, "link", "set", "eth0", "up"])?;
        items.push(veth);
    }
    let del = |veth: &String| -> Res<Duration> {
        // The socket is opened untimed: a plugin's DEL opens its own, counted in its DEL time.
        let h = Handle::new().map_err(|e| e.to_string())?;
        let link = h
            .link_by_name(veth)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{veth} vanished"))?;
        let t0 = Instant::now();
        h.delete_link(link.index).map_err(|e| e.to_string())?;
        Ok(t0.elapsed())
    };
    let r = run_parallel(&env.host_ns, &items, par, &del);
    env.drop_pods(&names);
    r
}

/// Peak RSS (KiB) of `samples` ADD and DEL invocations of the plugin, and of host-local invoked
/// directly with the same netconf; untimed, sequential, in the host netns.
fn bench_rss(
    env: &mut Env,
    subj: &Subject,
    cni_path: &str,
    samples: usize,
    host_local: &Path,
) -> Res<[Vec<u64>; 4]> {
    let names = env.make_pods(samples)?;
    let stdin = serde_json::to_vec(&subj.conf).map_err(|e| e.to_string())?;
    let r = env.host_ns.run_in(|| -> Res<[Vec<u64>; 4]> {
        let mut out: [Vec<u64>; 4] = Default::default();
        for (i, n) in names.iter().enumerate() {
            let ns = format!("/run/netns/{n}");
            let cid = format!("{}-{}-rss-{i}", subj.label, env.tag);
            out[0].push(invoke_peak_rss(
                &subj.binary,
                "ADD",
                &cid,
                &ns,
                cni_path,
                &stdin,
            )?);
            out[1].push(invoke_peak_rss(
                &subj.binary,
                "DEL",
                &cid,
                &ns,
                cni_path,
                &stdin,
            )?);
            let hcid = format!("hl-{cid}");
            out[2].push(invoke_peak_rss(
                host_local, "ADD", &hcid, &ns, cni_path, &stdin,
            )?);
            out[3].push(invoke_peak_rss(
                host_local, "DEL", &hcid, &ns, cni_path, &stdin,
            )?);
        }
        Ok(out)
    });
    env.drop_pods(&names);
    r.map_err(|e| e.to_string())?
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
    let subs = subjects(o, &env.work);
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
        bench_subject(&mut env, s, &cni_path, 4, 1, "warm")?;
    }
    // Each parallelism runs in rounds, the subjects' order rotating every round, so that load
    // from elsewhere on the machine (drift) falls on all of them alike.
    let rounds = o.rounds.min(o.pods).max(1);
    let mut rows: Vec<Row> = Vec::new();
    for &par in &o.parallel {
        let mut kdel = Phase::default();
        let mut acc: Vec<(Phase, Phase)> = subs.iter().map(|_| Default::default()).collect();
        for r in 0..rounds {
            let n = o.pods / rounds + usize::from(r < o.pods % rounds);
            let k = bench_kernel_del(&mut env, n, par)?;
            kdel.lat.extend(k.lat);
            kdel.wall += k.wall;
            for j in 0..subs.len() {
                let i = (j + r) % subs.len();
                let (add, del) = bench_subject(
                    &mut env,
                    &subs[i],
                    &cni_path,
                    n,
                    par,
                    &format!("p{par}r{r}"),
                )?;
                acc[i].0.lat.extend(add.lat);
                acc[i].0.wall += add.wall;
                acc[i].1.lat.extend(del.lat);
                acc[i].1.wall += del.wall;
            }
        }
        let mut kdel = Some(kdel);
        for (s, (add, del)) in subs.iter().zip(acc) {
            rows.push(Row {
                label: s.label,
                par,
                pods: o.pods,
                add,
                del,
                kdel: kdel.take().unwrap_or_default(),
            });
        }
    }

    println!();
    println!(
        "{:<6} {:>3} {:>5} | {:>8} {:>8} | {:>8} {:>8} | {:>15} {:>15} | {:>7}",
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
            "{:<6} {:>3} {:>5} | {:>8.3} {:>8.3} | {:>8.3} {:>8.3} | {:>31} | {:>7.1}",
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

    // Start-up floor: VERSION does no work, so its latency is exec + runtime start + exit.
    println!(
        "\nstart-up floor (VERSION, {} runs each, par 1): p50 / p99 ms",
        o.pods
    );
    let version = br#"{"cniVersion":"1.0.0"}"#;
    for (label, bin) in [
        ("tern", o.tern.clone()),
        ("ptp", o.ptp.clone()),
        ("host-local", host_local.clone()),
    ] {
        let items: Vec<usize> = (0..o.pods).collect();
        let work = |_: &usize| invoke(&bin, "VERSION", "v", "", &cni_path, version);
        let ph = run_parallel(&env.host_ns, &items, 1, &work)?;
        println!(
            "  {label:<10} {:>7.3} / {:>7.3}",
            pct(&ph.lat, 0.5),
            pct(&ph.lat, 0.99)
        );
    }

    println!(
        "\npeak RSS per invocation ({} samples each; the process itself, VmHWM at exit):",
        o.rss_samples
    );
    let mut tern_max = 0;
    for s in subs.iter().filter(|s| s.label != "hl") {
        let [add, del, hl_add, hl_del] =
            bench_rss(&mut env, s, &cni_path, o.rss_samples, &host_local)?;
        if s.label == "tern" {
            tern_max = add.iter().chain(&del).copied().max().unwrap_or(0);
        }
        println!(
            "  {:<5} ADD: {}   DEL: {}",
            s.label,
            kib_stats(&add),
            kib_stats(&del)
        );
        println!(
            "  host-local under {:<5} netconf, exec'd directly: ADD: {}   DEL: {}",
            s.label,
            kib_stats(&hl_add),
            kib_stats(&hl_del)
        );
    }
    println!(
        "  target: tern peak RSS < 3 MiB: {} (max {:.2} MiB)",
        verdict(tern_max < 3 * 1024),
        tern_max as f64 / 1024.0
    );
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

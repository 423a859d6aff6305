//! `tern-bench libcni`: the chains timed the way containerd and CRI-O call them, through libcni
//! in one long-lived process (tests/cnitool's `bench`: AddNetworkList, then DelNetworkList, per
//! pod), beside the direct figures of `tern-bench` (which execs the same plugins itself).
//! Through libcni tern's chain once came out at 0.40-0.49x the reference chains where the
//! direct bench said 0.25-0.28x; this shows where the difference goes.
//!
//! Chains, all cniVersion 1.0.0, the same three keepalive sysctls, rotating order every round:
//!   noop         tern-noop twice (a static plugin that does no work): libcni's floor for two execs
//!   tern         tern (tern-ipam in-process) + tern-tuning, libcni's result cache on disk
//!   tern-tmpfs   the same chain with the result cache on a tmpfs: the cache write's share
//!   ref-deb      ptp + host-local + tuning, Debian's 1.1.1 (`--ref-dir`, /usr/lib/cni)
//!   ref-v1.10    the same of v1.10.0 (`--ref-new`, scripts/build-go plugins), when built
//! Per chain and parallelism: ADD and DEL p50 / p99 (ms, [`crate::stats::pct`]), the ratios
//! tern / reference, and the noop and cache rows as differences. Not a test: exits 0 whatever
//! the figures.
//!
//! Everything runs in a throwaway host netns with one fresh pod netns per pod, made and deleted
//! outside the timed region; the work dir (under /var/tmp, with two tmpfs mounts: the tmpfs
//! cache, and the plugins' state as on a node's /run) is removed at exit. Usage (root):
//! `tern-bench libcni [--pods 200] [--rounds 4] [--parallel 1,8] [--ref-dir DIR] [--ref-new DIR]`.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use tern_testkit::churn::KEEPALIVE;
use tern_testkit::exec::{cnitool_path, conflist};
use tern_testkit::netns::TestNetns;

use crate::env::{mount_tmpfs, remove_run_work};
use crate::stats::pct;
use crate::Res;

const USAGE: &str = "usage: tern-bench libcni [--pods N (200)] [--rounds R (4)] [--parallel 1,8] [--ref-dir DIR] [--ref-new DIR]";

struct Opts {
    pods: usize,
    rounds: usize,
    parallel: Vec<usize>,
    ref_deb: PathBuf,
    ref_new: PathBuf,
}

fn parse(args: &[String]) -> Res<Opts> {
    let mut o = Opts {
        pods: 200,
        rounds: 4,
        parallel: vec![1, 8],
        ref_deb: PathBuf::from("/usr/lib/cni"),
        ref_new: PathBuf::from("/var/cache/tern-build/bin/plugins"),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        let num = |v: &str| v.parse::<usize>().map_err(|e| format!("{a} {v}: {e}"));
        match a.as_str() {
            "--pods" => o.pods = num(val()?)?,
            "--rounds" => o.rounds = num(val()?)?,
            "--parallel" => o.parallel = val()?.split(',').map(num).collect::<Res<_>>()?,
            "--ref-dir" => o.ref_deb = PathBuf::from(val()?),
            "--ref-new" => o.ref_new = PathBuf::from(val()?),
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    if o.pods == 0 || o.rounds == 0 || o.parallel.contains(&0) {
        return Err(format!(
            "--pods, --rounds and --parallel must be positive\n{USAGE}"
        ));
    }
    Ok(o)
}

/// The run's world: work dir with its two tmpfs mounts, host netns, conflists, plugin links.
struct World {
    work: tempfile::TempDir,
    host: TestNetns,
    chains: Vec<&'static str>,
    cnitool: PathBuf,
}

impl Drop for World {
    fn drop(&mut self) {
        for m in ["tmpfs", "run"] {
            remove_run_work(&self.work.path().join(m), true);
        }
    }
}

/// The chain `name` of PLUGINS, written to `net.d/NAME.conflist`.
fn write_conflist(dir: &Path, name: &str, plugins: Vec<Value>) -> Res<()> {
    let path = dir.join(format!("net.d/{name}.conflist"));
    let text = serde_json::to_vec(&conflist(name, "1.0.0", plugins)).map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

impl World {
    fn new(o: &Opts) -> Res<World> {
        let work = tempfile::Builder::new()
            .prefix("tern-libcni-bench.")
            .tempdir_in("/var/tmp")
            .map_err(|e| format!("work dir: {e}"))?;
        let d = work.path().to_path_buf();
        for sub in ["net.d", "bin", "tmpfs", "cache", "run"] {
            std::fs::create_dir(d.join(sub)).map_err(|e| format!("mkdir {sub}: {e}"))?;
        }
        let mut world = World {
            work,
            host: TestNetns::new("tlb-host"),
            chains: vec!["noop", "tern", "tern-tmpfs", "ref-deb"],
            cnitool: cnitool_path(),
        };
        // The libcni cache of tern-tmpfs; tern's stateDir and tuning's dataDir, as on a node (/run).
        mount_tmpfs(&d.join("tmpfs"))?;
        mount_tmpfs(&d.join("run"))?;
        let link = |from: &Path, to: &str| {
            symlink(from, d.join("bin").join(to)).map_err(|e| format!("link {to}: {e}"))
        };
        for p in ["tern", "tern-tuning", "tern-ipam", "tern-noop"] {
            link(&crate::opts::beside_self(p), p)?;
        }
        for p in ["ptp", "host-local", "tuning"] {
            link(&o.ref_deb.join(p), &format!("{p}-deb"))?;
            if o.ref_new.join(p).is_file() {
                link(&o.ref_new.join(p), &format!("{p}-v1.10"))?;
            }
        }
        let sysctl: serde_json::Map<String, Value> = KEEPALIVE
            .iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect();
        write_conflist(
            &d,
            "noop",
            vec![json!({"type": "tern-noop"}), json!({"type": "tern-noop"})],
        )?;
        for c in ["tern", "tern-tmpfs"] {
            write_conflist(
                &d,
                c,
                vec![
                    json!({"type": "tern", "mtu": 1500, "stateDir": d.join(format!("run/state-{c}")),
                       "ipam": {"type": "tern-ipam", "ranges": [[{"subnet": "10.131.0.0/16"}]],
                                "dataDir": d.join(format!("ipam-{c}"))}}),
                    json!({"type": "tern-tuning", "sysctl": sysctl, "dataDir": d.join(format!("run/tuning-{c}"))}),
                ],
            )?;
        }
        for rel in ["deb", "v1.10"] {
            if !d.join(format!("bin/ptp-{rel}")).exists() {
                continue;
            }
            write_conflist(
                &d,
                &format!("ref-{rel}"),
                vec![
                    json!({"type": format!("ptp-{rel}"), "mtu": 1500, "ipMasq": false,
                       "ipam": {"type": format!("host-local-{rel}"), "ranges": [[{"subnet": "10.132.0.0/16"}]],
                                "dataDir": d.join(format!("ipam-ref-{rel}"))}}),
                    json!({"type": format!("tuning-{rel}"), "sysctl": sysctl,
                       "dataDir": d.join(format!("run/tuning-ref-{rel}"))}),
                ],
            )?;
            if rel != "deb" {
                world.chains.push("ref-v1.10");
            }
        }
        Ok(world)
    }

    /// N pods through CHAIN, PAR at once, in pod netns of their own; their (add, del) ms.
    fn run_chain(&self, chain: &str, n: usize, par: usize) -> Res<(Vec<f64>, Vec<f64>)> {
        let pods: Vec<TestNetns> = (0..n).map(|_| TestNetns::new("tlb-pod")).collect();
        let d = self.work.path();
        let cache = d.join(if chain == "tern-tmpfs" {
            "tmpfs"
        } else {
            "cache"
        });
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.host.name()])
            .arg(&self.cnitool)
            .arg("-conf-dir")
            .arg(d.join("net.d"))
            .arg("-cni-path")
            .arg(d.join("bin"))
            .arg("-cache-dir")
            .arg(&cache)
            .args(["-parallel", &par.to_string(), "bench", chain])
            .args(pods.iter().map(TestNetns::path));
        let out = cmd.output().map_err(|e| format!("cnitool: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "chain {chain} failed: {}{}",
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let v: Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("chain {chain}: cnitool bench output: {e}"))?;
        let ms = |key: &str| -> Vec<f64> {
            v[key]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_f64)
                        .map(|ns| ns / 1e6)
                        .collect()
                })
                .unwrap_or_default()
        };
        let (add, del) = (ms("add_ns"), ms("del_ns"));
        if add.len() != n || del.len() != n {
            return Err(format!(
                "chain {chain}: {} ADD and {} DEL times for {n} pods",
                add.len(),
                del.len()
            ));
        }
        Ok((add, del))
    }
}

/// ADD and DEL samples (ms) per (chain, parallelism).
type Samples = BTreeMap<(&'static str, usize), (Vec<f64>, Vec<f64>)>;

fn report(o: &Opts, w: &World, s: &Samples) {
    let p = |c: &str, par: usize, verb: usize, q: f64| {
        s.get(&(c, par))
            .map_or(f64::NAN, |(a, d)| pct(if verb == 0 { a } else { d }, q))
    };
    for &par in &o.parallel {
        println!("\nparallelism {par}: chain ADD p50 / p99, DEL p50 / p99 (ms)");
        for c in &w.chains {
            println!(
                "  {c:<11} {:8.3} / {:8.3}   {:8.3} / {:8.3}",
                p(c, par, 0, 50.0),
                p(c, par, 0, 99.0),
                p(c, par, 1, 50.0),
                p(c, par, 1, 99.0)
            );
        }
        let (t, td) = (p("tern", par, 0, 50.0), p("tern", par, 1, 50.0));
        for r in w.chains.iter().filter(|c| c.starts_with("ref-")) {
            println!(
                "  tern / {r}: ADD {:.2}x, DEL {:.2}x",
                t / p(r, par, 0, 50.0),
                td / p(r, par, 1, 50.0)
            );
        }
        let diff = |c: &str| (t - p(c, par, 0, 50.0), td - p(c, par, 1, 50.0));
        let (ca, cd) = diff("tern-tmpfs");
        println!("  libcni's result cache on disk vs tmpfs (tern - tern-tmpfs): ADD {ca:+.3} ms, DEL {cd:+.3} ms");
        let (na, nd) = diff("noop");
        println!("  the chain's work above two no-op execs (tern - noop): ADD {na:+.3} ms, DEL {nd:+.3} ms");
    }
    println!("(direct figures of the same chains: tern-bench, rows tt-chain/ti and ref-chain; the exec-chain floor there)");
}

fn run(o: &Opts) -> Res<()> {
    crate::host::build_cnitool()?;
    let w = World::new(o)?;
    println!(
        "libcni bench: {} pods per chain per parallelism in {} rotating rounds; libcni of tests/cnitool (Debian's libcni 1.1); cache on disk ({}) and tmpfs",
        o.pods,
        o.rounds,
        w.work.path().display()
    );
    for c in &w.chains {
        w.run_chain(c, 4, 1)?; // page cache, first execs
    }
    let mut s = Samples::new();
    for &par in &o.parallel {
        for r in 0..o.rounds {
            let n = o.pods / o.rounds + usize::from(r < o.pods % o.rounds);
            for k in (0..w.chains.len()).filter(|_| n > 0) {
                let c = w.chains[(k + r) % w.chains.len()];
                let (add, del) = w.run_chain(c, n, par)?;
                let e = s.entry((c, par)).or_default();
                e.0.extend(add);
                e.1.extend(del);
            }
        }
    }
    report(o, &w, &s);
    Ok(())
}

/// Runs the bench with `args` (after `libcni`); returns the exit status.
pub(crate) fn main(args: &[String]) -> i32 {
    match parse(args).and_then(|o| run(&o)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tern-bench libcni: {e}");
            1
        }
    }
}

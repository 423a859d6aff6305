//! `tern-bench ipam`: IPAM ADD and ADD+DEL of tern-ipam beside Debian's host-local, each exec'd as
//! a runtime does (`CNI_*` environment, netconf on stdin), on the same kind of network: a /16 with
//! EXISTING leases already taken (100 by default, written by tern-ipam for both: the lease files
//! are host-local's format), at cniVersion 1.0.0 (host-local refuses 1.1.0).
//!
//! Two data dirs: one on disk (under /var/tmp; neither plugin fsyncs a lease), one on tmpfs
//! (/dev/shm), so the file system's share (a new inode per lease) shows. Per data dir, as the
//! hyperfine runs this replaces did: WARMUP untimed runs then RUNS timed ones of each plugin in
//! turn, first ADD+DEL of one container (both execs timed, summed), then ADD alone with an
//! untimed DEL before each run. Prints a markdown table per data dir, ms: median, mean ± σ,
//! min, max. Usage: `tern-bench ipam [--runs 300] [--warmup 20] [--existing 100]
//! [--tern-ipam PATH] [--ref-dir DIR]`; no root needed. Its data dirs are removed at exit.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::exec::invoke;
use crate::stats::{mean_sd, pct};
use crate::Res;

const USAGE: &str = "usage: tern-bench ipam [--runs N (300)] [--warmup N (20)] [--existing N (100)] [--tern-ipam PATH] [--ref-dir DIR]";
/// Every exec's `CNI_NETNS` (IPAM never enters it) and `CNI_PATH` (IPAM delegates nothing).
const NETNS: &str = "/var/run/netns/bench-absent";
const CNI_PATH: &str = "/nonexistent";

struct Opts {
    runs: usize,
    warmup: usize,
    existing: usize,
    tern_ipam: PathBuf,
    host_local: PathBuf,
}

fn parse(args: &[String]) -> Res<Opts> {
    let mut o = Opts {
        runs: 300,
        warmup: 20,
        existing: 100,
        tern_ipam: crate::opts::beside_self("tern-ipam"),
        host_local: PathBuf::from("/usr/lib/cni/host-local"),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        let num = |v: &String| v.parse::<usize>().map_err(|e| format!("{a}: {e}"));
        match a.as_str() {
            "--runs" => o.runs = num(val()?)?,
            "--warmup" => o.warmup = num(val()?)?,
            "--existing" => o.existing = num(val()?)?,
            "--tern-ipam" => o.tern_ipam = PathBuf::from(val()?),
            "--ref-dir" => o.host_local = Path::new(val()?).join("host-local"),
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    if o.runs == 0 {
        return Err(format!("--runs must be positive\n{USAGE}"));
    }
    for b in [&o.tern_ipam, &o.host_local] {
        if !b.is_file() {
            return Err(format!(
                "{} is missing (cargo build --release -p tern-ipam?)",
                b.display()
            ));
        }
    }
    Ok(o)
}

/// One plugin on one data dir: its binary and netconf.
struct Subject<'a> {
    label: &'static str,
    bin: &'a Path,
    conf: Vec<u8>,
}

impl Subject<'_> {
    fn exec(&self, verb: &str, cid: &str) -> Res<Duration> {
        invoke(self.bin, verb, cid, NETNS, CNI_PATH, "", &self.conf)
    }
}

/// The netconf of network `bench-NAME` on DATA (a ptp-shaped conf, as host-local reads it).
fn netconf(name: &str, data: &Path) -> Res<Vec<u8>> {
    serde_json::to_vec(&json!({
        "cniVersion": "1.0.0", "name": format!("bench-{name}"), "type": "ptp",
        "ipam": {"type": "x", "subnet": "10.200.0.0/16", "routes": [{"dst": "0.0.0.0/0"}],
                 "dataDir": data},
    }))
    .map_err(|e| e.to_string())
}

/// RUNS timed samples (ms) of F after WARMUP untimed ones; PREPARE runs untimed before each.
fn sample(
    o: &Opts,
    prepare: &dyn Fn() -> Res<()>,
    timed: &dyn Fn() -> Res<Duration>,
) -> Res<Vec<f64>> {
    let mut ms = Vec::with_capacity(o.runs);
    for i in 0..o.warmup + o.runs {
        prepare()?;
        let took = timed()?;
        if i >= o.warmup {
            ms.push(took.as_secs_f64() * 1e3);
        }
    }
    Ok(ms)
}

fn row(command: &str, ms: &[f64]) -> String {
    let (mean, sd) = mean_sd(ms);
    format!(
        "| {command} | {:.2} | {mean:.2} ± {sd:.2} | {:.2} | {:.2} |",
        pct(ms, 50.0),
        pct(ms, 0.0),
        pct(ms, 100.0)
    )
}

/// The table of one data dir.
fn bench_dir(o: &Opts, label: &str, data: &Path) -> Res<()> {
    std::fs::create_dir_all(data).map_err(|e| format!("{}: {e}", data.display()))?;
    let subjects = [
        Subject {
            label: "tern-ipam",
            bin: &o.tern_ipam,
            conf: netconf("tern", data)?,
        },
        Subject {
            label: "host-local",
            bin: &o.host_local,
            conf: netconf("host", data)?,
        },
    ];
    for s in &subjects {
        let seed = Subject {
            label: s.label,
            bin: &o.tern_ipam,
            conf: s.conf.clone(),
        };
        for i in 1..=o.existing {
            seed.exec("ADD", &format!("pre{i}"))?;
        }
    }
    println!(
        "## {label} ({}, {} leases present)",
        data.display(),
        o.existing
    );
    println!("| command | median | mean ± σ | min | max |\n|:---|---:|---:|---:|---:|");
    let none = || Ok(());
    let mut rows = Vec::new();
    for s in &subjects {
        let pair = || Ok(s.exec("ADD", "b")? + s.exec("DEL", "b")?);
        rows.push(row(
            &format!("{} ADD+DEL", s.label),
            &sample(o, &none, &pair)?,
        ));
    }
    for s in &subjects {
        let del = || s.exec("DEL", "b").map(drop);
        let add = || s.exec("ADD", "b");
        rows.push(row(&format!("{} ADD", s.label), &sample(o, &del, &add)?));
    }
    println!("{}\n", rows.join("\n"));
    Ok(())
}

/// A data dir of this run, removed on drop.
struct DataDir(PathBuf);

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the bench with `args` (after `ipam`); returns the exit status.
pub(crate) fn main(args: &[String]) -> i32 {
    let run = || -> Res<()> {
        let o = parse(args)?;
        println!(
            "ipam: {} runs after {} warm-up per row, {} leases present; tern-ipam {}, host-local {}",
            o.runs,
            o.warmup,
            o.existing,
            o.tern_ipam.display(),
            o.host_local.display()
        );
        let tag = format!("tern-bench-ipam.{}", std::process::id());
        let disk = DataDir(Path::new("/var/tmp").join(&tag));
        bench_dir(&o, "disk", &disk.0)?;
        if Path::new("/dev/shm").is_dir() {
            let shm = DataDir(Path::new("/dev/shm").join(&tag));
            bench_dir(&o, "tmpfs", &shm.0)?;
        }
        Ok(())
    };
    match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tern-bench ipam: {e}");
            1
        }
    }
}

//! The CRI benchmark rows' shared part (`tern-cri-bench`, `tern-crio-bench`): their arguments,
//! the interleaved rounds of two chains timed over the CRI, and the table they print.
//!
//! Each round creates one sandbox per chain, then stops and removes both, the order of the
//! chains alternating between rounds, so drift in the machine load hits both alike. Timed:
//! `RunPodSandbox`, `StopPodSandbox` and `RemovePodSandbox`, each from request to response over
//! the CRI socket. Every sandbox's pod IP is checked against its chain's range (a runtime that
//! silently used the wrong network would otherwise compare a chain with itself).

use std::time::{Duration, Instant};

use crate::client::PodRef;
use crate::proto::VersionResponse;
use crate::stats::quantile_ms as q;
use crate::Runtime;

/// A benchmark's result: its error is printed as is.
pub type Res<T> = Result<T, String>;

/// One chain under test and its timings.
pub struct Chain {
    /// The table's label.
    pub label: &'static str,
    /// A short name for pod names.
    pub short: &'static str,
    /// The first three octets of the chain's /24 with the trailing dot (`10.99.206.`).
    pub prefix: &'static str,
    /// Which of the runtimes passed to [`run_rounds`] serves it.
    pub runtime: usize,
    /// Its CRI runtime handler (`""`: the default).
    pub handler: &'static str,
    create: Vec<Duration>,
    stop: Vec<Duration>,
    remove: Vec<Duration>,
}

impl Chain {
    /// A chain with no timings yet.
    pub fn new(
        label: &'static str,
        short: &'static str,
        prefix: &'static str,
        runtime: usize,
        handler: &'static str,
    ) -> Chain {
        Chain {
            label,
            short,
            prefix,
            runtime,
            handler,
            create: Vec::new(),
            stop: Vec::new(),
            remove: Vec::new(),
        }
    }

    /// Creates one sandbox; records the time when `record`; returns its ID.
    fn create(&mut self, rt: &mut dyn Runtime, n: usize, record: bool) -> Res<String> {
        let pod = PodRef::new("bench", &format!("{}-{n}", self.short), &format!("uid-{n}"));
        let t = Instant::now();
        let id = rt
            .run_sandbox_on(&pod, self.handler)
            .map_err(|e| format!("RunPodSandbox on {}: {e}", self.label))?;
        let took = t.elapsed();
        let st = rt
            .cri()
            .and_then(|cri| cri.pod_sandbox_status(&id, false))
            .map_err(|e| format!("PodSandboxStatus: {e}"))?;
        let ip = st
            .status
            .and_then(|s| s.network)
            .map(|n| n.ip)
            .unwrap_or_default();
        if !ip.starts_with(self.prefix) {
            return Err(format!(
                "{}: sandbox got {ip:?}, not an address of {}0/24: the runtime used another network",
                self.label, self.prefix
            ));
        }
        if record {
            self.create.push(took);
        }
        Ok(id)
    }

    /// Stops and removes sandbox `id`; records the times when `record`.
    fn stop_remove(&mut self, rt: &mut dyn Runtime, id: &str, record: bool) -> Res<()> {
        let cri = rt.cri().map_err(|e| e.to_string())?;
        let t = Instant::now();
        cri.stop_pod_sandbox(id)
            .map_err(|e| format!("StopPodSandbox on {}: {e}", self.label))?;
        let stop = t.elapsed();
        let t = Instant::now();
        cri.remove_pod_sandbox(id)
            .map_err(|e| format!("RemovePodSandbox on {}: {e}", self.label))?;
        if record {
            self.stop.push(stop);
            self.remove.push(t.elapsed());
        }
        Ok(())
    }
}

/// `--pods N` (default 40, at least 1) and `--warmup W` (default 3) from the command line of
/// `program`; `-h` prints the usage and exits.
///
/// # Errors
/// An unknown argument or a missing number.
pub fn parse_args(program: &str) -> Res<(usize, usize)> {
    let (mut pods, mut warmup) = (40usize, 3usize);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> Res<usize> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{name} needs a number"))
        };
        match a.as_str() {
            "--pods" => pods = num("--pods")?.max(1),
            "--warmup" => warmup = num("--warmup")?,
            "-h" | "--help" => {
                println!("usage: {program} [--pods N] [--warmup W]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok((pods, warmup))
}

/// The runtime's `Version`.
///
/// # Errors
/// The CRI call's, as text.
pub fn version(rt: &mut dyn Runtime) -> Res<VersionResponse> {
    rt.cri()
        .and_then(|cri| cri.version())
        .map_err(|e| format!("Version: {e}"))
}

/// `warmup + pods` interleaved rounds over `chains`, each on `runtimes[chain.runtime]`, then a
/// teardown of every runtime that must have nothing to repair; returns the rounds' wall time.
///
/// # Errors
/// A CRI call's error, a pod IP outside its chain's range, or a teardown that had to repair.
pub fn run_rounds(
    chains: &mut [Chain; 2],
    runtimes: &mut [&mut dyn Runtime],
    pods: usize,
    warmup: usize,
) -> Res<Duration> {
    let wall = Instant::now();
    for round in 0..(warmup + pods) {
        let record = round >= warmup;
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut ids = [String::new(), String::new()];
        for &i in &order {
            ids[i] = chains[i].create(runtimes[chains[i].runtime], round, record)?;
        }
        for &i in &order {
            chains[i].stop_remove(runtimes[chains[i].runtime], &ids[i], record)?;
        }
    }
    let wall = wall.elapsed();
    for rt in runtimes.iter_mut() {
        let problems = rt.teardown();
        if !problems.is_empty() {
            return Err(format!(
                "teardown of {} had to repair (a DEL left something): {problems:?}",
                rt.dir().display()
            ));
        }
    }
    Ok(wall)
}

/// Prints the row: `header`, each chain's quantiles, tern's chain (the first) against the
/// reference (the second), and `footnote` on what create and stop include.
pub fn print_table(header: &str, chains: &[Chain; 2], footnote: &str) {
    println!();
    println!("{header}");
    println!(
        "{:<34} {:>18} {:>18} {:>18}",
        "chain", "create p50/p90/max", "stop p50/p90/max", "remove p50/p90"
    );
    for ch in chains {
        println!(
            "{:<34} {:>6.1}/{:>5.1}/{:>5.1} {:>6.1}/{:>5.1}/{:>5.1} {:>11.1}/{:>5.1}",
            ch.label,
            q(&ch.create, 0.5),
            q(&ch.create, 0.9),
            q(&ch.create, 1.0),
            q(&ch.stop, 0.5),
            q(&ch.stop, 0.9),
            q(&ch.stop, 1.0),
            q(&ch.remove, 0.5),
            q(&ch.remove, 0.9),
        );
    }
    let (t, r) = (&chains[0], &chains[1]);
    println!(
        "tern - ref (p50): create {:+.1} ms, stop {:+.1} ms; tern/ref (p50): create {:.2}x, stop {:.2}x",
        q(&t.create, 0.5) - q(&r.create, 0.5),
        q(&t.stop, 0.5) - q(&r.stop, 0.5),
        q(&t.create, 0.5) / q(&r.create, 0.5),
        q(&t.stop, 0.5) / q(&r.stop, 0.5),
    );
    println!("{footnote}");
}

/// Runs `body`; on its error prints `<program>: <error>` and exits 1.
pub fn main(program: &str, body: impl FnOnce() -> Res<()>) {
    if let Err(e) = body() {
        eprintln!("{program}: {e}");
        std::process::exit(1);
    }
}

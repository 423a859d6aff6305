//! `tern-crio-bench`: the CRI-O row of `scripts/bench` — pod sandbox create and stop latency
//! under CRI-O, tern's chain beside the reference chain, in one run.
//!
//! CRI-O has one CNI network for every sandbox (no per-handler conf dir as containerd has), so
//! two private CRI-Os (see `tern_cri::crio`) run side by side: one on the default chain
//! (`cni-conf-examples/10-tern.conflist`: tern + host-local, tern-tuning with the keepalive
//! sysctls, no pod lookup) on 10.99.234.0/24, one on ptp + host-local + the reference `tuning`
//! with the same sysctls on 10.99.235.0/24. Each round creates one sandbox per chain, then stops
//! and removes both, the order alternating between rounds. Sandboxes are made as kubelet makes
//! them (PID namespace per container), so CRI-O runs no infra container: `RunPodSandbox` is the
//! storage container, `pinns`, the CNI ADD of loopback and the chain and CRI-O's CHECK of the
//! chain; `StopPodSandbox` is the CNI DEL and the netns removal. Each is timed from request to
//! response over the CRI socket; the difference of the medians is the chain's own share.
//!
//! Every sandbox's pod IP is checked against its chain's range. Everything is removed at exit,
//! also on failure (the CRI-O guard).
//!
//! Usage (root): `tern-crio-bench [--pods N] [--warmup W]` (defaults 40 and 3 per chain).

use std::time::{Duration, Instant};

use tern_cri::chains::{reference_chain, tern_chain};
use tern_cri::client::PodRef;
use tern_cri::crio::{instance_dir, Crio, Options};
use tern_cri::crio_conf::storage_driver;
use tern_cri::stats::quantile_ms as q;

type Res<T> = Result<T, String>;

struct Chain {
    label: &'static str,
    short: &'static str,
    prefix: &'static str,
    crio: Crio,
    create: Vec<Duration>,
    stop: Vec<Duration>,
    remove: Vec<Duration>,
}

fn parse() -> Res<(usize, usize)> {
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
                println!("usage: tern-crio-bench [--pods N] [--warmup W]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok((pods, warmup))
}

impl Chain {
    fn start(
        label: &'static str,
        short: &'static str,
        prefix: &'static str,
        conflist: serde_json::Value,
    ) -> Res<Chain> {
        let crio = Crio::start(
            &Options {
                tag: format!("bench-{short}"),
                subnets: vec![format!("{prefix}0/24")],
                trace: Vec::new(),
            },
            |_| conflist,
        )
        .map_err(|e| format!("private CRI-O for {label}: {e}"))?;
        Ok(Chain {
            label,
            short,
            prefix,
            crio,
            create: Vec::new(),
            stop: Vec::new(),
            remove: Vec::new(),
        })
    }

    /// Creates one sandbox; records the time when `record`; returns its ID.
    fn create(&mut self, n: usize, record: bool) -> Res<String> {
        let pod = PodRef::new("bench", &format!("{}-{n}", self.short), &format!("uid-{n}"));
        let t = Instant::now();
        let id = self
            .crio
            .run_sandbox(&pod)
            .map_err(|e| format!("RunPodSandbox on {}: {e}", self.label))?;
        let took = t.elapsed();
        let st = self
            .crio
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
                "{}: sandbox got {ip:?}, not an address of {}0/24",
                self.label, self.prefix
            ));
        }
        if record {
            self.create.push(took);
        }
        Ok(id)
    }

    fn stop_remove(&mut self, id: &str, record: bool) -> Res<()> {
        let cri = self.crio.cri().map_err(|e| e.to_string())?;
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

fn main_inner() -> Res<()> {
    let (pods, warmup) = parse()?;
    let (tp, rp) = ("10.99.234.", "10.99.235.");
    // The chains name data dirs under their instance's directory (tag `bench-<short>`).
    let tern = tern_chain(
        &instance_dir("bench-tern"),
        "bench-tern",
        &format!("{tp}0/24"),
        None,
    )
    .map_err(|e| e.to_string())?;
    let reference = reference_chain(
        &instance_dir("bench-ref"),
        "bench-ref",
        &format!("{rp}0/24"),
        &tern,
    );
    let mut chains = [
        Chain::start("tern + host-local + tern-tuning", "tern", tp, tern)?,
        Chain::start("ptp + host-local + tuning (ref)", "ref", rp, reference)?,
    ];
    let version = chains[0]
        .crio
        .cri()
        .and_then(|cri| cri.version())
        .map_err(|e| format!("Version: {e}"))?;
    let wall = Instant::now();
    for round in 0..(warmup + pods) {
        let record = round >= warmup;
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut ids = [String::new(), String::new()];
        for &i in &order {
            ids[i] = chains[i].create(round, record)?;
        }
        for &i in &order {
            chains[i].stop_remove(&ids[i], record)?;
        }
    }
    let wall = wall.elapsed();
    for ch in &mut chains {
        let problems = ch.crio.teardown();
        if !problems.is_empty() {
            return Err(format!(
                "teardown of {} had to repair (a DEL left something): {problems:?}",
                ch.label
            ));
        }
    }

    println!();
    println!(
        "CRI-O row: {} {} (CRI {}), runc + conmon, {} storage, no infra container; {pods} sandboxes per chain (+{warmup} warm-up), interleaved, {:.1}s",
        version.runtime_name,
        version.runtime_version,
        version.runtime_api_version,
        storage_driver(),
        wall.as_secs_f64()
    );
    println!(
        "{:<34} {:>18} {:>18} {:>18}",
        "chain", "create p50/p90/max", "stop p50/p90/max", "remove p50/p90"
    );
    for ch in &chains {
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
    println!("(ms, CRI request to response: create = RunPodSandbox incl. the CNI ADD and CHECK; stop = StopPodSandbox incl. the CNI DEL)");
    Ok(())
}

fn main() {
    if let Err(e) = main_inner() {
        eprintln!("tern-crio-bench: {e}");
        std::process::exit(1);
    }
}

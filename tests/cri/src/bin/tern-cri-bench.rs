//! `tern-cri-bench`: the containerd row of `scripts/bench` — pod sandbox create and stop latency
//! under containerd 1.6's CRI plugin, tern's chain beside the reference chain, in one run.
//!
//! One private containerd (see `tern_cri::containerd`) serves both chains: the default runtime
//! handler `runc` uses the default chain (`cni-conf-examples/10-tern.conflist`: tern +
//! host-local, tern-tuning with the keepalive sysctls, no pod lookup) on 10.99.206.0/24; handler
//! `ref` (the same runc, its own `cni_conf_dir`) uses ptp + host-local + the reference `tuning`
//! with the same sysctls on 10.99.207.0/24. Each round creates one sandbox per chain, then stops
//! and removes both, the order of the chains alternating between rounds, so drift in the machine
//! load hits both alike. Timed: `RunPodSandbox` (image check, snapshot, runc create/start of the
//! pause process, netns pinning, CNI ADD of loopback and the chain), `StopPodSandbox` (kill, CNI
//! DEL, netns removal) and `RemovePodSandbox`, each from request to response over the CRI socket.
//! The difference of the two chains' medians is the chain's own share of the latency.
//!
//! Every sandbox's pod IP is checked against its chain's range (a handler that silently used
//! the wrong network would otherwise compare a chain with itself). Everything is removed at exit,
//! also on failure (the containerd guard).
//!
//! Usage (root): `tern-cri-bench [--pods N] [--warmup W]` (defaults 40 and 3 per chain).

use std::time::{Duration, Instant};

use tern_cri::chains::{reference_chain, tern_chain};
use tern_cri::client::PodRef;
use tern_cri::containerd::{instance_dir, snapshotter, Containerd, Network, Options};
use tern_cri::stats::quantile_ms;

type Res<T> = Result<T, String>;

const TERN_SUBNET: &str = "10.99.206.";
const REF_SUBNET: &str = "10.99.207.";
const REF_HANDLER: &str = "ref";

struct Chain {
    label: &'static str,
    handler: Option<&'static str>,
    prefix: &'static str,
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
                println!("usage: tern-cri-bench [--pods N] [--warmup W]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok((pods, warmup))
}

/// The `q` quantile of `v`, in ms.
fn q(v: &[Duration], q: f64) -> f64 {
    quantile_ms(v, q)
}

/// Creates, stops and removes one sandbox on `chain`; records the times when `record`.
fn cycle(c: &mut Containerd, chain: &mut Chain, n: usize, record: bool) -> Res<String> {
    let pod = PodRef::new(
        "bench",
        &format!("{}-{n}", chain.label_short()),
        &format!("uid-{n}"),
    );
    let t = Instant::now();
    let id = c
        .run_sandbox(&pod, chain.handler)
        .map_err(|e| format!("RunPodSandbox on {}: {e}", chain.label))?;
    let create = t.elapsed();
    let st = c
        .cri()
        .and_then(|cri| cri.pod_sandbox_status(&id, false))
        .map_err(|e| format!("PodSandboxStatus: {e}"))?;
    let ip = st
        .status
        .and_then(|s| s.network)
        .map(|n| n.ip)
        .unwrap_or_default();
    if !ip.starts_with(chain.prefix) {
        return Err(format!(
            "{}: sandbox got {ip:?}, not an address of {}0/24: the runtime handler used another network",
            chain.label, chain.prefix
        ));
    }
    if record {
        chain.create.push(create);
    }
    Ok(id)
}

impl Chain {
    fn label_short(&self) -> &'static str {
        if self.handler.is_some() {
            "ref"
        } else {
            "tern"
        }
    }
}

fn stop_remove(c: &mut Containerd, chain: &mut Chain, id: &str, record: bool) -> Res<()> {
    let cri = c.cri().map_err(|e| e.to_string())?;
    let t = Instant::now();
    cri.stop_pod_sandbox(id)
        .map_err(|e| format!("StopPodSandbox on {}: {e}", chain.label))?;
    let stop = t.elapsed();
    let t = Instant::now();
    cri.remove_pod_sandbox(id)
        .map_err(|e| format!("RemovePodSandbox on {}: {e}", chain.label))?;
    let remove = t.elapsed();
    if record {
        chain.stop.push(stop);
        chain.remove.push(remove);
    }
    Ok(())
}

fn main_inner() -> Res<()> {
    let (pods, warmup) = parse()?;
    let dir = instance_dir("bench");
    let tern = tern_chain(&dir, "bench-tern", &format!("{TERN_SUBNET}0/24"), None)
        .map_err(|e| e.to_string())?;
    let reference = reference_chain(&dir, "bench-ref", &format!("{REF_SUBNET}0/24"), &tern);
    let mut c = Containerd::start(
        &Options {
            tag: "bench".into(),
            subnets: vec![format!("{TERN_SUBNET}0/24"), format!("{REF_SUBNET}0/24")],
            trace: Vec::new(),
        },
        |_| {
            vec![
                Network {
                    handler: None,
                    conflist: tern,
                },
                Network {
                    handler: Some(REF_HANDLER.into()),
                    conflist: reference,
                },
            ]
        },
    )
    .map_err(|e| format!("private containerd: {e}"))?;
    let version = c
        .cri()
        .and_then(|cri| cri.version())
        .map_err(|e| format!("Version: {e}"))?;
    let mut chains = [
        Chain {
            label: "tern + host-local + tern-tuning",
            handler: None,
            prefix: TERN_SUBNET,
            create: Vec::new(),
            stop: Vec::new(),
            remove: Vec::new(),
        },
        Chain {
            label: "ptp + host-local + tuning (ref)",
            handler: Some(REF_HANDLER),
            prefix: REF_SUBNET,
            create: Vec::new(),
            stop: Vec::new(),
            remove: Vec::new(),
        },
    ];
    let wall = Instant::now();
    for round in 0..(warmup + pods) {
        let record = round >= warmup;
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut ids = [String::new(), String::new()];
        for &i in &order {
            ids[i] = cycle(&mut c, &mut chains[i], round, record)?;
        }
        for &i in &order {
            stop_remove(&mut c, &mut chains[i], &ids[i], record)?;
        }
    }
    let wall = wall.elapsed();
    let problems = c.teardown();
    if !problems.is_empty() {
        return Err(format!(
            "teardown had to repair (a DEL left something): {problems:?}"
        ));
    }

    println!();
    println!(
        "containerd CRI row: {} {} (CRI {}), runc, {} snapshotter; {pods} sandboxes per chain (+{warmup} warm-up), interleaved, {:.1}s",
        version.runtime_name,
        version.runtime_version,
        version.runtime_api_version,
        snapshotter(),
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
    println!("(ms, CRI request to response: create = RunPodSandbox incl. runc and the CNI ADD; stop = StopPodSandbox incl. the CNI DEL)");
    Ok(())
}

fn main() {
    if let Err(e) = main_inner() {
        eprintln!("tern-cri-bench: {e}");
        std::process::exit(1);
    }
}

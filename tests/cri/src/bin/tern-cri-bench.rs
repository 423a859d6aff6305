//! `tern-cri-bench`: the containerd row of `tern-bench` (`tern-bench cri`) — pod sandbox create and stop latency
//! under containerd 1.6's CRI plugin, tern's chain beside the reference chain, in one run.
//!
//! One private containerd (see `tern_cri::containerd`) serves both chains: the default runtime
//! handler `runc` uses the default chain (`cni-conf-examples/10-tern.conflist`: tern +
//! host-local, tern-tuning with the keepalive sysctls, no pod lookup) on 10.99.206.0/24; handler
//! `ref` (the same runc, its own `cni_conf_dir`) uses ptp + host-local + the reference `tuning`
//! with the same sysctls on 10.99.207.0/24. Each round creates one sandbox per chain, then stops
//! and removes both, the order of the chains alternating between rounds, so drift in the machine
//! load hits both alike (`tern_cri::bench`). Timed: `RunPodSandbox` (image check, snapshot, runc create/start of the
//! pause process, netns pinning, CNI ADD of loopback and the chain), `StopPodSandbox` (kill, CNI
//! DEL, netns removal) and `RemovePodSandbox`, each from request to response over the CRI socket.
//! The difference of the two chains' medians is the chain's own share of the latency.
//!
//! Every sandbox's pod IP is checked against its chain's range (a handler that silently used
//! the wrong network would otherwise compare a chain with itself). Everything is removed at exit,
//! also on failure (the containerd guard).
//!
//! Usage (root): `tern-cri-bench [--pods N] [--warmup W]` (defaults 40 and 3 per chain).

use tern_cri::bench::{self, parse_args, print_table, run_rounds, version, Chain, Res};
use tern_cri::chains::{reference_chain, tern_chain};
use tern_cri::containerd::{instance_dir, Containerd, Network, Options};
use tern_cri::containerd_conf::snapshotter;

const TERN_SUBNET: &str = "10.99.206.";
const REF_SUBNET: &str = "10.99.207.";
const REF_HANDLER: &str = "ref";

fn main_inner() -> Res<()> {
    let (pods, warmup) = parse_args("tern-cri-bench")?;
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
    let version = version(&mut c)?;
    let mut chains = [
        Chain::new(
            "tern + host-local + tern-tuning",
            "tern",
            TERN_SUBNET,
            0,
            "",
        ),
        Chain::new(
            "ptp + host-local + tuning (ref)",
            "ref",
            REF_SUBNET,
            0,
            REF_HANDLER,
        ),
    ];
    let wall = run_rounds(&mut chains, &mut [&mut c], pods, warmup)?;
    print_table(
        &format!(
            "containerd CRI row: {} {} (CRI {}), runc, {} snapshotter; {pods} sandboxes per chain (+{warmup} warm-up), interleaved, {:.1}s",
            version.runtime_name,
            version.runtime_version,
            version.runtime_api_version,
            snapshotter(),
            wall.as_secs_f64()
        ),
        &chains,
        "(ms, CRI request to response: create = RunPodSandbox incl. runc and the CNI ADD; stop = StopPodSandbox incl. the CNI DEL)",
    );
    Ok(())
}

fn main() {
    bench::main("tern-cri-bench", main_inner);
}

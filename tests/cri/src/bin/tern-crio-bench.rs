//! `tern-crio-bench`: the CRI-O row of `tern-bench` (`tern-bench crio`) — pod sandbox create and stop latency
//! under CRI-O, tern's chain beside the reference chain, in one run.
//!
//! CRI-O has one CNI network for every sandbox (no per-handler conf dir as containerd has), so
//! two private CRI-Os (see `tern_cri::crio`) run side by side: one on the default chain
//! (`cni-conf-examples/10-tern.conflist`: tern + host-local, tern-tuning with the keepalive
//! sysctls, no pod lookup) on 10.99.234.0/24, one on ptp + host-local + the reference `tuning`
//! with the same sysctls on 10.99.235.0/24. Each round creates one sandbox per chain, then stops
//! and removes both, the order alternating between rounds (`tern_cri::bench`). Sandboxes are made as kubelet makes
//! them (PID namespace per container), so CRI-O runs no infra container: `RunPodSandbox` is the
//! storage container, `pinns`, the CNI ADD of loopback and the chain and CRI-O's CHECK of the
//! chain; `StopPodSandbox` is the CNI DEL and the netns removal. Each is timed from request to
//! response over the CRI socket; the difference of the medians is the chain's own share.
//!
//! Every sandbox's pod IP is checked against its chain's range. Everything is removed at exit,
//! also on failure (the CRI-O guard).
//!
//! Usage (root): `tern-crio-bench [--pods N] [--warmup W]` (defaults 40 and 3 per chain).

use serde_json::Value;
use tern_cri::bench::{self, parse_args, print_table, run_rounds, version, Chain, Res};
use tern_cri::chains::{reference_chain, tern_chain};
use tern_cri::crio::{instance_dir, Crio, Options};
use tern_cri::crio_conf::storage_driver;

const TERN_SUBNET: &str = "10.99.234.";
const REF_SUBNET: &str = "10.99.235.";

/// A private CRI-O tagged `bench-<short>` on `conflist`, whose range is `<prefix>0/24`.
fn start(short: &str, prefix: &str, conflist: Value) -> Res<Crio> {
    Crio::start(
        &Options {
            tag: format!("bench-{short}"),
            subnets: vec![format!("{prefix}0/24")],
            trace: Vec::new(),
        },
        |_| conflist,
    )
    .map_err(|e| format!("private CRI-O for {short}: {e}"))
}

fn main_inner() -> Res<()> {
    let (pods, warmup) = parse_args("tern-crio-bench")?;
    // The chains name data dirs under their instance's directory (tag `bench-<short>`).
    let tern = tern_chain(
        &instance_dir("bench-tern"),
        "bench-tern",
        &format!("{TERN_SUBNET}0/24"),
        None,
    )
    .map_err(|e| e.to_string())?;
    let reference = reference_chain(
        &instance_dir("bench-ref"),
        "bench-ref",
        &format!("{REF_SUBNET}0/24"),
        &tern,
    );
    let mut tern_crio = start("tern", TERN_SUBNET, tern)?;
    let mut ref_crio = start("ref", REF_SUBNET, reference)?;
    let version = version(&mut tern_crio)?;
    let mut chains = [
        Chain::new(
            "tern + host-local + tern-tuning",
            "tern",
            TERN_SUBNET,
            0,
            "",
        ),
        Chain::new("ptp + host-local + tuning (ref)", "ref", REF_SUBNET, 1, ""),
    ];
    let wall = run_rounds(
        &mut chains,
        &mut [&mut tern_crio, &mut ref_crio],
        pods,
        warmup,
    )?;
    print_table(
        &format!(
            "CRI-O row: {} {} (CRI {}), runc + conmon, {} storage, no infra container; {pods} sandboxes per chain (+{warmup} warm-up), interleaved, {:.1}s",
            version.runtime_name,
            version.runtime_version,
            version.runtime_api_version,
            storage_driver(),
            wall.as_secs_f64()
        ),
        &chains,
        "(ms, CRI request to response: create = RunPodSandbox incl. the CNI ADD and CHECK; stop = StopPodSandbox incl. the CNI DEL)",
    );
    Ok(())
}

fn main() {
    bench::main("tern-crio-bench", main_inner);
}

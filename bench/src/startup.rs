//! Start-up floor: VERSION latency of each binary, and the floor under a tern ADD with host-local.

use std::path::Path;

use crate::env::Env;
use crate::exec::invoke;
use crate::opts::Opts;
use crate::rounds::{pct, run_parallel, Row};
use crate::Res;

/// Times VERSION (exec + runtime start + exit) of tern, ptp and host-local at parallelism 1, then
/// prints the floor under a tern ADD with an exec'd host-local: host-local's ADD, tern's start-up
/// and the kernel's veth creation (p50s, ms).
///
/// # Errors
/// A VERSION invocation that fails.
pub(crate) fn startup_floor(
    o: &Opts,
    env: &Env,
    rows: &[Row],
    host_local: &Path,
    cni_path: &str,
) -> Res<()> {
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
        ("host-local", host_local.to_path_buf()),
    ] {
        let items: Vec<usize> = (0..o.pods).collect();
        let work = |_: &usize| invoke(&bin, "VERSION", "v", "", cni_path, "", version);
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
    Ok(())
}

//! The report: latency table, ratios against the reference and the targets.

use std::sync::atomic::Ordering;

use crate::env::Env;
use crate::floor::exec_chain_floor;
use crate::opts::Opts;
use crate::rounds::{pct, Phase, Row};

pub(crate) fn verdict(ok: bool) -> &'static str {
    if ok {
        "MET"
    } else {
        "NOT MET"
    }
}

/// The targets of the default chain (tern + tern-ipam in-process + tern-tuning, "tt-chain/ti"),
/// printed with its ratio and MET / NOT MET: ADD p50 at most 0.3x each reference chain's at every
/// parallelism (the guard). Beside it, measured references without a target (the 0.8x DEL and
/// 1.25x exec-chain targets were retired with the thick-plugin question): DEL p50 against each
/// reference chain's at parallelism 8, and ADD p50 against the exec-chain floor (the kernel
/// floor `floor`, the files `files` and the two execs `execs`, parallelism 1), with the ratio to
/// the floor without the files and the kernel floor's.
pub(crate) fn report_targets(rows: &[Row], floor: &Phase, files: &Phase, execs: &Phase) {
    println!(
        "
targets of the chain tern + tern-ipam + tern-tuning (tt-chain/ti), same rounds:"
    );
    let find = |par: usize, l: &str| rows.iter().find(|r| r.par == par && r.label == l);
    for reference in ["ref-chain", "ref-chain/1.10"] {
        for par in [1, 8] {
            let (Some(t), Some(r)) = (find(par, "tt-chain/ti"), find(par, reference)) else {
                println!("  {reference} par {par}: not run");
                continue;
            };
            let add = pct(&t.add.lat, 0.5) / pct(&r.add.lat, 0.5);
            println!(
                "  ADD p50 vs {reference:<14} par {par}: {:.3} / {:.3} ms = {add:.2}x (target <= 0.30x: {})",
                pct(&t.add.lat, 0.5),
                pct(&r.add.lat, 0.5),
                verdict(add <= 0.3)
            );
            if par == 8 {
                // A measured reference: the 0.8x target was retired (decision of record).
                let del = pct(&t.del.lat, 0.5) / pct(&r.del.lat, 0.5);
                println!(
                    "  DEL p50 vs {reference:<14} par {par}: {:.3} / {:.3} ms = {del:.2}x (reference)",
                    pct(&t.del.lat, 0.5),
                    pct(&r.del.lat, 0.5)
                );
            }
        }
    }
    if let (Some(t), false) = (
        find(1, "tt-chain/ti"),
        floor.lat.is_empty() || files.lat.is_empty() || execs.lat.is_empty(),
    ) {
        let add = pct(&t.add.lat, 0.5);
        let (k, fl, e) = (
            pct(&floor.lat, 0.5),
            pct(&files.lat, 0.5),
            pct(&execs.lat, 0.5),
        );
        let f = exec_chain_floor(floor, files, execs);
        let x = add / f;
        println!(
            "  ADD p50 vs the exec-chain floor, par 1: {add:.3} / {f:.3} ms = {x:.2}x (reference); the floor = netlink and sysctl work {k:.3} + the ADD's files {fl:.3} (both the chain's, in one long-lived process) + tern's and tern-tuning's execs {e:.3} (a VERSION each); the gap above it {:.3} ms; without the files {:.2}x; the kernel floor alone {:.2}x",
            add - f,
            add / (k + e),
            add / k
        );
    }
}

/// Prints the latency table of every row, the ratios against ptp and the reference chain with
/// their targets, the A/B of `--tern-b`, the pod lookup's cost and the tuning plugins alone.
pub(crate) fn report_latencies(o: &Opts, rows: &[Row], env: &Env) {
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
    for r in rows {
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

    for reference_label in ["ref-chain", "ref-chain/1.10"] {
        println!(
            "chains against the reference chain {reference_label} (ptp + host-local + tuning):"
        );
        for &par in &o.parallel {
            let find = |l: &str| rows.iter().find(|r| r.par == par && r.label == l);
            let Some(reference) = find(reference_label) else {
                continue;
            };
            for label in ["tt-chain/hl", "tt-chain/ti"] {
                if let Some(t) = find(label) {
                    let add = pct(&t.add.lat, 0.5) / pct(&reference.add.lat, 0.5);
                    println!(
                    "  par {par} {label}: ADD p50 {add:.2}x, ADD p99 {:.2}x, DEL p50 {:.2}x, DEL p99 {:.2}x, pods/s {:.2}x",
                    pct(&t.add.lat, 0.99) / pct(&reference.add.lat, 0.99),
                    pct(&t.del.lat, 0.5) / pct(&reference.del.lat, 0.5),
                    pct(&t.del.lat, 0.99) / pct(&reference.del.lat, 0.99),
                    t.pods_per_sec() / reference.pods_per_sec()
                );
                }
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
}

//! `tern-bench`: one run of tern beside the reference chain (ptp), both delegating to the same
//! IPAM (Debian's host-local), invoked exactly as a runtime does: exec of the plugin binary with
//! the `CNI_*` environment and the netconf on stdin, from inside a throwaway host netns.
//!
//! Measures, per plugin and per parallelism (1 and 8 by default):
//! - ADD and DEL latency (p50, p99, in ms): wall time from spawn to reaped exit, stdout read;
//! - pods per second: pods / (wall time of the ADD phase + wall time of the DEL phase);
//! - the kernel's own veth-deletion time (one `RTM_DELLINK` over netlink, timed alone) at the same
//!   parallelism, beside DEL; and its veth-creation time (one `RTM_NEWLINK` of a pair whose peer
//!   is made in a pod netns, as tern makes it), in the ADD floor at parallelism 1;
//! - the exec-chain floor at parallelism 1, in the same rounds ([`floor`]): the chain's kernel
//!   work done by this process plus tern's and tern-tuning's execs for a VERSION each; the
//!   chain's ADD p50 is reported against it (a reference: the 1.25x target is retired);
//! - peak RSS per invocation, untimed pass: the plugin process alone (`VmHWM` read at its
//!   `PTRACE_EVENT_EXIT` stop, before its address space is torn down, so a child's memory is not
//!   counted) and, separately, host-local invoked directly with the same netconf.
//!
//! Chains, run as libcni runs a conflist (ADD in order with the previous result as
//! `prevResult`, DEL in reverse with the cached result), timed from the first spawn to the last
//! exit: the reference chain (ptp + host-local + tuning), tern + tern-tuning with host-local, and
//! tern + tern-tuning with tern-ipam (which tern runs in-process); also tern alone with tern-ipam.
//! tern-tuning and tern-ipam are taken from the directory holding `--tern`.
//!
//! Pod lookup ("tern+lookup"): tern exactly as the "tern" row, plus `kubernetes.kubeconfig`
//! pointing at the Kubernetes API server stand-in (`tern-apiserver`, HTTPS on loopback inside the
//! host netns, a token it issued); every container ID is registered as pod `default/<cid>` with a
//! fresh UID before its timed region, and every invocation carries `CNI_ARGS` naming it
//! (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`, `K8S_POD_UID`). The lookup cost is its ADD p50 minus
//! tern's; the run fails unless the stand-in saw exactly one GET of each pod per ADD phase. tern
//! makes the GET through `tern-lookup` (its API helper, exec'd from `CNI_PATH`), whose peak RSS
//! the RSS pass measures apart: exec'd directly with the same pod call, for another pod.
//!
//! Tuning plugins alone ("tern-tuning", "tuning"): each exec'd on a pod netns whose
//! `eth0` (a veth pair inside the pod) was made untimed, with the same three sysctls and a
//! `prevResult` naming `eth0`, on ADD and DEL.
//!
//! Invariants: every pod netns is created before, and deleted after, its timed region; each phase
//! starts from an empty host (no pods) and ends with every pod deleted; nothing is written outside
//! the throwaway host netns, the pod netns and a private work dir (host-local `dataDir`, tern
//! `stateDir`), all removed at exit, also on failure. Only `tern_net::netns::NetNs::run_in` enters
//! a namespace: each worker is one such scoped thread, whose children inherit its netns.
//!
//! Usage (root): `tern-bench [--pods N] [--rounds R] [--parallel 1,8] [--rss-samples N] [--tern PATH]
//! [--ptp PATH] [--ref-dir DIR] [--state-dir DIR] [--tern-b PATH] [--no-cri]` (`--tern-b`: a
//! second tern build run beside the first in the same rounds, for an A/B), then the containerd
//! and CRI-O rows ([`host::cri_rows`]; `--no-cri` or `TERN_BENCH_CRI=0` skips them). A run killed
//! midway (Ctrl-C) leaves its netns `tern-bench-<pid>-*`, `/tmp/tern-bench-<pid>` and
//! `/run/tern-bench-<pid>` (a tmpfs where `/run` is not one); remove them by hand: `ip netns del`,
//! `umount`, `rm -r`. Nothing is swept automatically: a name alone cannot tell a dead run from a
//! live one in another PID namespace. `TERN_BENCH_RSS_DETAIL=1` also prints, per sampled process,
//! its anonymous and file-backed resident memory at exit. IPAM data dirs are in the work dir
//! (under the temp dir, on the same filesystem as `/var/lib/cni` on these machines); tern's
//! `stateDir` and the tuning plugins' `dataDir` under `/run` on tmpfs, as their defaults are on a
//! node (the bench mounts a tmpfs there when this host's `/run` is not one). Build the tree first
//! (`cargo build --release --workspace`): the plugins, the agent and the CRI benches are taken
//! from beside this binary.
//!
//! Every bench of the project is a subcommand ([`SUBCOMMANDS`]; a leading `--` is accepted, as
//! the first ones were spelled), and every run prints the machine, its load and the commit first
//! ([`host::header`]): `churn` ([`churn`]: many pods through libcni with random kills, then a
//! leak audit); `libcni` ([`libcni`]: the chains through libcni in one process, as containerd
//! calls them); `ipam` ([`ipam`]: tern-ipam beside host-local); `cri` and `crio` (the CRI rows
//! alone); `reports` ([`reports`]: the verb report's cost); `node-routes` ([`node_routes`]: agents
//! with thousands of Nodes against the stand-in); `trace-check` ([`trace_check`]: what `tern-agent
//! trace` reads of a fleet-size table); `netpol-compile` ([`netpol_compile`]: the NetworkPolicy
//! compiler of one node at fleet scale, incremental beside full); `netpol-cluster`
//! ([`netpol_cluster`]: ClusterNetworkPolicy beside it, change → kernel); `netpol-log`
//! ([`netpol_log`]: what logging denied connections costs); `netpol-memory`, `netpol-change-cost`;
//! `netpol-scale` ([`netpol_scale`]: NetworkPolicy on the real API server with kwok Nodes and
//! many agents) and `scale` ([`scale`]: token refresh and node routes there), both on one bring-up
//! ([`cluster`]); `pod-start` ([`pod_start`]: pod start on the real one-node cluster, tern's
//! deployed chain beside the reference chains).

mod breakdown;
mod churn;
mod cluster;
mod floor;
mod host;
mod ipam;
mod libcni;
mod netpol_change_cost;
mod netpol_cluster;
mod netpol_compile;
mod netpol_log;
mod netpol_memory;
mod netpol_scale;
mod node_routes;
mod pod_start;
mod reports;
mod scale;
mod trace_check;

mod chain;
mod env;
mod exec;
mod kernel;
mod opts;
mod report;
mod rounds;
mod rss;
mod startup;
mod stats;
mod subjects;

use env::Env;
use floor::{exec_floor, files_floor, kernel_floor};
use host::CriRows;
use kernel::bench_kernel_veth;
use opts::{parse_opts, Opts};
use report::report_latencies;
use rounds::{bench_subject, Phase, Row};
use rss::report_rss;
use startup::startup_floor;
use subjects::subjects;

/// Every fallible step of the bench fails with a message for the operator.
pub(crate) type Res<T> = Result<T, String>;

fn run(o: &Opts) -> Res<()> {
    for b in [&o.tern, &o.ptp] {
        if !b.is_file() {
            return Err(format!("{} is missing (cargo build --release -p tern; apt-get install containernetworking-plugins)", b.display()));
        }
    }
    let host_local = o.ref_dir.join("host-local");
    let mut env = Env::new()?;
    if o.breakdown {
        return breakdown::breakdown(o, &mut env);
    }
    let cni_path = o.ref_dir.display().to_string();
    let kubeconfig = env.start_api()?;
    let subs = subjects(o, &env.work, &env.run_work, Some(&kubeconfig));
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
        bench_subject(&mut env, s, 4, 1, "warm")?;
    }
    // Each parallelism runs in rounds, the subjects' order rotating every round, so that load
    // from elsewhere on the machine (drift) falls on all of them alike.
    let rounds = o.rounds.min(o.pods).max(1);
    let mut rows: Vec<Row> = Vec::new();
    let mut floor = Phase::default();
    let mut files = Phase::default();
    let mut execs = Phase::default();
    for &par in &o.parallel {
        let mut kdel = Phase::default();
        let mut kadd = Phase::default();
        let mut floor_done = 0;
        let mut acc: Vec<(Phase, Phase)> = subs.iter().map(|_| Default::default()).collect();
        for r in 0..rounds {
            let n = o.pods / rounds + usize::from(r < o.pods % rounds);
            let (ka, kd) = bench_kernel_veth(&mut env, n, par)?;
            if par == 1 {
                floor.lat.extend(kernel_floor(&mut env, n, floor_done)?.lat);
                files.lat.extend(files_floor(&env, n, floor_done)?.lat);
                execs.lat.extend(exec_floor(&env, &o.tern, n)?.lat);
                floor_done += n;
            }
            kadd.lat.extend(ka.lat);
            kdel.lat.extend(kd.lat);
            kdel.wall += kd.wall;
            for j in 0..subs.len() {
                let i = (j + r) % subs.len();
                let (add, del) = bench_subject(&mut env, &subs[i], n, par, &format!("p{par}r{r}"))?;
                acc[i].0.lat.extend(add.lat);
                acc[i].0.wall += add.wall;
                acc[i].1.lat.extend(del.lat);
                acc[i].1.wall += del.wall;
            }
        }
        let mut kdel = Some(kdel);
        let mut kadd = Some(kadd);
        for (s, (add, del)) in subs.iter().zip(acc) {
            rows.push(Row {
                label: s.label,
                par,
                pods: o.pods,
                add,
                del,
                kdel: kdel.take().unwrap_or_default(),
                kadd: kadd.take().unwrap_or_default(),
            });
        }
    }

    report_latencies(o, &rows, &env);
    report::report_targets(&rows, &floor, &files, &execs);
    startup_floor(o, &env, &rows, &host_local, &cni_path)?;
    report_rss(o, &mut env, &subs, &host_local)
}

/// A subcommand's entry: its arguments in, the exit status out.
type Subcommand = fn(&[String]) -> i32;

/// The subcommands: each takes the arguments after its name (also accepted with a leading
/// `--`, as the first ones were spelled) and returns the exit status.
const SUBCOMMANDS: [(&str, Subcommand); 16] = [
    ("churn", churn_main),
    ("reports", reports::main),
    ("netpol-cluster", netpol_cluster::main),
    ("netpol-compile", netpol_compile::main),
    ("netpol-scale", netpol_scale::main),
    ("netpol-change-cost", netpol_change_cost::main),
    ("netpol-memory", netpol_memory::main),
    ("netpol-log", netpol_log::main),
    ("pod-start", pod_start::main),
    ("scale", scale::main),
    ("node-routes", node_routes::main),
    ("libcni", libcni::main),
    ("ipam", ipam::main),
    ("trace-check", trace_check::main),
    ("cri", |a| cri_main(CriRows::Both, a)),
    ("crio", |a| cri_main(CriRows::Crio, a)),
];

/// The churn, with the libcni driver built and the plugins under test taken from beside this
/// binary (tern_testkit finds them through `TERN_BIN_DIR`).
fn churn_main(args: &[String]) -> i32 {
    if let Err(e) = host::build_cnitool() {
        eprintln!("tern-bench churn: {e}");
        return 1;
    }
    if std::env::var_os("TERN_BIN_DIR").is_none() {
        std::env::set_var("TERN_BIN_DIR", opts::beside_self(""));
    }
    churn::main(args)
}

fn cri_main(which: CriRows, args: &[String]) -> i32 {
    match host::cri_rows(which, args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tern-bench: {e}");
            1
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map_or("", |a| a.trim_start_matches("--"));
    if matches!(name, "help" | "h" | "-h") {
        let names: Vec<&str> = SUBCOMMANDS.iter().map(|(n, _)| *n).collect();
        println!(
            "usage: tern-bench [SUBCOMMAND] [ARGS]: without one, the plugins beside the reference \
             chains (options in docs/BENCHMARKS.md, \"How to run\"); subcommands: {}",
            names.join(", ")
        );
        return;
    }
    println!("{}", host::header());
    if let Some((_, sub)) = SUBCOMMANDS.iter().find(|(n, _)| *n == name) {
        std::process::exit(sub(&args[1..]));
    }
    // The floors are the cheapest way a process does the kernel work: no thread per namespace
    // entry, as the plugins do it (tern_net::netns).
    tern_net::netns::enter_on_calling_thread();
    let code = match parse_opts().and_then(|o| {
        println!("{}", host::binary_sizes(&o.ref_dir));
        run(&o)?;
        if o.cri && !o.breakdown {
            host::cri_rows(CriRows::Both, &[])?;
        }
        Ok(())
    }) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tern-bench: {e}");
            1
        }
    };
    std::process::exit(code);
}

//! `tern-bench pod-start`: on the real one-node cluster of
//! tests/cluster, the time from a pod's creation to the API reporting it Ready, for tern's
//! deployed chain and for the reference chains (ptp + host-local + tuning with the same keepalive
//! sysctls: the current release v1.10, and Debian's 1.1.1), in one run. Every chain does the same
//! work: the reference chains end, as the deployed one does, with the portmap and bandwidth tern
//! installed (v1.10.0, the same capabilities; `--bare-reference` leaves them out, the rows before
//! 2026-12-05).
//!
//! Method: rounds; each round creates one pod per chain, in rotating order, one at a time. A chain
//! is chosen by its conflist: the reference chains' conflists sort before tern's (05-*), and
//! containerd takes the first one; it re-reads the directory on change, which the bench waits for
//! by a probe pod. Timed: from `kubectl create` returning to `kubectl wait --for=condition=Ready`
//! returning (both kubectl start-ups are in every sample of every chain alike). Prints p50 and p90
//! per chain and the ratios. Density (`--density 30,100`): [`density`].
//!
//! Usage (root, after scripts/setup and scripts/build-go, the release binaries built: the tier
//! installs them): `tern-bench pod-start [--pods 30] [--density N[,N...]] [--rounds 1]
//! [--bare-reference]` (`--pods 0`: the density batches alone). The cluster is brought up and
//! tern installed by the tier's own `install` case (`TERN_CLUSTER_KEEP=1`), under
//! /tmp/tern-cluster-bench, and torn down (tests/cluster/lib.sh `down`) at exit.
//!
//! Not a test: exits 0 whatever the figures (non-zero only when the run itself fails).

mod density;
mod kube;

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::stats::pct;
use crate::Res;
use kube::Kube;

/// The chains, in the order round 0 runs them.
const CHAINS: [&str; 3] = ["tern", "v110", "deb"];

fn label(chain: &str) -> &'static str {
    match chain {
        "tern" => "tern (deployed chain)",
        "v110" => "reference v1.10.0",
        _ => "reference Debian 1.1.1",
    }
}

/// Command-line settings.
#[derive(Debug, Default)]
pub(crate) struct Opts {
    pods: usize,
    densities: Vec<usize>,
    rounds: usize,
    bare: bool,
}

fn parse(args: &[String]) -> Res<Opts> {
    let mut o = Opts {
        pods: 30,
        rounds: 1,
        ..Opts::default()
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--bare-reference" {
            o.bare = true;
            continue;
        }
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        let n = |s: &str| s.parse::<usize>().map_err(|e| format!("{a}: {e}"));
        match a.as_str() {
            "--pods" => o.pods = n(v)?,
            "--rounds" => o.rounds = n(v)?,
            "--density" => o.densities = v.split(',').map(n).collect::<Res<_>>()?,
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    Ok(o)
}

/// `tern-bench pod-start ARGS`: the exit code.
pub(crate) fn main(args: &[String]) -> i32 {
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("tern-bench pod-start: {e}");
            return 2;
        }
    };
    let k = match Kube::new() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("tern-bench pod-start: {e}");
            return 1;
        }
    };
    let on_sig = Kube::new().and_then(|k2| crate::cluster::on_signal(move || k2.down()));
    if let Err(e) = on_sig {
        eprintln!("tern-bench pod-start: {e}");
        return 1;
    }
    let r = run(&o, &k);
    k.down();
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tern-bench pod-start: {e}");
            1
        }
    }
}

/// The reference chain REL's conflist: ptp + host-local + tuning of REL on the node's podCIDR,
/// then (unless bare) the deployed chain's own portmap and bandwidth entries.
fn ref_conflist(k: &Kube, rel: &str, cidr: &str, bare: bool) -> Value {
    let mut plugins = vec![
        json!({"type": format!("ptp-{rel}"), "ipMasq": false, "mtu": 1500,
            "ipam": {"type": format!("host-local-{rel}"), "ranges": [[{"subnet": cidr}]],
                "dataDir": k.kt.join(format!("ref-ipam-{rel}")), "routes": [{"dst": "0.0.0.0/0"}]}}),
        json!({"type": format!("tuning-{rel}"), "sysctl": {"net.ipv4.tcp_keepalive_time": "600",
            "net.ipv4.tcp_keepalive_intvl": "60", "net.ipv4.tcp_keepalive_probes": "5"}}),
    ];
    if !bare {
        plugins.extend(tail());
    }
    json!({"cniVersion": "1.0.0", "name": format!("ref-{rel}"), "plugins": plugins})
}

/// The portmap and bandwidth entries every chain ends with.
fn tail() -> [Value; 2] {
    [
        json!({"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}),
        json!({"type": "bandwidth", "capabilities": {"bandwidth": true}}),
    ]
}

/// Makes CHAIN the one new sandboxes get (tern: the deployed 10-tern.conflist), waiting for
/// containerd to switch: a probe pod shows which network it now uses.
fn use_chain(k: &Kube, chain: &str, cidr: &str, bare: bool) -> Res<()> {
    for rel in ["v110", "deb"] {
        let _ = std::fs::remove_file(k.cni_net.join(format!("05-ref-{rel}.conflist")));
    }
    if chain != "tern" {
        let f = k.cni_net.join(format!("05-ref-{chain}.conflist"));
        std::fs::write(&f, ref_conflist(k, chain, cidr, bare).to_string())
            .map_err(|e| format!("{}: {e}", f.display()))?;
    }
    for n in 1..=20 {
        let probe = format!("probe-{n}");
        k.create(&probe, &[])?;
        k.wait_ready(&format!("pod/{probe}"), 60)?;
        let ip = k.kubectl(&["get", "pod", &probe, "-o", "jsonpath={.status.podIP}"])?;
        let got = if chain == "tern" {
            let routes = Command::new("ip")
                .args(["route", "show"])
                .output()
                .map_err(|e| format!("ip route: {e}"))?;
            String::from_utf8_lossy(&routes.stdout)
                .lines()
                .any(|l| l.starts_with(&format!("{ip} dev tern")))
        } else {
            k.kt.join(format!("ref-ipam-{chain}/ref-{chain}/{ip}"))
                .exists()
        };
        k.kubectl(&["delete", "pod", &probe, "--wait=true"])?;
        if got {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(500));
    }
    Err(format!("containerd did not switch to chain {chain}"))
}

/// The reference chains' plugins under names of their own, so both releases sit in one bin dir
/// (listed in KT/created: `down` removes them).
fn install_reference(k: &Kube) -> Res<()> {
    let mut created = String::new();
    for (rel, src) in [
        ("v110", k.gobin.join("plugins")),
        ("deb", "/usr/lib/cni".into()),
    ] {
        for p in ["ptp", "host-local", "tuning"] {
            let to = k.cni_bin.join(format!("{p}-{rel}"));
            std::fs::copy(src.join(p), &to).map_err(|e| format!("{}: {e}", to.display()))?;
            created += &format!("{}\n", to.display());
        }
        created += &format!(
            "{}\n",
            k.cni_net.join(format!("05-ref-{rel}.conflist")).display()
        );
    }
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(k.kt.join("created"))
        .and_then(|mut f| f.write_all(created.as_bytes()))
        .map_err(|e| format!("KT/created: {e}"))
}

/// The deployed conflist's plugin types, and whether its portmap and bandwidth are [`tail`]'s.
fn deployed(k: &Kube) -> Res<(String, bool)> {
    let f = k.cni_net.join("10-tern.conflist");
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?,
    )
    .map_err(|e| format!("{}: {e}", f.display()))?;
    let plugins = v["plugins"].as_array().cloned().unwrap_or_default();
    let types: Vec<&str> = plugins.iter().filter_map(|p| p["type"].as_str()).collect();
    let ends: Vec<Value> = plugins
        .iter()
        .filter(|p| p["type"] == "portmap" || p["type"] == "bandwidth")
        .cloned()
        .collect();
    Ok((types.join(" + "), ends == tail()))
}

fn run(o: &Opts, k: &Kube) -> Res<()> {
    k.up()?;
    install_reference(k)?;
    let cidr = k.kubectl(&["get", "node", &k.node, "-o", "jsonpath={.spec.podCIDR}"])?;
    let (types, same_tail) = deployed(k)?;
    if !o.bare && !same_tail {
        return Err("the deployed conflist's portmap and bandwidth differ from the reference chains' (ref_conflist)".into());
    }
    let legend = format!("chains: tern (deployed chain) = {types};\n        reference REL = ptp + host-local + tuning of REL{}", if o.bare { " (--bare-reference: no portmap, no bandwidth)" } else { " + portmap + bandwidth (v1.10.0, tern's)" });
    if !o.densities.is_empty() {
        density::run(o, k, &cidr, &legend)?;
    }
    if o.pods == 0 {
        return Ok(());
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); CHAINS.len()];
    for r in 0..o.pods {
        for j in 0..CHAINS.len() {
            let i = (r + j) % CHAINS.len();
            let chain = CHAINS[i];
            use_chain(k, chain, &cidr, o.bare)?;
            let name = format!("bench-{chain}-{r}");
            let t0 = Instant::now();
            k.create(&name, &[])?;
            k.wait_ready(&format!("pod/{name}"), 60)
                .map_err(|e| format!("{name} (chain {chain}) not Ready in 60 s: {e}"))?;
            samples[i].push(t0.elapsed().as_secs_f64() * 1000.0);
            k.kubectl(&["delete", "pod", &name, "--wait=true"])?;
        }
    }
    println!("pod start on the real cluster (create -> Ready, ms; {} pods per chain, one at a time; load {})", o.pods, crate::host::load());
    println!("{legend}");
    println!("{:<44} {:>8} {:>8}", "chain", "p50", "p90");
    for (chain, v) in CHAINS.iter().zip(&samples) {
        println!(
            "{:<44} {:>8.1} {:>8.1}",
            label(chain),
            pct(v, 50.0),
            pct(v, 90.0)
        );
    }
    let p50: Vec<f64> = samples.iter().map(|v| pct(v, 50.0)).collect();
    println!(
        "ratio tern/v1.10 p50 {:.2}x, tern/Debian p50 {:.2}x",
        p50[0] / p50[1],
        p50[0] / p50[2]
    );
    println!("(the kubelet sees a started sandbox on its PLEG relist, every 1 s: create -> Ready comes in");
    println!(
        " steps of about a second, which hides the chains' ADD difference; the CRI rows time it)"
    );
    Ok(())
}

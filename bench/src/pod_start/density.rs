//! `tern-bench pod-start --density 30,100`: per size and chain (rotating order), that many pods
//! created in one `kubectl create` and timed until the last is Ready, each pod's Ready stamped
//! on receipt by a pod watch started before (`kubectl get -w`: its create → Ready, p50 / p99 /
//! max), and the kubelet's own histograms over the batch, read through the API server's node
//! proxy before and after: sum / count of
//! `kubelet_runtime_operations_duration_seconds{operation_type="run_podsandbox"}` (the CRI
//! RunPodSandbox, which runs the chain's ADD) and of `kubelet_pod_start_sli_duration_seconds`
//! (the kubelet's pod start SLI): exact means, no bucket rounding. Evented PLEG is not used: the
//! tier keeps the kubelet's default relist, so per-pod Ready comes in relist steps, and the
//! sandbox mean is the figure that shows the chain's share. `--rounds R` repeats the sizes R
//! times, the chains' order rotated by one each round.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::kube::Kube;
use super::{label, use_chain, Opts, CHAINS};
use crate::cluster::api::now;
use crate::cluster::parse_metrics;
use crate::stats::pct;
use crate::Res;

/// Sum and count of histogram NAME over the series whose labels contain `labels`.
fn sum_count(m: &BTreeMap<String, f64>, name: &str, labels: &str) -> (f64, f64) {
    let of = |suffix: &str| -> f64 {
        m.iter()
            .filter(|(k, _)| k.starts_with(&format!("{name}{suffix}")) && k.contains(labels))
            .map(|(_, v)| v)
            .sum()
    };
    (of("_sum"), of("_count"))
}

/// "mean ms (count)" of a histogram between two reads, "-" when nothing was observed.
fn mean(before: (f64, f64), after: (f64, f64)) -> String {
    let n = after.1 - before.1;
    if n > 0.0 {
        format!("{:.1} ({n})", (after.0 - before.0) * 1000.0 / n)
    } else {
        "-".into()
    }
}

fn kubelet_metrics(k: &Kube) -> BTreeMap<String, f64> {
    parse_metrics(
        &k.kubectl(&[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{}/proxy/metrics", k.node),
        ])
        .unwrap_or_default(),
    )
}

/// Pod name → its first Ready, epoch s.
type ReadyAt = Arc<Mutex<BTreeMap<String, f64>>>;

/// Every pod of selector SEL's first Ready, stamped (epoch s) on receipt, from a watch.
fn watch_ready(k: &Kube, sel: &str) -> Res<(std::process::Child, ReadyAt)> {
    let mut child = Command::new(&k.kubectl)
        .arg("--kubeconfig")
        .arg(k.kt.join("pki/admin.kubeconfig"))
        .args([
            "get",
            "pods",
            "-l",
            sel,
            "-w",
            "--output-watch-events",
            "-o",
            "json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("kubectl get -w: {e}"))?;
    let out = child.stdout.take().ok_or("kubectl get -w: no stdout")?;
    let ready = Arc::new(Mutex::new(BTreeMap::new()));
    let into = Arc::clone(&ready);
    thread::spawn(move || {
        for ev in serde_json::Deserializer::from_reader(out)
            .into_iter::<Value>()
            .map_while(Result::ok)
        {
            let t = now();
            let o = &ev["object"];
            let is_ready = o["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            if let (true, Some(name), Ok(mut r)) =
                (is_ready, o["metadata"]["name"].as_str(), into.lock())
            {
                r.entry(name.to_string()).or_insert(t);
            }
        }
    });
    Ok((child, ready))
}

/// CHAIN with N pods at once, round ROUND: one row of figures.
fn batch(k: &Kube, o: &Opts, cidr: &str, chain: &str, n: usize, round: usize) -> Res<()> {
    let sel_v = format!("{chain}-{n}-{round}");
    let sel = format!("density={sel_v}");
    use_chain(k, chain, cidr, o.bare)?;
    let before = kubelet_metrics(k);
    let (mut watcher, ready) = watch_ready(k, &sel)?;
    thread::sleep(Duration::from_secs(1));
    let pods: Vec<Value> = (0..n)
        .map(|i| {
            k.pod(
                &format!("d-{chain}-{n}-{round}-{i}"),
                &[("density", &sel_v)],
            )
        })
        .collect();
    let t0 = now();
    let w0 = Instant::now();
    k.create_all(&pods)?;
    k.wait_ready(&format!("pod -l {sel}"), 600)
        .map_err(|e| format!("density {chain} {n}: not all Ready in 600 s: {e}"))?;
    let all = w0.elapsed().as_secs_f64();
    thread::sleep(Duration::from_secs(2)); // the watch's last events
    let _ = watcher.kill();
    let _ = watcher.wait();
    let after = kubelet_metrics(k);
    let per: Vec<f64> = ready
        .lock()
        .map(|r| r.values().map(|t| (t - t0) * 1000.0).collect())
        .unwrap_or_default();
    let sandbox = "operation_type=\"run_podsandbox\"";
    let sb = mean(
        sum_count(
            &before,
            "kubelet_runtime_operations_duration_seconds",
            sandbox,
        ),
        sum_count(
            &after,
            "kubelet_runtime_operations_duration_seconds",
            sandbox,
        ),
    );
    let sli = mean(
        sum_count(&before, "kubelet_pod_start_sli_duration_seconds", ""),
        sum_count(&after, "kubelet_pod_start_sli_duration_seconds", ""),
    );
    println!(
        "{:<24} {round:>5} {n:>4} {all:>9.2} {:>8.1} {:>8.1} {:>8.1} {:>5} {sb:>12} {sli:>12}",
        label(chain),
        pct(&per, 50.0),
        pct(&per, 99.0),
        pct(&per, 100.0),
        per.len()
    );
    k.kubectl(&["delete", "pod", "-l", &sel, "--wait=true", "--timeout=600s"])
        .map(drop)
}

/// Every size of `--density`, `--rounds` times, the chains rotating.
pub(crate) fn run(o: &Opts, k: &Kube, cidr: &str, legend: &str) -> Res<()> {
    println!(
        "pod start at density (load {}): N pods created in one kubectl create;",
        crate::host::load()
    );
    println!("all Ready: s; each pod create -> Ready (watch) p50 / p99 / max: ms, and pods seen; the kubelet's means over the batch: ms (count):");
    println!("{legend}");
    println!(
        "{:<24} {:>5} {:>4} {:>9} {:>8} {:>8} {:>8} {:>5} {:>12} {:>12}",
        "chain",
        "round",
        "N",
        "all Ready",
        "p50",
        "p99",
        "max",
        "seen",
        "RunPodSandbox",
        "pod start SLI"
    );
    for r in 1..=o.rounds {
        for &n in &o.densities {
            for j in 0..CHAINS.len() {
                batch(k, o, cidr, CHAINS[(n + r - 1 + j) % CHAINS.len()], n, r)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_means_between_reads() {
        let b = parse_metrics("h_sum{operation_type=\"run_podsandbox\"} 1\nh_count{operation_type=\"run_podsandbox\"} 2\nh_sum{operation_type=\"other\"} 9\nh_count{operation_type=\"other\"} 9\n");
        let a = parse_metrics("h_sum{operation_type=\"run_podsandbox\"} 1.5\nh_count{operation_type=\"run_podsandbox\"} 4\n");
        let l = "operation_type=\"run_podsandbox\"";
        assert_eq!(
            mean(sum_count(&b, "h", l), sum_count(&a, "h", l)),
            "250.0 (2)"
        );
        assert_eq!(mean(sum_count(&a, "h", l), sum_count(&a, "h", l)), "-");
    }
}

//! The kube-rs side of the watch-layer comparison: `kube::runtime::watcher` + `reflector` on
//! every Pod, each Pod stripped (`.modify`) to what tern's slim Pod keeps (namespace, name, UID,
//! labels, deletion, node, host network, container ports, phase, addresses), so the two sides
//! hold the same information. Prints `synced N pods` and VmRSS/VmHWM once listed, then keeps
//! watching (printing the count and RSS every 60 s).
//!
//! Usage: watch-compare-kube-rs --kubeconfig PATH

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Api, Client, Config};

fn memory() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .filter(|l| l.starts_with("VmRSS") || l.starts_with("VmHWM"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Keeps what tern's slim Pod keeps.
fn strip(p: &mut Pod) {
    let m = std::mem::take(&mut p.metadata);
    p.metadata = ObjectMeta {
        namespace: m.namespace,
        name: m.name,
        uid: m.uid,
        labels: m.labels,
        deletion_timestamp: m.deletion_timestamp,
        resource_version: m.resource_version,
        ..ObjectMeta::default()
    };
    p.spec = p.spec.take().map(|s| PodSpec {
        node_name: s.node_name,
        host_network: s.host_network,
        containers: s
            .containers
            .into_iter()
            .map(|c| Container {
                name: c.name,
                ports: c.ports,
                ..Container::default()
            })
            .collect(),
        ..PodSpec::default()
    });
    p.status = p.status.take().map(|s| PodStatus {
        phase: s.phase,
        pod_ip: s.pod_ip,
        pod_ips: s.pod_ips,
        ..PodStatus::default()
    });
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = match args.as_slice() {
        [_, flag, path] if flag == "--kubeconfig" => path.clone(),
        _ => return Err("usage: watch-compare-kube-rs --kubeconfig PATH".into()),
    };
    let kubeconfig = Kubeconfig::read_from(path)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let pods: Api<Pod> = Api::all(Client::try_from(config)?);
    let (reader, writer) = reflector::store();
    let started = Instant::now();
    let stream = watcher(pods, watcher::Config::default().page_size(500))
        .default_backoff()
        .modify(strip)
        .reflect(writer);
    futures::pin_mut!(stream);
    let mut last = Instant::now();
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::InitDone) => {
                println!(
                    "synced {} pods in {:.1}s; {}",
                    reader.len(),
                    started.elapsed().as_secs_f64(),
                    memory()
                );
            }
            Ok(_) => {}
            Err(e) => eprintln!("watch error: {e}"),
        }
        if last.elapsed() > Duration::from_secs(60) {
            last = Instant::now();
            println!("{} pods; {}", reader.len(), memory());
        }
    }
    Ok(())
}

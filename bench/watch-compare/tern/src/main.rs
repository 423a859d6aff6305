//! tern's side of the watch-layer comparison: tern-watch's reflector on every Pod, into the
//! agent's slim Pod (`tern_watch::PodObject`). Prints `synced N pods` and VmRSS/VmHWM once
//! listed, then keeps watching (printing the count and RSS every 60 s).
//!
//! Usage: watch-compare-tern --kubeconfig PATH (an https server and a bearer token: tern's client
//! takes no client certificates).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tern_kube::{Client, KubeError};
use tern_watch::kinds::PODS;
use tern_watch::{Api, ClientApi, Consumer, Control, Deadlines, PodObject, Reflector, Relisted};
use tern_watch::{Change, Store};

fn memory() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .filter(|l| l.starts_with("VmRSS") || l.starts_with("VmHWM"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(", ")
}

struct Report {
    started: Instant,
    last: Instant,
}

impl Consumer<PodObject> for Report {
    fn replaced(&mut self, store: &Store<PodObject>, r: &Relisted<PodObject>) {
        if r.first {
            let secs = self.started.elapsed().as_secs_f64();
            println!("synced {} pods in {secs:.1}s; {}", store.len(), memory());
        }
    }
    fn changed(&mut self, store: &Store<PodObject>, _: &Change<PodObject>) {
        if self.last.elapsed() > Duration::from_secs(60) {
            self.last = Instant::now();
            println!("{} pods; {}", store.len(), memory());
        }
    }
}

/// Doubling backoff from 1 s to 30 s; never stops.
struct Backoff;

impl Control for Backoff {
    fn is_stopped(&self) -> bool {
        false
    }
    fn delay(&mut self, failures: &mut u32, e: &KubeError) -> Duration {
        *failures += 1;
        eprintln!("watch error: {e}");
        Duration::from_secs(1u64 << (*failures - 1).min(5)).min(Duration::from_secs(30))
    }
    fn sleep(&self, d: Duration) -> bool {
        std::thread::sleep(d);
        false
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = match args.as_slice() {
        [_, flag, path] if flag == "--kubeconfig" => PathBuf::from(path),
        _ => {
            eprintln!("usage: watch-compare-tern --kubeconfig PATH");
            std::process::exit(2);
        }
    };
    let connect = move || -> Result<Box<dyn Api>, KubeError> {
        let cfg = tern_kube::kubeconfig::load(&path)?;
        Ok(Box::new(ClientApi {
            client: Client::new(&cfg)?,
            deadlines: Deadlines {
                request: Duration::from_secs(60),
                watch: Duration::from_secs(300),
                idle: Duration::from_secs(180),
            },
        }))
    };
    let report = Report {
        started: Instant::now(),
        last: Instant::now(),
    };
    let mut reflector = Reflector::new(PODS, vec![Box::new(report)]);
    reflector.run(&connect, &mut Backoff);
}

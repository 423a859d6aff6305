//! Continuous probes between pods, from threads of the tier's process that enter a pod's
//! network namespace (`setns`): the traffic leaves and enters through the pod's own veth, so
//! the node's NetworkPolicy table judges it as it judges the pod's. The server pod answers TCP
//! (accept) and UDP (echo) on both families; each client probes each (protocol, family) every
//! [`PERIOD`], a new connection or socket each time (so conntrack never carries an old verdict).

use std::fs::File;
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sched::{setns, CloneFlags};
use tern_cluster::{Node, Res};

/// Time between two probes of one pair (4 a second).
pub const PERIOD: Duration = Duration::from_millis(250);
/// A probe's timeout: connect, or the echo's arrival.
const TIMEOUT: Duration = Duration::from_millis(200);
/// The server's TCP port.
pub const TCP_PORT: u16 = 7000;
/// The server's UDP (echo) port.
pub const UDP_PORT: u16 = 7001;

/// A pod's network namespace, opened through its container's host PID, on whichever node it
/// is (node 2's pods too: their netns is reached from this machine the same way).
pub fn pod_netns(node: &Node, pod: &str) -> Res<File> {
    let host = node.host_of(pod)?;
    let pid = node.container_pid(&host, pod, "main")?;
    let path = format!("/proc/{pid}/ns/net");
    File::open(&path).map_err(|e| format!("open {path}: {e}"))
}

/// One probed pair: what was tried and when it answered.
#[derive(Debug)]
pub struct Pair {
    /// `client->server proto family`, for the report.
    pub name: String,
    /// Whether the policy allows it.
    pub allowed: bool,
    /// Probes sent.
    pub tries: u64,
    /// When each answered probe was sent.
    pub answered: Vec<Instant>,
}

impl Pair {
    /// The longest time between two answered probes within `from..to` (its ends included).
    pub fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let mut last = from;
        let mut gap = Duration::ZERO;
        for &t in self.answered.iter().filter(|&&t| t >= from && t <= to) {
            gap = gap.max(t - last);
            last = t;
        }
        gap.max(to.saturating_duration_since(last))
    }
}

/// The running probes; [`Probes::stop`] ends them and returns each pair.
pub struct Probes {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pairs: Vec<Arc<Mutex<Pair>>>,
}

/// Moves the calling thread into `ns` for good: each probe thread lives there for its whole life
/// (NetNs::run_in enters and leaves around one call, which these threads do not need).
#[allow(clippy::disallowed_methods)]
fn enter(ns: &File) -> Result<(), String> {
    setns(ns, CloneFlags::CLONE_NEWNET).map_err(|e| format!("setns: {e}"))
}

/// TCP accept and UDP echo on both families in the server's netns, until `stop`.
fn serve(ns: File, stop: Arc<AtomicBool>) -> Res<Vec<JoinHandle<()>>> {
    let ns2 = ns.try_clone().map_err(|e| e.to_string())?;
    let stop2 = Arc::clone(&stop);
    let tcp = std::thread::spawn(move || {
        let listen = || -> Result<TcpListener, String> {
            enter(&ns)?;
            let l = TcpListener::bind(("::", TCP_PORT)).map_err(|e| e.to_string())?;
            l.set_nonblocking(true).map_err(|e| e.to_string())?;
            Ok(l)
        };
        let Ok(l) = listen().inspect_err(|e| eprintln!("[probes] tcp server: {e}")) else {
            return;
        };
        while !stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => {}
            }
        }
    });
    let udp = std::thread::spawn(move || {
        let bind = || -> Result<UdpSocket, String> {
            enter(&ns2)?;
            let s = UdpSocket::bind(("::", UDP_PORT)).map_err(|e| e.to_string())?;
            s.set_read_timeout(Some(Duration::from_millis(50)))
                .map_err(|e| e.to_string())?;
            Ok(s)
        };
        let Ok(s) = bind().inspect_err(|e| eprintln!("[probes] udp server: {e}")) else {
            return;
        };
        let mut buf = [0u8; 64];
        while !stop2.load(Ordering::Relaxed) {
            if let Ok((n, from)) = s.recv_from(&mut buf) {
                let _ = s.send_to(&buf[..n], from);
            }
        }
    });
    Ok(vec![tcp, udp])
}

/// One probe: true when it answered.
fn probe(udp: bool, to: SocketAddr, seq: u64) -> bool {
    if !udp {
        return TcpStream::connect_timeout(&to, TIMEOUT).is_ok();
    }
    let local: SocketAddr = match to.ip() {
        IpAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
        IpAddr::V6(_) => ([0u16; 8], 0).into(),
    };
    let Ok(s) = UdpSocket::bind(local) else {
        return false;
    };
    let sent =
        s.set_read_timeout(Some(TIMEOUT)).is_ok() && s.send_to(&seq.to_be_bytes(), to).is_ok();
    let mut buf = [0u8; 16];
    sent && s
        .recv(&mut buf)
        .is_ok_and(|n| buf[..n] == seq.to_be_bytes())
}

/// A client's thread probing `to` over one protocol until `stop`.
fn client(
    ns: File,
    udp: bool,
    to: SocketAddr,
    pair: Arc<Mutex<Pair>>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        if let Err(e) = enter(&ns) {
            eprintln!("[probes] client: {e}");
            return;
        }
        let mut seq = 0u64;
        let mut next = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let sent = Instant::now();
            seq += 1;
            let ok = probe(udp, to, seq);
            if let Ok(mut p) = pair.lock() {
                p.tries += 1;
                if ok {
                    p.answered.push(sent);
                }
            }
            next += PERIOD;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    })
}

impl Probes {
    /// Starts the server in `server`'s netns and, from each `(client pod, allowed)`, one probe
    /// per protocol and per address of the server.
    pub fn start(node: &Node, server: &str, clients: &[(&str, bool)]) -> Res<Probes> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = serve(pod_netns(node, server)?, Arc::clone(&stop))?;
        let mut pairs = Vec::new();
        let addrs = node.pod_ips(server)?;
        for &(c, allowed) in clients {
            let ns = pod_netns(node, c)?;
            for ip in &addrs {
                for udp in [false, true] {
                    let (proto, port) = if udp {
                        ("udp", UDP_PORT)
                    } else {
                        ("tcp", TCP_PORT)
                    };
                    let family = if ip.is_ipv4() { "v4" } else { "v6" };
                    let pair = Arc::new(Mutex::new(Pair {
                        name: format!("{c}->{server} {proto} {family}"),
                        allowed,
                        tries: 0,
                        answered: Vec::new(),
                    }));
                    let ns = ns.try_clone().map_err(|e| e.to_string())?;
                    let to = SocketAddr::new(*ip, port);
                    threads.push(client(ns, udp, to, Arc::clone(&pair), Arc::clone(&stop)));
                    pairs.push(pair);
                }
            }
        }
        Ok(Probes {
            stop,
            threads,
            pairs,
        })
    }

    /// Ends every thread and returns the pairs.
    pub fn stop(self) -> Vec<Pair> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        self.pairs
            .into_iter()
            .filter_map(|p| Arc::try_unwrap(p).ok().and_then(|m| m.into_inner().ok()))
            .collect()
    }
}

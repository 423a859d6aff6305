//! `tern-bench --netpol-log`: what logging denied connections (`--network-policy-log-denied`)
//! costs, each figure beside the same run without it, as a ratio.
//!
//! A "node" netns with three pods wired as tern wires them (`web` listening on TCP 80, `ok` and
//! `bad`), `web` isolated by a policy that allows `ok` on 80: `ok → web` is an allowed pair, `bad →
//! web` a denied one. The table is compiled by `tern_netpol` and replaced in the node netns with
//! logging off, on at the default rate, or on with a rate no flood reaches (every denied packet
//! logged), the agent's reader (`DeniedReader`) draining the group meanwhile as the agent does.
//! Rounds alternate the three tables, so a neighbour's load on this shared machine falls on each.
//!
//! Measured per round (medians over rounds printed):
//! - allowed: TCP connects per second, `ok → web` (handshake and a reset; the per-pod chain's
//!   accept rule ends before the log rule, so this should not move);
//! - denied: non-blocking connects per second, `bad → web`, each one SYN through the forward
//!   hook to the chain's drop (what the log rule adds to: `ct state new`, the shared limit, and
//!   when under it the copy to nfnetlink_log);
//! - ADD: the engine's flush of one new isolated pod (what an admission waits for), µs, in process.
//!
//! Usage (root): `tern-bench --netpol-log [--rounds R] [--connects N] [--syns N]`.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::socket::sockopt::Linger;
use nix::sys::socket::{
    connect, setsockopt, socket, AddressFamily, SockFlag, SockType, SockaddrIn,
};
use serde_json::json;
use tern_agent::netpol::denied::DeniedReader;
use tern_net::netns::NetNs;
use tern_net::nft::Nft;
use tern_netpol::model::{pod_from_json, policy_from_json, Pod};
use tern_netpol::ruleset::LogDenied;
use tern_netpol::Engine;
use tern_testkit::netns::TestNetns;

const GROUP: u16 = 4391;
const WEB: &str = "10.0.1.2";

struct Opts {
    rounds: usize,
    connects: usize,
    syns: usize,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        rounds: 5,
        connects: 2000,
        syns: 20_000,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let n: usize = v.parse().map_err(|e| format!("{flag} {v}: {e}"))?;
        match flag.as_str() {
            "--rounds" => o.rounds = n.max(1),
            "--connects" => o.connects = n.max(1),
            "--syns" => o.syns = n.max(1),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(o)
}

fn pod(name: &str, ip: &str) -> Pod {
    let obj = json!({"metadata": {"namespace": "b", "name": name, "labels": {"app": name}},
        "spec": {"nodeName": "n1"}, "status": {"podIPs": [{"ip": ip}]}});
    pod_from_json(&obj).unwrap_or_else(|e| panic!("{e}"))
}

/// The engine of the node with logging as `log` says, flushed.
fn engine(log: Option<LogDenied>) -> Engine<Pod> {
    let mut e = Engine::new("n1").logging(log);
    for p in [
        pod("web", WEB),
        pod("ok", "10.0.1.3"),
        pod("bad", "10.0.1.4"),
    ] {
        e.set_pod(&format!("b/{}", p.name), Some(Arc::new(p)));
    }
    let spec = json!({"podSelector": {"matchLabels": {"app": "web"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "ok"}}}], "ports": [{"port": 80}]}]});
    let p = policy_from_json(&json!({"metadata": {"namespace": "b", "name": "web"}, "spec": spec}))
        .unwrap_or_else(|e| panic!("{e}"));
    e.set_policy("b/web", Some(Arc::new(p)));
    e.flush();
    e
}

/// The µs of one flush that places a new pod `web`'s twin (an admission), median of 200.
fn add_flush_us(log: Option<LogDenied>) -> f64 {
    let mut e = engine(log);
    let mut t: Vec<f64> = (0..200)
        .map(|i| {
            let ip = format!("10.0.2.{}", i % 250 + 1);
            let p = pod(&format!("web{i}"), &ip);
            let p = Pod {
                labels: pod("web", WEB).labels,
                ..p
            };
            let start = Instant::now();
            e.set_pod(&format!("b/web{i}"), Some(Arc::new(p)));
            let f = e.flush();
            assert!(!f.script.is_empty());
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    median(&mut t)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

struct Node {
    node: TestNetns,
    ok: TestNetns,
    bad: TestNetns,
    _web: TestNetns,
}

fn wire() -> Node {
    let node = TestNetns::new("tbl-n");
    node.set_sysctl("net/ipv4/ip_forward", "1");
    let (web, ok, bad) = (
        TestNetns::new("tbl-w"),
        TestNetns::new("tbl-o"),
        TestNetns::new("tbl-b"),
    );
    node.wire_routed_pod(&web, "hweb", WEB, "fd00:1::2");
    node.wire_routed_pod(&ok, "hok", "10.0.1.3", "fd00:1::3");
    node.wire_routed_pod(&bad, "hbad", "10.0.1.4", "fd00:1::4");
    let listener = NetNs::open(web.path())
        .and_then(|n| n.run_in(|| TcpListener::bind((WEB, 80))))
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    std::thread::spawn(move || listener.incoming().for_each(drop));
    Node {
        node,
        ok,
        bad,
        _web: web,
    }
}

fn apply(n: &Node, nft: &Nft, log: Option<LogDenied>) {
    let script = engine(log).table().replace_script();
    NetNs::open(n.node.path())
        .and_then(|ns| ns.run_in(|| nft.apply(&script)))
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Allowed connects per second, `ok → web`.
fn allowed_rate(n: &Node, count: usize) -> f64 {
    let to = SocketAddr::new(WEB.parse().unwrap_or_else(|_| unreachable!()), 80);
    let ns = NetNs::open(n.ok.path()).unwrap_or_else(|e| panic!("{e}"));
    ns.run_in(|| {
        let start = Instant::now();
        for _ in 0..count {
            let s = TcpStream::connect_timeout(&to, Duration::from_secs(2))
                .unwrap_or_else(|e| panic!("ok → web must connect: {e}"));
            // Closed with a reset: no TIME_WAIT, so a long run does not run out of ports.
            let _ = setsockopt(&s, Linger, &libc_linger_zero());
        }
        count as f64 / start.elapsed().as_secs_f64()
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

fn libc_linger_zero() -> nix::libc::linger {
    nix::libc::linger {
        l_onoff: 1,
        l_linger: 0,
    }
}

/// Denied SYNs per second, `bad → web` (non-blocking connects, closed at once).
fn denied_rate(n: &Node, count: usize) -> f64 {
    let ns = NetNs::open(n.bad.path()).unwrap_or_else(|e| panic!("{e}"));
    ns.run_in(|| {
        let to = SockaddrIn::new(10, 0, 1, 2, 80);
        let start = Instant::now();
        for _ in 0..count {
            let fd = socket(
                AddressFamily::Inet,
                SockType::Stream,
                SockFlag::SOCK_NONBLOCK,
                None,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let _ = connect(fd.as_raw_fd(), &to);
        }
        count as f64 / start.elapsed().as_secs_f64()
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Reads the group in the node netns until `stop`; returns the packets read.
fn drain(n: &Node, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let ns = NetNs::open(n.node.path()).unwrap_or_else(|e| panic!("{e}"));
    let mut reader = ns
        .run_in(|| DeniedReader::bind(GROUP))
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|e| panic!("{e}"));
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let _ = reader.receive();
        }
        reader.stats.packets
    })
}

const MODES: [(&str, Option<LogDenied>); 3] = [
    ("off", None),
    (
        "on, 100/s",
        Some(LogDenied {
            group: GROUP,
            rate: 100,
        }),
    ),
    (
        "on, every packet",
        Some(LogDenied {
            group: GROUP,
            rate: 100_000,
        }),
    ),
];

/// Entry point; the exit code.
pub fn main(args: &[String]) -> i32 {
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("tern-bench --netpol-log: {e}");
            return 2;
        }
    };
    let nft = match Nft::find() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("tern-bench --netpol-log: {e}");
            return 1;
        }
    };
    let n = wire();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = drain(&n, Arc::clone(&stop));
    let mut allowed: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    let mut denied: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    for r in 0..o.rounds {
        for k in 0..MODES.len() {
            let i = (k + r) % MODES.len();
            apply(&n, &nft, MODES[i].1);
            allowed[i].push(allowed_rate(&n, o.connects));
            denied[i].push(denied_rate(&n, o.syns));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let logged = reader.join().unwrap_or(0);
    let add: Vec<f64> = MODES.iter().map(|(_, l)| add_flush_us(*l)).collect();
    println!(
        "netpol-log: {} rounds, {} allowed connects and {} denied SYNs per round and mode; {logged} packets logged in all",
        o.rounds, o.connects, o.syns
    );
    println!(
        "{:<18} {:>16} {:>8} {:>16} {:>8} {:>12} {:>8}",
        "mode", "allowed conn/s", "ratio", "denied SYN/s", "ratio", "ADD flush µs", "ratio"
    );
    let (a0, d0) = (median(&mut allowed[0]), median(&mut denied[0]));
    for (i, (label, _)) in MODES.iter().enumerate() {
        let (a, d) = (median(&mut allowed[i]), median(&mut denied[i]));
        println!(
            "{label:<18} {a:>16.0} {:>8.3} {d:>16.0} {:>8.3} {:>12.1} {:>8.3}",
            a / a0,
            d / d0,
            add[i],
            add[i] / add[0]
        );
    }
    0
}

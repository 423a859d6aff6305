//! Denied connections logged, in a real kernel: a "node" netns with two pods wired as tern wires
//! them (`cli` and `web`, a listener on 80 and 81 in `web`), the NetworkPolicy table compiled
//! with logging on (`Engine::logging`) applied there, and tern-agent's reader
//! (`netpol::denied::DeniedReader`) bound to the log group in the node netns, as the agent binds
//! it in the host's. A connect that a policy denies fails, and the reader receives its first
//! packet and names both pods, the port and the policy; an allowed connect logs nothing; a flood
//! of 10,000 SYNs logs at most what the kernel's limit lets through. Needs root and nft.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
use serde_json::json;
use tern_agent::netpol::denied::{describe, DeniedFlow, DeniedReader, End, Logged};
use tern_net::netns::NetNs;
use tern_net::nft::Nft;
use tern_netpol::compile::Dir;
use tern_netpol::model::{pod_from_json, policy_from_json, Pod};
use tern_netpol::ruleset::LogDenied;
use tern_netpol::Engine;
use tern_testkit::netns::TestNetns;

struct Node {
    node: TestNetns,
    cli: TestNetns,
    web: TestNetns,
    engine: Engine<Pod>,
}

const WEB: &str = "10.0.1.2";
const CLI: &str = "10.0.1.3";

fn pod(name: &str, ip: &str) -> Pod {
    pod_from_json(
        &json!({"metadata": {"namespace": "shop", "name": name, "labels": {"app": name}},
        "spec": {"nodeName": "n1"}, "status": {"podIPs": [{"ip": ip}]}}),
    )
    .unwrap()
}

impl Node {
    /// The node, its two pods, the policies (`shop/web-81`: web takes port 81 from cli;
    /// `shop/deny-all` isolates web for ingress) and the table applied with `log`.
    fn new(stem: &str, log: LogDenied) -> Node {
        let node = TestNetns::new(&format!("{stem}-n"));
        node.set_sysctl("net/ipv4/ip_forward", "1");
        let (web, cli) = (
            TestNetns::new(&format!("{stem}-w")),
            TestNetns::new(&format!("{stem}-c")),
        );
        node.wire_routed_pod(&web, "hweb", WEB, "fd00:1::2");
        node.wire_routed_pod(&cli, "hcli", CLI, "fd00:1::3");
        let netns = NetNs::open(web.path()).unwrap();
        for port in [80, 81] {
            let l = netns
                .run_in(|| TcpListener::bind((WEB, port)))
                .unwrap()
                .unwrap();
            std::thread::spawn(move || l.incoming().for_each(drop));
        }
        let mut engine = Engine::new("n1").logging(Some(log));
        for p in [pod("web", WEB), pod("cli", CLI)] {
            engine.set_pod(&format!("shop/{}", p.name), Some(Arc::new(p)));
        }
        for (name, spec) in [
            (
                "deny-all",
                json!({"podSelector": {"matchLabels": {"app": "web"}}}),
            ),
            (
                "web-81",
                json!({"podSelector": {"matchLabels": {"app": "web"}},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}], "ports": [{"port": 81}]}]}),
            ),
        ] {
            let p = policy_from_json(
                &json!({"metadata": {"namespace": "shop", "name": name}, "spec": spec}),
            )
            .unwrap();
            engine.set_policy(&format!("shop/{name}"), Some(Arc::new(p)));
        }
        engine.flush();
        let script = engine.table().replace_script();
        let n = NetNs::open(node.path()).unwrap();
        n.run_in(|| Nft::find().unwrap().apply(&script))
            .unwrap()
            .unwrap_or_else(|e| panic!("{e}\n{script}"));
        Node {
            node,
            cli,
            web,
            engine,
        }
    }

    fn reader(&self, group: u16) -> DeniedReader {
        let n = NetNs::open(self.node.path()).unwrap();
        n.run_in(|| DeniedReader::bind(group)).unwrap().unwrap()
    }

    fn connects(&self, port: u16, limit: Duration) -> bool {
        let ns = NetNs::open(self.cli.path()).unwrap();
        let to = SocketAddr::new(WEB.parse().unwrap(), port);
        ns.run_in(|| TcpStream::connect_timeout(&to, limit).is_ok())
            .unwrap()
    }
}

/// Receives for `over`, returning every new flow named by the engine.
fn collect(r: &mut DeniedReader, e: &Engine<Pod>, over: Duration) -> Vec<DeniedFlow> {
    let end = Instant::now() + over;
    let mut out = Vec::new();
    while Instant::now() < end {
        let batch: Vec<Logged> = r.receive().unwrap();
        out.extend(batch.into_iter().map(|l| describe(e, l)));
    }
    out
}

#[test]
fn a_denied_connect_is_logged_with_its_pods_port_and_policy() {
    if tern_testkit::root::skip() {
        return;
    }
    let group = 4301;
    let n = Node::new("nfl", LogDenied { group, rate: 100 });
    let mut reader = n.reader(group);
    assert!(n.connects(81, Duration::from_secs(3)), "81 is allowed");
    assert!(!n.connects(80, Duration::from_millis(1500)), "80 is denied");
    let flows = collect(&mut reader, &n.engine, Duration::from_millis(700));
    assert_eq!(
        flows.len(),
        1,
        "one flow, its SYN retries folded: {flows:?}"
    );
    let f = &flows[0];
    assert_eq!(f.from, End::Pod("shop/cli".into()));
    assert_eq!(f.to, End::Pod("shop/web".into()));
    assert_eq!(f.logged.direction, Dir::Ingress);
    assert_eq!(
        (f.logged.flow.protocol_name(), f.logged.flow.dst_port),
        ("TCP".into(), Some(80))
    );
    assert_eq!(f.policies, ["shop/deny-all", "shop/web-81"]);
    assert!(
        reader.stats.packets >= 2,
        "the SYN and a retry: {:?}",
        reader.stats
    );
    assert_eq!(reader.stats.repeats, reader.stats.packets - 1);
    // One listener per group and netns: a second agent is told who holds it.
    let n2 = NetNs::open(n.node.path()).unwrap();
    let again = n2.run_in(|| DeniedReader::bind(group)).unwrap();
    assert_eq!(
        again.unwrap_err().errno(),
        Some(nix::errno::Errno::EPERM as i32)
    );
    drop(n.web);
}

/// 10,000 SYNs from distinct ports, each the first packet of a denied connection, sent as fast
/// as the client can (non-blocking connects, closed at once): the reader gets at most the
/// limit's burst plus its rate over the flood's time.
#[test]
fn a_flood_of_denied_syns_logs_at_most_the_rate_limit() {
    if tern_testkit::root::skip() {
        return;
    }
    let (group, rate) = (4302, 50);
    let n = Node::new("nff", LogDenied { group, rate });
    let mut reader = n.reader(group);
    let ns = NetNs::open(n.cli.path()).unwrap();
    let started = Instant::now();
    let sent = ns
        .run_in(|| {
            let to = SockaddrIn::new(10, 0, 1, 2, 80);
            let mut sent = 0;
            for _ in 0..10_000 {
                let fd = socket(
                    AddressFamily::Inet,
                    SockType::Stream,
                    SockFlag::SOCK_NONBLOCK,
                    None,
                )
                .unwrap();
                if connect(fd.as_raw_fd(), &to).err() == Some(nix::errno::Errno::EINPROGRESS) {
                    sent += 1;
                }
            }
            sent
        })
        .unwrap();
    let flood = started.elapsed();
    let flows = collect(&mut reader, &n.engine, Duration::from_millis(600));
    let bound = u64::from(rate) + (u64::from(rate) as f64 * (flood.as_secs_f64() + 0.8)) as u64;
    let got = reader.stats.packets;
    println!(
        "{sent} SYNs in {flood:?}: {got} logged, {} flows; bound {bound}",
        flows.len()
    );
    assert_eq!(sent, 10_000);
    assert!(got <= bound, "{got} logged > {bound}");
    assert!(got >= u64::from(rate) / 2, "the burst was logged: {got}");
    assert_eq!(reader.stats.overflows, 0);
    assert!(flows
        .iter()
        .all(|f| f.policies == ["shop/deny-all", "shop/web-81"]));
}

//! tern without Kubernetes under nerdctl (containerd's own CLI, v2.2.0 built by scripts/build-go)
//! on a private containerd 2, as the README's "Use tern without Kubernetes" shows it: `nerdctl run
//! --net tern` on `cni-conf-examples/10-tern.conflist` (the file the release tarball ships, with
//! this test's range and data dirs), tern + host-local + tern-tuning, the busybox image of
//! `tern-xtask image --busybox` brought in with `nerdctl load` (no registry is reachable).
//!
//! What it proves: nerdctl's OCI hook runs tern's ADD (a /32 in the range, the default route via
//! 169.254.1.1, tern-tuning's keepalive sysctl, a host route through a tern veth, a host-local
//! lease and a tern state file: the testkit's node audit); a container reaches a TCP listener of
//! the host and another container over TCP, without NAT; `nerdctl rm -f` runs DEL and leaves no
//! host veth, no host route into the range, no lease, no tern state, no libcni result cache entry
//! and no container.
//!
//! Invariants: the fixture's (`nerdctl_fixture`): everything under `/tmp/tern-nerdctl-<pid>`, the
//! range 10.99.208.0/24, a drop guard that removes what a failed run left. Runs with the
//! host-tests lock like the CRI tier (`flock -o /run/tern-host-tests.lock`): it changes the root
//! netns. Needs root, containerd 2 and nerdctl from `scripts/build-go`, runc, busybox-static and
//! the release binaries: fails (never skips) without.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod nerdctl_fixture;

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nerdctl_fixture::*;
use tern_testkit::exec::workspace_root;
use tern_testkit::node::NodeAudit;

/// Port of the TCP server inside container `a`.
const POD_PORT: u16 = 8080;
/// Where container a's server appends what it receives (inside a).
const RECEIVED: &str = "/tmp/received";
/// The containers' names (nerdctl wants at least two characters).
const A: &str = "tern-a";
const B: &str = "tern-b";

#[test]
fn nerdctl_run_net_tern_two_containers_and_rm_leaves_nothing() {
    if tern_testkit::root::skip() {
        return;
    }
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "the nerdctl test needs root"
    );
    assert!(
        host_routes_into_subnet().is_empty(),
        "{SUBNET} is already routed on this host: {:?}",
        host_routes_into_subnet()
    );
    let t0 = Instant::now();
    let n = Nerdctl::start(&workspace_root().join("cni-conf-examples/10-tern.conflist"));
    n.load_busybox();
    let nets = n.ok(&["network", "ls", "--format", "{{.Name}}"]);
    assert!(
        nets.lines().any(|l| l == NETWORK),
        "nerdctl does not see the conflist's network: {nets}"
    );
    let audit = NodeAudit {
        lease_dir: n.dir.join("ipam").join(NETWORK),
        state_dir: n.dir.join("state"),
    };
    let cgroup_parent = n.cgroup_parent();
    let run_args = |name: &'static str, detach: bool, script: String| {
        let mut args: Vec<String> = vec!["run".into()];
        if detach {
            args.push("--detach".into());
        }
        for a in [
            "--name",
            name,
            "--net",
            NETWORK,
            "--cgroup-parent",
            &cgroup_parent,
            "--entrypoint",
            "/bin/sh",
            IMAGE,
            "-c",
            &script,
        ] {
            args.push(a.to_owned());
        }
        args
    };

    // Container a: a TCP server that answers "pong-from-a" to each connection; what it receives
    // goes to a file of its own.
    let a = run_args(
        A,
        true,
        format!("while true; do echo pong-from-a | nc -l -p {POD_PORT} >>{RECEIVED}; done"),
    );
    n.ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let ip_a = n.ip_of(A);
    assert!(
        ip_a.to_string().starts_with(SUBNET_PREFIX),
        "a's address {ip_a} is not in {SUBNET}"
    );
    let addrs = n.ok(&["exec", A, "ip", "-4", "-o", "addr", "show", "dev", "eth0"]);
    assert!(
        addrs.contains(&format!("inet {ip_a}/32")),
        "a's eth0 lacks {ip_a}/32: {addrs}"
    );
    let routes = n.ok(&["exec", A, "ip", "-4", "route"]);
    assert!(
        routes
            .lines()
            .any(|l| l.starts_with("default via 169.254.1.1 dev eth0")),
        "a has no default route via 169.254.1.1: {routes}"
    );
    let ka = n.ok(&["exec", A, "cat", "/proc/sys/net/ipv4/tcp_keepalive_time"]);
    assert_eq!(
        ka.trim(),
        "600",
        "tern-tuning did not set tcp_keepalive_time"
    );

    // On the host: the node audit finds a's route, lease and state; the route is a tern veth's.
    let ip_a_any = IpAddr::V4(ip_a);
    let missing = audit.missing(ip_a_any);
    assert!(missing.is_empty(), "a is running but: {missing:?}");
    let routes_a: Vec<_> = host_routes_into_subnet()
        .into_iter()
        .filter(|(_, dst)| dst == &ip_a.to_string())
        .collect();
    assert_eq!(routes_a.len(), 1, "host routes to {ip_a}: {routes_a:?}");
    let veth_a = routes_a[0].0.clone();
    assert!(
        veth_a.starts_with("tern") && veth_a.len() == 15 && host_link_exists(&veth_a),
        "host route to {ip_a} goes via {veth_a:?}, not a tern veth"
    );

    // Container b: reaches a TCP listener of the host, then container a.
    let host_ip = host_address();
    let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        if let Ok((mut conn, peer)) = listener.accept() {
            let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
            let mut got = String::new();
            let _ = conn.read_to_string(&mut got);
            let _ = tx.send((peer.ip(), got));
        }
    });
    let b = run_args(
        B,
        false,
        format!(
            "echo hello-host | nc -w 5 {host_ip} {port} && echo ping-from-b | nc -w 5 {ip_a} {POD_PORT}"
        ),
    );
    let out_b = n.ok(&b.iter().map(String::as_str).collect::<Vec<_>>());
    let (peer, got) = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("container b never reached the host at {host_ip}:{port}"));
    assert_eq!(got.trim(), "hello-host", "host listener got {got:?}");
    // b's address, as the host saw it: a pod address other than a's (no NAT on the way).
    assert!(
        peer.to_string().starts_with(SUBNET_PREFIX) && peer != ip_a_any,
        "host saw the connection from {peer}, not from a pod address of b"
    );
    assert!(
        out_b.contains("pong-from-a"),
        "b did not get a's answer over TCP: {out_b:?}"
    );
    let cat = format!("cat {RECEIVED} 2>/dev/null; true");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got_a = n.ok(&["exec", A, "sh", "-c", &cat]);
    while !got_a.contains("ping-from-b") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        got_a = n.ok(&["exec", A, "sh", "-c", &cat]);
    }
    assert!(
        got_a.contains("ping-from-b"),
        "a did not receive b's message: {got_a:?}"
    );

    // nerdctl rm -f: nothing of either container is left (b exited; its DEL ran at rm too).
    let ids = [n.container_id(A), n.container_id(B)];
    n.ok(&["rm", "--force", A, B]);
    assert!(
        !host_link_exists(&veth_a),
        "host veth {veth_a} survived nerdctl rm"
    );
    let left = audit.leftovers(ip_a_any);
    assert!(left.is_empty(), "after nerdctl rm: {left:?}");
    let left_b = audit.leftovers(peer);
    assert!(left_b.is_empty(), "after nerdctl rm, of b: {left_b:?}");
    let left_routes = host_routes_into_subnet();
    assert!(
        left_routes.is_empty(),
        "host routes into {SUBNET} survived nerdctl rm: {left_routes:?}"
    );
    let leases: Vec<_> = std::fs::read_dir(&audit.lease_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.parse::<IpAddr>().is_ok())
        .collect();
    assert!(leases.is_empty(), "leases survived nerdctl rm: {leases:?}");
    let cached = tern_testkit::exec::cni_cache_entries_of(&ids);
    assert!(
        cached.is_empty(),
        "libcni result cache entries survived nerdctl rm: {cached:?}"
    );
    let ps = n.ok(&["ps", "--all", "--quiet"]);
    assert!(ps.trim().is_empty(), "containers left: {ps}");
    eprintln!("nerdctl test body: {:.1}s", t0.elapsed().as_secs_f64());
}

//! tern under a real runtime: podman 4.3 with its CNI backend (`network_backend = "cni"`), runc and
//! a busybox image this test builds itself, on the network of `cni-conf-examples/10-tern.conflist`
//! (tern + host-local, plus tern-tuning when `tern-tuning` (beside tern) is built and answers
//! VERSION; otherwise the test says so on stderr and runs without it).
//!
//! What it proves: a container gets a /32 from the range with a default route via 169.254.1.1;
//! it reaches a TCP listener of the host (on the address the host itself uses towards 169.254.1.1,
//! so the path is pod → host veth → local delivery, and the reply goes back through the pod's /32
//! host route) and another container over TCP; `podman rm -f` leaves no host veth, no host route
//! into the range, no host-local lease, no tern state file and no libcni result cache entry.
//!
//! Invariants:
//! - Runs in the machine's root netns (podman needs it) and, like ptp, tern enables `ip_forward`
//!   and proxy ARP there: accepted. Everything else is private to one temp dir: podman's
//!   containers.conf (`CONTAINERS_CONF`), storage (`--root`, `--runroot`, vfs driver), tmp dir,
//!   CNI config dir and plugin dir (tern + Debian's `/usr/lib/cni`), host-local `dataDir` and
//!   tern's `stateDir`. `podman import` runs in a private mount namespace with a tmpfs on
//!   `/var/lib`, so containers/image's blob-info cache does not land in the machine's
//!   `/var/lib/containers`. The one shared path is libcni's result cache (`/var/lib/cni/results`,
//!   not configurable in podman 4.3), whose entries for our containers must be gone after `rm`.
//! - The range is 10.99.201.0/24 (nothing else on this machine uses it); cleanup on any failure
//!   (drop guard) removes the containers, host links routed into that range, mounts under the
//!   temp dir, and the temp dir.
//! - Facts of these machines: crun refuses this kernel's cgroup mode and the default rlimits, so
//!   the test uses `--runtime runc --cgroup-manager cgroupfs` and `default_ulimits = []`.
//!
//! Needs root, podman, runc, busybox-static and the release binaries: fails (never skips) without.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod podman_fixture;

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use podman_fixture::*;

#[test]
fn podman_cni_backend_runs_containers_on_tern() {
    if tern_testkit::root::skip() {
        return;
    }
    let uid = run(Command::new("id").arg("-u"));
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "the podman test needs root"
    );
    let pm = Podman::new();
    assert!(
        host_routes_into_subnet().is_empty(),
        "{SUBNET} is already routed on this host: {:?}",
        host_routes_into_subnet()
    );
    pm.import_busybox();
    let nets = pm.ok(&["network", "ls", "--format", "{{.Name}}"]);
    assert!(
        nets.lines().any(|l| l == NETWORK),
        "podman does not see the conflist: {nets}"
    );

    // Container a: a TCP server that answers "pong-from-a" to each connection, kept running; what
    // it receives goes to a file of its own (nc writes it as it reads; the container log would be
    // conmon's asynchronous copy, whose timing the test does not control).
    pm.ok(&[
        "run",
        "--detach",
        "--name",
        "a",
        "--network",
        NETWORK,
        IMAGE,
        "sh",
        "-c",
        &format!("while true; do echo pong-from-a | nc -l -p {POD_PORT} >>{RECEIVED}; done"),
    ]);
    let ip_a = pm.ip_of("a");
    assert!(
        ip_a.to_string().starts_with(SUBNET_PREFIX),
        "a's address {ip_a} is not in {SUBNET}"
    );

    // Inside a: the /32, the default route via the link-local gateway.
    let addrs = pm.ok(&["exec", "a", "ip", "-4", "-o", "addr", "show", "dev", "eth0"]);
    assert!(
        addrs.contains(&format!("inet {ip_a}/32")),
        "a's eth0 lacks {ip_a}/32: {addrs}"
    );
    let routes = pm.ok(&["exec", "a", "ip", "-4", "route"]);
    assert!(
        routes
            .lines()
            .any(|l| l.starts_with("default via 169.254.1.1 dev eth0")),
        "a has no default route via 169.254.1.1: {routes}"
    );
    if pm.tuning {
        let ka = pm.ok(&["exec", "a", "cat", "/proc/sys/net/ipv4/tcp_keepalive_time"]);
        assert_eq!(
            ka.trim(),
            "600",
            "tern-tuning did not set tcp_keepalive_time"
        );
    }

    // On the host: a /32 route to a through a tern veth, a lease, a state file.
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
    assert!(
        pm.leases().contains(&ip_a.to_string()),
        "no host-local lease for {ip_a}: {:?}",
        pm.leases()
    );
    assert!(!pm.state_files().is_empty(), "tern wrote no state file");

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
    let out_b = pm.ok(&[
        "run",
        "--name",
        "b",
        "--network",
        NETWORK,
        IMAGE,
        "sh",
        "-c",
        &format!(
            "echo hello-host | nc -w 5 {host_ip} {port} && echo ping-from-b | nc -w 5 {ip_a} {POD_PORT}"
        ),
    ]);
    let (peer, got) = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("container b never reached the host at {host_ip}:{port}"));
    assert_eq!(got.trim(), "hello-host", "host listener got {got:?}");
    // b has exited (podman may have torn its network down already): its address is checked
    // through what the host saw, which must be a pod address other than a's (no NAT on the way).
    assert!(
        peer.to_string().starts_with(SUBNET_PREFIX) && peer != IpAddr::V4(ip_a),
        "host saw the connection from {peer}, not from a pod address of b"
    );
    assert!(
        out_b.contains("pong-from-a"),
        "b did not get a's answer over TCP: {out_b:?}"
    );
    // a's nc appends b's message to its file once it reads it from the socket (b may have seen
    // a's answer first): polled until it is there; the deadline only bounds a hung nc.
    let cat = format!("cat {RECEIVED} 2>/dev/null; true");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut got_a = pm.ok(&["exec", "a", "sh", "-c", &cat]);
    while !got_a.contains("ping-from-b") && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        got_a = pm.ok(&["exec", "a", "sh", "-c", &cat]);
    }
    assert!(
        got_a.contains("ping-from-b"),
        "a did not receive b's message: {got_a:?}"
    );

    // podman rm -f: nothing of either container is left.
    let ids = [pm.container_id("a"), pm.container_id("b")];
    pm.ok(&["rm", "--force", "--time", "0", "a", "b"]);
    assert!(
        !host_link_exists(&veth_a),
        "host veth {veth_a} survived podman rm"
    );
    let left_routes = host_routes_into_subnet();
    assert!(
        left_routes.is_empty(),
        "host routes into {SUBNET} survived podman rm: {left_routes:?}"
    );
    assert!(
        pm.leases().is_empty(),
        "host-local leases survived podman rm: {:?}",
        pm.leases()
    );
    assert!(
        pm.state_files().is_empty(),
        "tern state files survived podman rm: {:?}",
        pm.state_files()
    );
    let cached = tern_testkit::exec::cni_cache_entries_of(&ids);
    assert!(
        cached.is_empty(),
        "libcni result cache entries survived podman rm: {cached:?}"
    );
    let ps = pm.ok(&["ps", "--all", "--quiet"]);
    assert!(ps.trim().is_empty(), "containers left: {ps}");
}

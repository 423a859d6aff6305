//! The floors under a chain ADD. The kernel floor: the netlink and sysctl work of tern +
//! tern-tuning (pod netns entered, veth pair, sysctls, addresses, routes) done by this one
//! long-lived process, pod after pod. The files floor: the files that ADD leaves on the node
//! (lease, cursor, state, tuning backup), written by the same process. The exec floor: tern and
//! tern-tuning exec'd for a VERSION each (start-up and exit, no work). Their sum, the exec-chain
//! floor, is what no chain of those two exec'd plugins can beat: a measured reference for the
//! chain's ADD p50 (its 1.25x target is retired).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;
use nix::fcntl::AtFlags;
use nix::unistd::linkat;
use tern_net::netlink::{Handle, KernelRoute, RouteScope};
use tern_net::netns::NetNs;
use tern_net::sysctl::{self, SysctlKey, SysctlValue};

use crate::env::Env;
use crate::exec::invoke;
use crate::rounds::{pct, run_parallel, Phase};
use crate::Res;

fn item(raw: &str, ifname: &str, value: &str) -> Res<(SysctlKey, SysctlValue)> {
    Ok((
        SysctlKey::parse(raw, ifname).map_err(|e| e.to_string())?,
        SysctlValue::parse(raw, value).map_err(|e| e.to_string())?,
    ))
}

fn net(ip: Ipv4Addr, prefix: u8) -> Res<IpNetwork> {
    IpNetwork::new(IpAddr::V4(ip), prefix).map_err(|e| e.to_string())
}

/// Per pod (fresh pod netns, made untimed), timed from before the netns is opened to the last
/// write: open the pod netns and a netlink socket inside it (a thread's `setns`); one
/// `RTM_NEWLINK` making the veth pair with its peer `eth0` in the pod; the host end's `proxy_arp`
/// and `proxy_delay`, and link up; the pod's /32, link up, route to the gateway and default
/// route; the host's /32 route; the three tuning sysctls in the pod netns (one thread, one
/// `setns`). The host socket is opened once per worker, untimed: a long-lived process keeps it.
/// Every request is one round trip with its ack, as `tern_net` makes them. `addrs_from` numbers
/// the pods' addresses (10.120.x.y/32) so rounds never collide.
pub(crate) fn kernel_floor(env: &mut Env, pods: usize, addrs_from: usize) -> Res<Phase> {
    let names = env.make_pods(pods)?;
    let items: Vec<(usize, String)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (addrs_from + i, n.clone()))
        .collect();
    let tuning = [
        ("net.ipv4.tcp_keepalive_time", "600"),
        ("net.ipv4.tcp_keepalive_intvl", "60"),
        ("net.ipv4.tcp_keepalive_probes", "5"),
    ];
    let work = |(n, pod): &(usize, String)| -> Res<Duration> {
        let e = |e: tern_net::Error| e.to_string();
        let host = Handle::new().map_err(e)?;
        let veth = format!("kfl{n}");
        let addr = Ipv4Addr::new(10, 120, (n / 250) as u8, (n % 250 + 2) as u8);
        let gw = Ipv4Addr::new(169, 254, 1, 1);
        let host_items = [
            item("net.ipv4.conf.IFNAME.proxy_arp", &veth, "1")?,
            item("net.ipv4.neigh.IFNAME.proxy_delay", &veth, "0")?,
        ];
        let pod_items = tuning
            .iter()
            .map(|(k, v)| item(k, "eth0", v))
            .collect::<Res<Vec<_>>>()?;
        let t0 = Instant::now();
        let ns = NetNs::open(format!("/run/netns/{pod}")).map_err(e)?;
        let in_pod = Handle::in_netns(&ns).map_err(e)?;
        host.create_veth(&veth, "eth0", &ns, Some(1500), None)
            .map_err(e)?;
        let hl = host
            .link_by_name(&veth)
            .map_err(e)?
            .ok_or("host veth vanished")?;
        let pl = in_pod
            .link_by_name("eth0")
            .map_err(e)?
            .ok_or("pod veth vanished")?;
        for (k, v) in &host_items {
            sysctl::write_host(k, v).map_err(e)?;
        }
        host.set_up(hl.index).map_err(e)?;
        in_pod
            .add_address(pl.index, net(addr, 32)?, true)
            .map_err(e)?;
        in_pod.set_up(pl.index).map_err(e)?;
        let mut to_gw = KernelRoute::new(net(gw, 32)?);
        to_gw.oif = Some(pl.index);
        to_gw.scope = RouteScope::Link;
        in_pod.add_route(&to_gw).map_err(e)?;
        let mut default = KernelRoute::new(net(Ipv4Addr::UNSPECIFIED, 0)?);
        default.gateway = Some(IpAddr::V4(gw));
        default.oif = Some(pl.index);
        default.onlink = true;
        in_pod.add_route(&default).map_err(e)?;
        let mut back = KernelRoute::new(net(addr, 32)?);
        back.oif = Some(hl.index);
        back.scope = RouteScope::Link;
        host.add_route(&back).map_err(e)?;
        sysctl::write_all(&ns, &pod_items).map_err(e)?;
        Ok(t0.elapsed())
    };
    let r = run_parallel(&env.host_ns, &items, 1, &work);
    env.drop_pods(&names);
    r
}

/// Per sample, at parallelism 1: `tern` and then the tern-tuning beside it exec'd with a
/// VERSION request as libcni execs a plugin (environment, netconf on stdin, stdout read to its
/// end, the exit reaped), the two times summed. VERSION does no work, so this is the cost of the
/// chain's two execs alone.
///
/// # Errors
/// A VERSION invocation that fails.
pub(crate) fn exec_floor(env: &Env, tern: &Path, samples: usize) -> Res<Phase> {
    let version = br#"{"cniVersion":"1.0.0"}"#;
    let tuning = tern.with_file_name("tern-tuning");
    let items: Vec<usize> = (0..samples).collect();
    let work = |_: &usize| -> Res<Duration> {
        Ok(invoke(tern, "VERSION", "v", "", "", "", version)?
            + invoke(&tuning, "VERSION", "v", "", "", "", version)?)
    };
    run_parallel(&env.host_ns, &items, 1, &work)
}

/// The exec-chain floor p50, ms: the kernel floor's p50 plus the files' ([`files_floor`]) plus
/// the two execs' p50.
pub(crate) fn exec_chain_floor(kernel: &Phase, files: &Phase, execs: &Phase) -> f64 {
    pct(&kernel.lat, 0.5) + pct(&files.lat, 0.5) + pct(&execs.lat, 0.5)
}

/// Creates `name` in the directory `dir` (open as `dir_file`) holding `content`, whole or absent
/// as the plugins write their files: written with no name (`O_TMPFILE`) and linked into place.
fn create_whole(dir: &Path, dir_file: &File, name: &str, content: &[u8]) -> Res<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_TMPFILE)
        .open(dir)
        .map_err(|e| format!("O_TMPFILE in {}: {e}", dir.display()))?;
    f.write_all(content)
        .map_err(|e| format!("write in {}: {e}", dir.display()))?;
    linkat(&f, "", dir_file, name, AtFlags::AT_EMPTY_PATH)
        .map_err(|e| format!("link {name} in {}: {e}", dir.display()))
}

/// Per pod, timed: the files a chain ADD leaves on the node, written by this one long-lived
/// process in the fewest syscalls that keep each whole or absent (`O_TMPFILE`, write, `linkat`),
/// where the chain keeps them: the IPAM lease (container ID and ifname, as host-local's) and the
/// range's cursor (overwritten in place) in the IPAM data directory on the bench's disk (ext4
/// here, as `/var/lib/cni/networks`); tern's per-attachment state and tern-tuning's backup of
/// the sysctls it changed on tmpfs (as `/run/cni`). No lock, no directory walk, no JSON: a
/// long-lived process keeps those in memory. Part of "the kernel work of an ADD":
/// every one of these files must exist when the ADD returns.
pub(crate) fn files_floor(env: &Env, pods: usize, addrs_from: usize) -> Res<Phase> {
    let ipam = env.work.join("floor-ipam");
    let state = env.run_work.join("floor-state");
    for d in [&ipam, &state] {
        std::fs::create_dir_all(d).map_err(|e| format!("mkdir {}: {e}", d.display()))?;
    }
    let open = |d: &Path| File::open(d).map_err(|e| format!("open {}: {e}", d.display()));
    let (ipam_dir, state_dir) = (open(&ipam)?, open(&state)?);
    let cursor_path = ipam.join("last_reserved_ip.0");
    let cursor = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&cursor_path)
        .map_err(|e| format!("{}: {e}", cursor_path.display()))?;
    let items: Vec<usize> = (addrs_from..addrs_from + pods).collect();
    let work = |n: &usize| -> Res<Duration> {
        let addr = Ipv4Addr::new(10, 120, (n / 250) as u8, (n % 250 + 2) as u8).to_string();
        let id = format!("{:064x}", n);
        let attachment = format!("{id}-eth0");
        let state_json = format!(
            r#"{{"hostVeth":"kfl{n}","ifname":"eth0","ips":["{addr}/32"],"netns":"/run/netns/pod"}}"#
        );
        let backup = r#"{"net.ipv4.tcp_keepalive_time":"7200","net.ipv4.tcp_keepalive_intvl":"75","net.ipv4.tcp_keepalive_probes":"9"}"#;
        let t0 = Instant::now();
        create_whole(&ipam, &ipam_dir, &addr, format!("{id}\neth0").as_bytes())?;
        cursor
            .write_all_at(addr.as_bytes(), 0)
            .and_then(|()| cursor.set_len(addr.len() as u64))
            .map_err(|e| format!("cursor: {e}"))?;
        create_whole(&state, &state_dir, &attachment, state_json.as_bytes())?;
        create_whole(
            &state,
            &state_dir,
            &format!("tuning-{attachment}"),
            backup.as_bytes(),
        )?;
        Ok(t0.elapsed())
    };
    run_parallel(&env.host_ns, &items, 1, &work)
}

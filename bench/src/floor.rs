//! The floors under a chain ADD. The kernel floor: the kernel work of tern + tern-tuning (pod
//! netns entered, veth pair, sysctls, addresses, routes) done by this one long-lived process, pod
//! after pod. The exec floor: tern and tern-tuning exec'd for a VERSION each (start-up and exit,
//! no work). Their sum, the exec-chain floor, is what no chain of those two exec'd plugins can
//! beat; its target is the chain's ADD p50 at most [`EXEC_CHAIN_TARGET`] times it.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;
use tern_net::netlink::{Handle, KernelRoute, RouteScope};
use tern_net::netns::NetNs;
use tern_net::sysctl::{self, SysctlKey, SysctlValue};

use crate::env::Env;
use crate::exec::invoke;
use crate::rounds::{pct, run_parallel, Phase};
use crate::Res;

/// The chain's ADD p50 target, as a multiple of the exec-chain floor p50 (issue 32).
pub(crate) const EXEC_CHAIN_TARGET: f64 = 1.25;

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

/// The exec-chain floor p50, ms: the kernel floor's p50 plus the two execs' p50.
pub(crate) fn exec_chain_floor(kernel: &Phase, execs: &Phase) -> f64 {
    pct(&kernel.lat, 0.5) + pct(&execs.lat, 0.5)
}

//! The kernel floor: one veth pair created (peer in a pod netns) and deleted over netlink, timed
//! alone.

use std::time::{Duration, Instant};

use tern_net::netlink::Handle;
use tern_net::netns::NetNs;

use crate::env::Env;
use crate::rounds::{run_parallel, Phase};
use crate::Res;

/// The kernel's own veth work, timed alone: per pod, one `RTM_NEWLINK` making a veth pair whose
/// peer (`eth0`) is created directly in a fresh pod netns, as tern makes it (timed; both ends
/// then set up, untimed), and later one `RTM_DELLINK` of the host end (timed). Returns the
/// creation and the deletion phases.
pub(crate) fn bench_kernel_veth(env: &mut Env, pods: usize, par: usize) -> Res<(Phase, Phase)> {
    let names = env.make_pods(pods)?;
    let items: Vec<(String, String)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (format!("kdel{i}"), n.clone()))
        .collect();
    let add = |(veth, pod): &(String, String)| -> Res<Duration> {
        // Sockets and the netns are opened untimed: a plugin's ADD opens its own, counted in
        // its ADD time.
        let h = Handle::new().map_err(|e| e.to_string())?;
        let ns = NetNs::open(format!("/run/netns/{pod}")).map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        h.create_veth(veth, "eth0", &ns, Some(1500), None)
            .map_err(|e| e.to_string())?;
        let took = t0.elapsed();
        let in_pod = Handle::in_netns(&ns).map_err(|e| e.to_string())?;
        for (handle, name) in [(&h, veth.as_str()), (&in_pod, "eth0")] {
            let link = handle
                .link_by_name(name)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("{name} vanished"))?;
            handle.set_up(link.index).map_err(|e| e.to_string())?;
        }
        Ok(took)
    };
    let del = |(veth, _): &(String, String)| -> Res<Duration> {
        let h = Handle::new().map_err(|e| e.to_string())?;
        let link = h
            .link_by_name(veth)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{veth} vanished"))?;
        let t0 = Instant::now();
        h.delete_link(link.index).map_err(|e| e.to_string())?;
        Ok(t0.elapsed())
    };
    let r = run_parallel(&env.host_ns, &items, par, &add)
        .and_then(|a| Ok((a, run_parallel(&env.host_ns, &items, par, &del)?)));
    env.drop_pods(&names);
    r
}

//! After a fault: the table against a full render, and tern's files, on each node of the tier
//! (both with two nodes).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use tern_cluster::node2::Host;
use tern_cluster::{fail, Node, Res};

use crate::day2::rollout_status;

/// `nft list table inet tern_netpol` without handles, each set's elements sorted and the
/// table's sets, maps and chains sorted (an update adds a chain or set after the others, a
/// replace writes them in the render's order; the kernel lists them in the order they came).
fn listing(node: &Node, host: &Host) -> Res<String> {
    Ok(sorted_blocks(&normalized(node, host)?))
}

/// The table's blocks (`\tset|map|chain NAME {` to `\t}`) sorted, the rest in place.
fn sorted_blocks(text: &str) -> String {
    let (mut head, mut blocks, mut tail) = (String::new(), Vec::new(), String::new());
    let mut block: Option<String> = None;
    for line in text.lines() {
        if let Some(b) = block.as_mut() {
            b.push_str(line);
            b.push('\n');
            if line == "\t}" {
                blocks.extend(block.take());
            }
        } else if line.starts_with('\t') && line.ends_with('{') {
            block = Some(format!("{line}\n"));
        } else if line.trim().is_empty() {
        } else if blocks.is_empty() {
            head.push_str(line);
            head.push('\n');
        } else {
            tail.push_str(line);
            tail.push('\n');
        }
    }
    blocks.extend(block);
    blocks.sort_unstable();
    format!("{head}{}{tail}", blocks.concat())
}

/// The listing with handles dropped and each set's elements sorted.
fn normalized(node: &Node, host: &Host) -> Res<String> {
    let text = node.run(
        &mut host.cmd("nft", &["list", "table", "inet", "tern_netpol"]),
        None,
    )?;
    let mut out = String::new();
    let mut elements: Option<String> = None;
    for line in text.lines() {
        let line = line.split(" # handle").next().unwrap_or(line).trim_end();
        if let Some(acc) = elements.as_mut() {
            acc.push_str(line.trim());
            if line.trim_end().ends_with('}') {
                let inner = acc.trim_end_matches('}');
                let mut items: Vec<&str> = inner
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect();
                items.sort_unstable();
                out.push_str(&format!("elements = {{ {} }}\n", items.join(", ")));
                elements = None;
            }
            continue;
        }
        match line.trim().strip_prefix("elements = {") {
            Some(rest) => {
                elements = Some(String::new());
                if let Some(acc) = elements.as_mut() {
                    acc.push_str(rest.trim());
                }
                if rest.trim_end().ends_with('}') {
                    let inner = rest.trim().trim_end_matches('}');
                    let mut items: Vec<&str> = inner
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .collect();
                    items.sort_unstable();
                    out.push_str(&format!("elements = {{ {} }}\n", items.join(", ")));
                    elements = None;
                }
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    Ok(out)
}

/// The table now against the one a fresh agent renders, on every node: the agent pods replaced
/// (the DaemonSet kept, so their preStop uninstalls nothing), their first transaction a whole
/// replace. False when a node's differs (the difference in the case's log).
pub fn table_is_a_full_render(node: &Node) -> Res<bool> {
    std::thread::sleep(std::time::Duration::from_secs(2));
    let hosts = node.hosts()?;
    let mut now = Vec::new();
    for h in &hosts {
        now.push(listing(node, h)?);
    }
    let mut agents = vec!["-n", "tern", "delete", "pod"];
    let names: Vec<String> = hosts
        .iter()
        .map(|h| node.agent_pod_of(&h.name))
        .collect::<Res<_>>()?;
    agents.extend(names.iter().map(String::as_str));
    agents.extend(["--wait=true", "--timeout=60s"]);
    node.kubectl(&agents)?;
    rollout_status(node)?;
    std::thread::sleep(std::time::Duration::from_secs(2));
    let mut same = true;
    for (h, now) in hosts.iter().zip(&now) {
        let fresh = listing(node, h)?;
        if *now != fresh {
            node.note(&format!(
                "--- {}'s table after the fault:\n{now}--- a fresh agent's:\n{fresh}",
                h.name
            ));
            same = false;
        }
    }
    Ok(same)
}

/// Each node's conflist bytes.
pub struct TernFiles {
    conflists: Vec<(Host, Vec<u8>)>,
}

/// What [`nothing_left_or_lost`] compares against.
pub fn tern_files(node: &Node) -> Res<TernFiles> {
    let mut conflists = Vec::new();
    for h in node.hosts()? {
        let p = h.path(&format!("{}/10-tern.conflist", node.cni_net.display()));
        let bytes = std::fs::read(&p).map_err(|e| format!("read {}: {e}", p.display()))?;
        conflists.push((h, bytes));
    }
    Ok(TernFiles { conflists })
}

fn ips_in(addresses: &[IpAddr]) -> BTreeSet<IpAddr> {
    addresses.iter().copied().collect()
}

/// On every node: each pod tern wired there has its lease and its state, and no other lease or
/// state is left; the conflist is as before and the kubeconfig there.
pub fn nothing_left_or_lost(node: &Node, before: &TernFiles) -> Res {
    for (h, conflist) in &before.conflists {
        // the agent's pod is on the host network: its address is the node's, not tern's
        let want = ips_in(&node.pod_addresses_on(&h.name)?);
        let dir = h.path("/var/lib/cni/networks/tern");
        let leases: BTreeSet<IpAddr> = std::fs::read_dir(&dir)
            .map_err(|e| format!("read {}: {e}", dir.display()))?
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
            .collect();
        if leases != want {
            return fail(format!(
                "{}: leases {leases:?}, pods' addresses {want:?}",
                h.name
            ));
        }
        let states = files(&h.path("/run/cni/tern"));
        let per_pod = want.iter().filter(|ip| ip.is_ipv4()).count();
        if states != per_pod {
            return fail(format!(
                "{}: {states} tern state files for {per_pod} pods",
                h.name
            ));
        }
        let net = node.cni_net.display();
        let p = h.path(&format!("{net}/10-tern.conflist"));
        if std::fs::read(&p).ok().as_ref() != Some(conflist) {
            return fail(format!(
                "{}: the conflist changed through the fault",
                h.name
            ));
        }
        if !h.path(&format!("{net}/tern-kubeconfig")).exists() {
            return fail(format!(
                "{}: the kubeconfig is gone after the fault",
                h.name
            ));
        }
    }
    Ok(())
}

/// `*.json` files one level under the state dir's networks.
fn files(state_dir: &Path) -> usize {
    let Ok(nets) = std::fs::read_dir(state_dir) else {
        return 0;
    };
    nets.flatten()
        .filter_map(|n| std::fs::read_dir(n.path()).ok())
        .flat_map(|d| d.flatten())
        .filter(|f| f.path().extension().is_some_and(|e| e == "json"))
        .count()
}

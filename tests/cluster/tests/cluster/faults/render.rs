//! After a fault: the table against a full render, and tern's files on the node.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use tern_cluster::{fail, Node, Res};

use crate::day2::rollout_status;

/// `nft list table inet tern_netpol` without handles, each set's elements sorted and the
/// table's sets, maps and chains sorted (an update adds a chain or set after the others, a
/// replace writes them in the render's order; the kernel lists them in the order they came).
fn listing(node: &Node) -> Res<String> {
    Ok(sorted_blocks(&normalized(node)?))
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
fn normalized(node: &Node) -> Res<String> {
    let text = node.run(
        &mut Node::cmd("nft", &["list", "table", "inet", "tern_netpol"]),
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

/// The table now against the one a fresh agent renders: the agent pod replaced (the DaemonSet
/// kept, so its preStop uninstalls nothing), its first transaction a whole replace.
pub fn table_is_a_full_render(node: &Node) -> Res<bool> {
    std::thread::sleep(std::time::Duration::from_secs(2));
    let now = listing(node)?;
    let agent = node.agent_pod()?;
    node.kubectl(&[
        "-n",
        "tern",
        "delete",
        "pod",
        &agent,
        "--wait=true",
        "--timeout=60s",
    ])?;
    rollout_status(node)?;
    std::thread::sleep(std::time::Duration::from_secs(2));
    let fresh = listing(node)?;
    if now != fresh {
        node.note(&format!(
            "--- the table after the fault:\n{now}--- a fresh agent's:\n{fresh}"
        ));
    }
    Ok(now == fresh)
}

/// The conflist's and kubeconfig's bytes.
pub struct TernFiles {
    conflist: Vec<u8>,
}

/// What [`nothing_left_or_lost`] compares against.
pub fn tern_files(node: &Node) -> Res<TernFiles> {
    let p = node.cni_net.join("10-tern.conflist");
    let conflist = std::fs::read(&p).map_err(|e| format!("read {}: {e}", p.display()))?;
    Ok(TernFiles { conflist })
}

fn ips_in(out: &str) -> BTreeSet<IpAddr> {
    out.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// Every pod on the node that tern wired has its lease and its state, and no other lease or
/// state is left; the conflist is as before and the kubeconfig there.
pub fn nothing_left_or_lost(node: &Node, before: &TernFiles) -> Res {
    let pods = node.kubectl(&[
        "get", "pods", "-A", "-o",
        "jsonpath={range .items[*]}{.spec.hostNetwork} {range .status.podIPs[*]}{.ip} {end}{\"\\n\"}{end}",
    ])?;
    // the agent's pod is on the host network: its address is the node's, not tern's
    let tern_pods: Vec<&str> = pods.lines().filter(|l| !l.starts_with("true")).collect();
    let want = ips_in(&tern_pods.join(" "));
    let leases: BTreeSet<IpAddr> = std::fs::read_dir("/var/lib/cni/networks/tern")
        .map_err(|e| format!("read the lease dir: {e}"))?
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect();
    if leases != want {
        return fail(format!("leases {leases:?}, pods' addresses {want:?}"));
    }
    let states = files(Path::new("/run/cni/tern"));
    let per_pod = want.iter().filter(|ip| ip.is_ipv4()).count();
    if states != per_pod {
        return fail(format!("{states} tern state files for {per_pod} pods"));
    }
    let p = node.cni_net.join("10-tern.conflist");
    if std::fs::read(&p).ok().as_ref() != Some(&before.conflist) {
        return fail("the conflist changed through the fault");
    }
    if !node.cni_net.join("tern-kubeconfig").exists() {
        return fail("the kubeconfig is gone after the fault");
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

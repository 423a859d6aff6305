//! `teardown`: the two-node tier torn down (`node.sh down`) as the last case, and nothing of it
//! left on the machine: node 2's container and processes, the bridge, veths, router and switch
//! netns, the VXLAN device, cgroups, mounts, routes into the tier's ranges, nft tables, `$KT`.
//! The case's log goes with `$KT`: what is left is in the failure message itself.

use tern_cluster::{fail, Node, Res};

/// What of the tier is still on the machine, one entry each.
fn leftovers(node: &Node) -> Vec<String> {
    let mut left = Vec::new();
    let quiet = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    let links = quiet("ip", &["-o", "link", "show"]);
    for l in ["kt-br0", "kt-node0", "kt-n2h", "tern.vxlan"] {
        if links.contains(&format!(": {l}:")) || links.contains(&format!(": {l}@")) {
            left.push(format!("link {l}"));
        }
    }
    let netns = quiet("ip", &["netns", "list"]);
    for ns in ["kt-router", "kt-switch"] {
        if netns
            .lines()
            .any(|l| l.split_whitespace().next() == Some(ns))
        {
            left.push(format!("netns {ns}"));
        }
    }
    let kt = node.kt.display().to_string();
    for cg in [node.var("NODE2_CGROUP"), "/tern-kube"] {
        if std::path::Path::new(&format!("/sys/fs/cgroup/pids{cg}")).exists() {
            left.push(format!("cgroup {cg}"));
        }
    }
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    left.extend(
        mounts
            .lines()
            .filter(|m| m.contains(&format!(" {kt}")))
            .map(|m| format!("mount {m}")),
    );
    let routes =
        quiet("ip", &["-o", "route", "show"]) + &quiet("ip", &["-o", "-6", "route", "show"]);
    let ours = [
        "10.99.210.",
        "10.99.211.",
        "10.99.218.",
        "10.99.219.",
        "fd99:210:",
        "fd99:218:",
        "fd99:219:",
    ];
    left.extend(
        routes
            .lines()
            .filter(|r| ours.iter().any(|p| r.starts_with(p)))
            .map(|r| format!("route {r}")),
    );
    let tables = quiet("nft", &["list", "tables"]);
    for t in ["tern_kt_guard", "tern_nat", "tern_netpol"] {
        if tables.lines().any(|l| l.ends_with(&format!(" {t}"))) {
            left.push(format!("nft table {t}"));
        }
    }
    let ctr = node.var("NODE2_CTR");
    let procs = quiet("pgrep", &["-af", &format!("{ctr}|{kt}/")]);
    left.extend(procs.lines().map(|p| format!("process {p}")));
    if node.kt.exists() {
        left.push(format!("{kt} exists"));
    }
    left
}

/// The case (module docs); ignored with TERN_CLUSTER_KEEP=1.
pub fn teardown(node: &Node) -> Res {
    node.sh(&["down"], &[])?;
    let left = leftovers(node);
    if left.is_empty() {
        return Ok(());
    }
    fail(format!(
        "left on the machine after teardown:\n{}",
        left.join("\n")
    ))
}

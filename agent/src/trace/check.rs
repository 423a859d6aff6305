//! The kernel check as `tern-agent trace` runs it: which ends of the traced connection this
//! node's table judges, the table the agent compiles from the same lists, the comparison
//! (`kernel.rs`) and its lines.
//!
//! Invariant: never fails the trace: a table that cannot be read, or a trace run off the node,
//! is a check skipped with its reason; only a difference changes the exit status (3).

use std::fmt::Write as _;

use tern_net::nft::Nft;
use tern_netpol::compile;
use tern_netpol::ruleset::{render_logging, LogDenied, Table, DEFAULT_LOG_RATE};
use tern_netpol::trace::{Query, Trace};

use super::kernel::{compare, pick, End, NftTable, TableReader};
use super::{Listed, TraceArgs};

/// What the kernel check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelAnswer {
    /// Not checked: why.
    Skipped(String),
    /// The table agrees: on which node, and what was compared.
    Agrees {
        /// The node.
        node: String,
        /// One line per end compared.
        lines: Vec<String>,
    },
    /// The table differs.
    Differs {
        /// The node.
        node: String,
        /// Each difference.
        lines: Vec<String>,
    },
}

impl KernelAnswer {
    /// Whether the kernel's table differs from the model.
    pub fn differs(&self) -> bool {
        matches!(self, KernelAnswer::Differs { .. })
    }

    /// The lines printed after the answer.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let (head, lines) = match self {
            KernelAnswer::Skipped(why) => (format!("kernel: not checked: {why}"), &[][..]),
            KernelAnswer::Agrees { node, lines } => {
                (format!("kernel agrees (node {node}):"), &lines[..])
            }
            KernelAnswer::Differs { node, lines } => (
                format!("kernel differs from the model (node {node}): the table does not do what the policies say"),
                &lines[..],
            ),
        };
        let _ = writeln!(out, "{head}");
        for l in lines {
            let _ = writeln!(out, "  {l}");
        }
        out
    }
}

/// The ends of `t` whose table is `node`'s: the destination's ingress when it runs there, the
/// source pod's egress when it does, for each path.
pub fn ends(l: &Listed, q: &Query, t: &Trace, node: &str) -> Vec<End> {
    let on_node = |key: &str| {
        l.pods
            .iter()
            .any(|p| format!("{}/{}", p.namespace, p.name) == key && p.node == node)
    };
    let dst_here = on_node(&t.to);
    let src_here = t.from.as_deref().is_some_and(on_node);
    let mut out = Vec::new();
    for p in &t.paths {
        let end = |direction, local, peer| End {
            direction,
            local,
            peer,
            protocol: q.protocol,
            port: q.port,
        };
        if src_here {
            out.push(end("egress", p.src, p.dst));
        }
        if dst_here {
            out.push(end("ingress", p.dst, p.src));
        }
    }
    out
}

/// The table the agent of `node` compiles from `l` (its denied-flow log as `log` says).
pub fn expected_table(l: &Listed, node: &str, log: Option<LogDenied>) -> Table {
    render_logging(&compile(&l.world(node)), log).0
}

/// Compares the table `kernel` reads with the model's for the ends of `t` on `node`.
pub fn compare_on(
    l: &Listed,
    q: &Query,
    t: &Trace,
    node: &str,
    log_group: u16,
    kernel: &dyn TableReader,
) -> KernelAnswer {
    let ends = ends(l, q, t, node);
    if ends.is_empty() {
        let dst_node = l
            .pods
            .iter()
            .find(|p| p.namespace == q.to_namespace && p.name == q.to_name)
            .map_or("", |p| p.node.as_str());
        let why = if t.own {
            "a pod's traffic to its own address is judged by no table".to_owned()
        } else {
            format!("neither end runs on node {node}: run it in the tern-agent pod of node {dst_node:?} (the destination's)")
        };
        return KernelAnswer::Skipped(why);
    }
    let plan = compile(&l.world(node));
    let log = LogDenied {
        group: log_group,
        rate: DEFAULT_LOG_RATE,
    };
    let (off, on) = (
        render_logging(&plan, None).0,
        render_logging(&plan, Some(log)).0,
    );
    let compared =
        pick(&[&off, &on], &ends, kernel).and_then(|t| compare(t.unwrap_or(&off), &ends, kernel));
    let node = node.to_owned();
    match compared {
        Err(e) => KernelAnswer::Skipped(format!("cannot read the table on node {node}: {e:#}")),
        Ok(c) if c.differences.is_empty() => KernelAnswer::Agrees {
            node,
            lines: c.agreed,
        },
        Ok(c) => KernelAnswer::Differs {
            node,
            lines: c.differences,
        },
    }
}

/// The check `a` asks for, on this host's table.
pub fn run(a: &TraceArgs, l: &Listed, q: &Query, t: &Trace) -> KernelAnswer {
    if a.no_kernel_check {
        return KernelAnswer::Skipped("--no-kernel-check".into());
    }
    let Some(node) = a.node.as_deref().filter(|n| !n.is_empty()) else {
        return KernelAnswer::Skipped(
            "no --node or NODE_NAME: run it in the agent's pod to compare with a node's table"
                .into(),
        );
    };
    match Nft::find() {
        Ok(nft) => compare_on(l, q, t, node, a.network_policy_log_group, &NftTable(nft)),
        Err(e) => KernelAnswer::Skipped(format!("{e}")),
    }
}

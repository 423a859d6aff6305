//! `tern-agent trace`'s answer as printed: the verdict, then one reason per line (each end's
//! judgement, with the policies and rules behind it), then notes.

use std::fmt::Write as _;
use std::net::IpAddr;

use tern_netpol::trace::{
    ClusterRuleRef, Judgement, Path, PolicyRef, Query, RuleRef, Source, Trace,
};

use super::Listed;

fn policy(p: &PolicyRef) -> String {
    match &p.closed {
        Some(e) => format!(
            "{}/{} (cannot be read whole, allows nothing: {e})",
            p.namespace, p.name
        ),
        None => format!("{}/{}", p.namespace, p.name),
    }
}

fn rule(r: &RuleRef) -> String {
    let (dir, peers) = (r.direction.field(), r.direction.peers_field());
    let peer = r
        .peer
        .map_or(format!("{peers} anywhere"), |i| format!("{peers}[{i}]"));
    let port = r
        .port
        .map_or("every port".into(), |i| format!("ports[{i}]"));
    let p = &r.policy;
    format!("{}/{} {dir}[{}] {peer} {port}", p.namespace, p.name, r.rule)
}

fn list(v: &[String]) -> String {
    v.join(", ")
}

/// One end's reason line: how `who` judged, in `dir`, the connection with the other end at
/// `other` on `service`.
fn reason(who: &str, dir: &str, j: &Judgement, other: IpAddr, service: &str) -> String {
    let by = |p: &[PolicyRef]| list(&p.iter().map(policy).collect::<Vec<_>>());
    match j {
        Judgement::NotIsolated => format!("{dir} of {who}: allowed, no NetworkPolicy isolates it for {dir}"),
        Judgement::NotAPod => format!("{dir} of {who}: no pod has this address, no policy judges its {dir}"),
        Judgement::Allowed { isolated_by, rules } => format!(
            "{dir} of {who}: allowed by {}; isolated by {}",
            list(&rules.iter().map(rule).collect::<Vec<_>>()),
            by(isolated_by)
        ),
        Judgement::Denied { isolated_by } => format!(
            "{dir} of {who}: denied, isolated by {} and no {dir} rule of theirs allows {other} {service}",
            by(isolated_by)
        ),
        Judgement::Cluster(r) => {
            let verdict = if j.allows() { "allowed" } else { "denied" };
            format!("{dir} of {who}: {verdict} by {}", cluster_rule(r))
        }
        Judgement::Passed { by, then } => format!(
            "{} (after {} passed it on)",
            reason(who, dir, then, other, service),
            cluster_rule(by)
        ),
    }
}

/// A ClusterNetworkPolicy rule as printed: policy, tier and priority, rule, action, note.
fn cluster_rule(r: &ClusterRuleRef) -> String {
    let name = if r.name.is_empty() {
        String::new()
    } else {
        format!(" ({})", r.name)
    };
    let note = r.note.as_ref().map_or(String::new(), |n| format!(", {n}"));
    format!(
        "ClusterNetworkPolicy {} ({} tier, priority {}) {}[{}]{name} {}{note}",
        r.policy,
        r.tier.as_str(),
        r.priority,
        r.direction.field(),
        r.rule,
        r.action.as_str()
    )
}

fn path_lines(out: &mut String, t: &Trace, p: &Path, service: &str) {
    let from = match &t.from {
        Some(pod) => format!("{pod} ({})", p.src),
        None => p.src.to_string(),
    };
    let to = format!("{} ({})", t.to, p.dst);
    let _ = writeln!(
        out,
        "  {}",
        reason(&from, "egress", &p.egress, p.dst, service)
    );
    let _ = writeln!(
        out,
        "  {}",
        reason(&to, "ingress", &p.ingress, p.src, service)
    );
}

/// The answer as printed: the verdict, then one reason per line.
pub fn render(l: &Listed, q: &Query, t: &Trace) -> String {
    let service = format!("port {}/{}", q.port, q.protocol.nft().to_ascii_uppercase());
    let verdict = if t.allowed() { "allowed" } else { "denied" };
    let from = match (&t.from, &q.from) {
        (Some(pod), _) => pod.clone(),
        (None, Source::Ip(ip)) => ip.to_string(),
        (None, Source::Pod { namespace, name }) => format!("{namespace}/{name}"),
    };
    let mut out = format!("{verdict}: {from} -> {} {service}\n", t.to);
    if t.own {
        out.push_str("  a pod's traffic to its own address stays in its network namespace: no policy judges it\n");
    }
    for p in &t.paths {
        path_lines(&mut out, t, p, service.as_str());
    }
    if t.from.is_none() {
        let _ = writeln!(
            out,
            "  note: traffic from {}'s own node is never judged",
            t.to
        );
    }
    let namespaces = [
        Some(q.to_namespace.as_str()),
        t.from.as_deref().and_then(|f| f.split('/').next()),
    ];
    for (key, e) in &l.unreadable {
        if namespaces
            .iter()
            .flatten()
            .any(|ns| key.starts_with(&format!("{ns}/")))
        {
            let _ = writeln!(
                out,
                "  note: NetworkPolicy {key} cannot be read and isolates nothing: {e}"
            );
        }
    }
    for note in &l.cluster_notes {
        let _ = writeln!(out, "  note: {note}");
    }
    out
}

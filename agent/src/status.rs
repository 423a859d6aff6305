//! `tern-agent status`: this node's agent at a glance, from its own `/metrics` and `/readyz`
//! on the probe address (`--listen`, 127.0.0.1:9412): version, readiness, the CNI token's
//! expiry and last refresh, node routes, the NetworkPolicy table (synced, size, last sync, the
//! work per change) and every error count that is not zero. Run it in the agent's pod (`kubectl
//! -n tern exec ds/tern-agent -- tern-agent status`, or per node with `--field-selector
//! spec.nodeName=N` on the pod). Exit 0 when the agent is ready and every controller it runs
//! has synced, 1 when not, 2 when it cannot be reached.
//!
//! Why not Node conditions: they would need `patch nodes/status` for every agent (today only the
//! VXLAN mode has it) and a condition type per subsystem; the metrics already hold every fact,
//! for Prometheus and for this command alike.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;

use crate::config::DEFAULT_LISTEN;

/// `tern-agent status` flags.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// The agent's probe address (its --listen)
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    pub address: SocketAddr,
}

/// One sample: its labels (`name="value"` pairs, as written) and value.
type Samples = Vec<(String, f64)>;

/// The text exposition's samples by metric name (comments skipped).
pub fn parse_metrics(text: &str) -> BTreeMap<String, Samples> {
    let mut out: BTreeMap<String, Samples> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (head, value) = match line.rsplit_once(' ') {
            Some(x) => x,
            None => continue,
        };
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match head.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (head, ""),
        };
        out.entry(name.to_owned())
            .or_default()
            .push((labels.to_owned(), v));
    }
    out
}

/// The metrics, with the lookups the report needs.
struct Metrics(BTreeMap<String, Samples>);

impl Metrics {
    fn one(&self, name: &str) -> Option<f64> {
        self.0.get(name).and_then(|s| s.first()).map(|(_, v)| *v)
    }

    fn sum(&self, name: &str) -> f64 {
        // A fold from +0: an empty f64 sum is -0, which prints as "-0".
        self.0
            .get(name)
            .map_or(0.0, |s| s.iter().fold(0.0, |a, (_, v)| a + v))
    }

    /// `label=value` of every sample above zero, or `none`.
    fn nonzero(&self, name: &str) -> String {
        let parts: Vec<String> = self
            .0
            .get(name)
            .into_iter()
            .flatten()
            .filter(|(_, v)| *v > 0.0)
            .map(|(l, v)| format!("{} {v}", l.replace('"', "")))
            .collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }

    fn has(&self, prefix: &str) -> bool {
        self.0.keys().any(|k| k.starts_with(prefix))
    }
}

/// `3h4m`, `12m5s`, `40s` (negative: `-`).
fn span(secs: f64) -> String {
    let neg = secs < 0.0;
    let s = secs.abs().round() as u64;
    let text = match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec}s"),
        (h, m, _) => format!("{h}h{m}m"),
    };
    if neg {
        format!("-{text}")
    } else {
        text
    }
}

/// The report for `text` (the agent's `/metrics`) at Unix time `now`, `ready` its `/readyz`;
/// and whether everything it runs is ready and synced.
pub fn report(text: &str, ready: bool, now: f64) -> (String, bool) {
    let m = Metrics(parse_metrics(text));
    let mut out = String::new();
    let version =
        m.0.get("tern_build_info")
            .and_then(|s| s.first())
            .map(|(l, _)| l.replace("version=", "").replace('"', ""))
            .unwrap_or_else(|| "unknown".into());
    let _ = writeln!(
        out,
        "tern-agent {version}: {}",
        if ready { "ready" } else { "NOT READY" }
    );
    let mut ok = ready;
    match m.one("tern_agent_token_expiry_timestamp_seconds") {
        Some(exp) => {
            let last = m.one("tern_agent_last_success_timestamp_seconds");
            let _ = writeln!(
                out,
                "  token: expires in {}; last refresh {} ago; {} failure(s) in a row; refresh failures: {}",
                span(exp - now),
                last.map_or_else(|| "never".into(), |l| span(now - l)),
                m.one("tern_agent_consecutive_failures").unwrap_or(0.0),
                m.nonzero("tern_agent_refresh_failures_total"),
            );
            ok &= exp > now;
        }
        None => {
            let _ = writeln!(out, "  token: none written yet");
            ok = false;
        }
    }
    if m.has("tern_agent_node_routes_") {
        let synced = m.one("tern_agent_node_routes_synced") == Some(1.0);
        ok &= synced;
        let _ = writeln!(
            out,
            "  node routes: {}; {} routes for {} nodes; vxlan peers {}; unrouted: {}; refused {}; API errors: {}",
            if synced { "synced" } else { "NOT SYNCED" },
            m.sum("tern_agent_node_routes_installed"),
            m.sum("tern_agent_node_routes_nodes"),
            m.sum("tern_agent_node_routes_vxlan_peers"),
            m.nonzero("tern_agent_node_routes_unrouted"),
            m.sum("tern_agent_node_routes_failed_total"),
            m.nonzero("tern_agent_node_routes_api_errors_total"),
        );
    }
    if m.has("tern_agent_network_policy_") {
        let synced = m.one("tern_agent_network_policy_synced") == Some(1.0);
        ok &= synced;
        let p = |n: &str| m.sum(&format!("tern_agent_network_policy_{n}"));
        let _ = writeln!(
            out,
            "  network policy: {}; {} isolated pods, {} policies in force, {} rules, {} elements; last sync {:.1} ms",
            if synced { "synced" } else { "NOT SYNCED" },
            p("isolated_pods"),
            p("policies"),
            p("rules"),
            p("set_elements"),
            p("last_sync_seconds") * 1e3,
        );
        let _ = writeln!(
            out,
            "    work: {} compiles ({} pods, {} sets), {} transactions, {} events that changed nothing",
            p("compiles_total"),
            p("pods_compiled_total"),
            p("sets_compiled_total"),
            p("applies_total"),
            p("events_unchanged_total"),
        );
        let _ = writeln!(
            out,
            "    errors: refused transactions {}, restores {}, unreadable policies: {}, API errors: {}",
            p("apply_errors_total"),
            p("restores_total"),
            m.nonzero("tern_agent_network_policy_unreadable_policies"),
            m.nonzero("tern_agent_network_policy_api_errors_total"),
        );
    }
    let failed: f64 =
        m.0.get("tern_cni_verb_total")
            .into_iter()
            .flatten()
            .filter(|(l, _)| !l.contains("code=\"0\""))
            .fold(0.0, |a, (_, v)| a + v);
    let _ = writeln!(
        out,
        "  CNI verbs: {} run, {failed} failed",
        m.sum("tern_cni_verb_total")
    );
    (out, ok)
}

/// `GET path` over HTTP/1.0 from `addr`: (status, body).
fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_owned()))
}

/// Runs `tern-agent status`.
pub fn main(a: &StatusArgs) -> ExitCode {
    let metrics = match get(a.address, "/metrics") {
        Ok((200, body)) => body,
        Ok((code, _)) => {
            eprintln!("tern-agent status: {}/metrics answered {code}", a.address);
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!(
                "tern-agent status: no agent at {} ({e}); is tern-agent run listening there (--listen)?",
                a.address
            );
            return ExitCode::from(2);
        }
    };
    let ready = get(a.address, "/readyz").is_ok_and(|(c, _)| c == 200);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let (text, ok) = report(&metrics, ready, now);
    print!("{text}");
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests;

//! The plugin's pod lookup (docs/DESIGN.md, "Pod lookup"): read the kubeconfig fresh, refresh
//! through the agent when the token is expired or about to be, one GET of the pod under the
//! deadline, and on 401 one agent-assisted retry.
//!
//! Invariants: the whole lookup, agent round-trips and waiting included, stays within the
//! caller's deadline (plus scheduling noise); at most two GETs are made (the second only after a
//! 401 and a changed token); a 403 is never retried; a pod that is gone, terminating or has
//! another UID is refused; errors name the kubeconfig path and agent socket where they matter and
//! never contain the token.

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::channel::{AgentClient, Outcome};
use crate::client::Client;
use crate::error::KubeError;
use crate::kubeconfig::{self, ClientConfig};
use crate::time::unix_now;
use crate::types::Pod;

mod error;
pub use error::LookupError;

/// The pod annotation listing the addresses a pod asks for: a JSON list of IP strings,
/// e.g. `["10.99.0.7","fd00::7"]`.
pub const IP_ADDRS_ANNOTATION: &str = "tern.io/ip-addrs";

/// Default deadline for the whole lookup.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(5);

/// Poll interval while waiting for the agent's new kubeconfig.
const CHANGE_POLL: Duration = Duration::from_millis(10);

/// What the plugin learns about the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    /// `metadata.uid`.
    pub uid: String,
    /// Addresses from [`IP_ADDRS_ANNOTATION`] (empty when the annotation is absent), to pass to
    /// IPAM as the `ips` runtimeConfig.
    pub ip_addrs: Vec<IpAddr>,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
}

/// Which pod to look up and how.
#[derive(Debug, Clone)]
pub struct LookupRequest<'a> {
    /// The token kubeconfig (netconf `kubernetes.kubeconfig`).
    pub kubeconfig: &'a Path,
    /// The agent socket (netconf `agentSocket`).
    pub agent_socket: &'a Path,
    /// `K8S_POD_NAMESPACE`.
    pub namespace: &'a str,
    /// `K8S_POD_NAME`.
    pub name: &'a str,
    /// `K8S_POD_UID`, when the runtime gives it.
    pub uid: Option<&'a str>,
    /// Budget for the whole lookup.
    pub deadline: Duration,
}

/// Parses the [`IP_ADDRS_ANNOTATION`] value.
///
/// # Errors
/// A description when the value is not a JSON list of IP address strings, or repeats one.
pub fn parse_ip_addrs(value: &str) -> Result<Vec<IpAddr>, String> {
    let list: Vec<serde_json::Value> =
        serde_json::from_str(value).map_err(|_| format!("{value:?} is not a JSON list"))?;
    let mut out: Vec<IpAddr> = Vec::with_capacity(list.len());
    for v in list {
        let s = v.as_str().ok_or_else(|| format!("{v} is not a string"))?;
        let ip: IpAddr = s
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address"))?;
        if out.contains(&ip) {
            return Err(format!("{ip} is listed twice"));
        }
        out.push(ip);
    }
    Ok(out)
}

fn left(start: Instant, deadline: Duration) -> Duration {
    deadline.saturating_sub(start.elapsed())
}

/// Re-reads the kubeconfig until its token differs from `old` or `wait` passes.
fn wait_for_new_token(path: &Path, old: &ClientConfig, wait: Duration) -> Option<ClientConfig> {
    let until = Instant::now() + wait;
    loop {
        if let Ok(cfg) = kubeconfig::load(path) {
            if cfg.token != old.token {
                return Some(cfg);
            }
        }
        if Instant::now() + CHANGE_POLL > until {
            return None;
        }
        std::thread::sleep(CHANGE_POLL);
    }
}

fn describe(outcome: &Result<Outcome, KubeError>) -> String {
    match outcome {
        Ok(Outcome::Refreshed { expires_at }) => {
            format!("agent refreshed the token (expires {expires_at})")
        }
        Ok(Outcome::RateLimited {
            retry_after_seconds,
        }) => {
            format!("agent is rate-limiting refreshes, retry after {retry_after_seconds} s")
        }
        Ok(Outcome::Failed { reason }) => format!("agent refresh failed: {reason}"),
        Ok(Outcome::Admitted { .. }) => "agent answered an admission to a refresh".into(),
        Ok(Outcome::Error { reason }) => format!("agent refused the request: {reason}"),
        Err(e) => e.to_string(),
    }
}

/// Looks up the pod named by `req` for ADD, by the rules in docs/DESIGN.md, "Pod lookup".
///
/// # Errors
/// [`LookupError`]; see each variant. [`LookupError::try_again_later`] selects CNI code 11.
pub fn pod_lookup(req: &LookupRequest<'_>) -> Result<PodInfo, LookupError> {
    let start = Instant::now();
    let kc = req.kubeconfig;
    let sock = req.agent_socket;
    let mut cfg = kubeconfig::load(kc).map_err(LookupError::Kubeconfig)?;
    refresh_if_expiring(req, start, &mut cfg)?;

    let mut retried = false;
    loop {
        let client = Client::new(&cfg).map_err(|source| LookupError::Other {
            kubeconfig: kc.to_owned(),
            source,
        })?;
        match client.get_pod(
            req.namespace,
            req.name,
            left(start, req.deadline).max(Duration::from_millis(1)),
        ) {
            Ok(pod) => return check_pod(req, pod),
            Err(KubeError::Unauthorized) if !retried => {
                retried = true;
                let outcome = AgentClient::request_refresh(
                    sock,
                    "pod lookup got 401",
                    left(start, req.deadline),
                );
                if let Err(KubeError::AgentUnreachable { reason, .. }) = &outcome {
                    return Err(LookupError::AgentUnreachable {
                        kubeconfig: kc.to_owned(),
                        socket: sock.to_owned(),
                        reason: format!("after a 401: {reason}"),
                    });
                }
                let wait = match &outcome {
                    Ok(Outcome::Refreshed { .. }) => left(start, req.deadline) / 2,
                    _ => Duration::ZERO,
                };
                match wait_for_new_token(kc, &cfg, wait) {
                    Some(new) => cfg = new,
                    None => {
                        return Err(LookupError::Unauthorized {
                            kubeconfig: kc.to_owned(),
                            socket: sock.to_owned(),
                            detail: format!("and no new token appeared: {}", describe(&outcome)),
                        })
                    }
                }
            }
            Err(e) => return Err(lookup_error(req, e)),
        }
    }
}

/// A token that is expired or would expire within the call: asks the agent for a refresh first
/// and, when it answers, waits a little for the new token (then `cfg` carries it).
///
/// # Errors
/// [`LookupError::AgentUnreachable`] when the token has already expired and the agent cannot
/// be reached.
fn refresh_if_expiring(
    req: &LookupRequest<'_>,
    start: Instant,
    cfg: &mut ClientConfig,
) -> Result<(), LookupError> {
    let (kc, sock) = (req.kubeconfig, req.agent_socket);
    let exp = cfg.token.expiry().ok().flatten();
    let deadline_secs = i64::try_from(req.deadline.as_secs())
        .unwrap_or(i64::MAX)
        .saturating_add(1);
    let Some(exp) = exp.filter(|e| *e <= unix_now().saturating_add(deadline_secs)) else {
        return Ok(());
    };
    let expired = exp <= unix_now();
    let outcome = AgentClient::request_refresh(
        sock,
        "token in kubeconfig expired or expiring",
        left(start, req.deadline) / 2,
    );
    match (&outcome, expired) {
        (Err(e @ KubeError::AgentUnreachable { .. }), true) => {
            return Err(LookupError::AgentUnreachable {
                kubeconfig: kc.to_owned(),
                socket: sock.to_owned(),
                reason: e.to_string(),
            })
        }
        (Ok(_), _) => {
            if let Some(new) = wait_for_new_token(kc, cfg, left(start, req.deadline) / 4) {
                *cfg = new;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The lookup's error for the API error of its last GET (a 401 here is the one after the
/// refresh).
fn lookup_error(req: &LookupRequest<'_>, e: KubeError) -> LookupError {
    let kubeconfig = req.kubeconfig.to_owned();
    match e {
        KubeError::Unauthorized => LookupError::Unauthorized {
            kubeconfig,
            socket: req.agent_socket.to_owned(),
            detail: "again with the refreshed token".into(),
        },
        KubeError::NotFound { .. } => LookupError::PodGone {
            namespace: req.namespace.into(),
            name: req.name.into(),
        },
        KubeError::Forbidden { message } => LookupError::Forbidden { message },
        source @ KubeError::Timeout(_) => LookupError::Timeout { kubeconfig, source },
        source if source.is_transient() || matches!(source, KubeError::Tls(_)) => {
            LookupError::Unavailable { kubeconfig, source }
        }
        source => LookupError::Other { kubeconfig, source },
    }
}

fn check_pod(req: &LookupRequest<'_>, pod: Pod) -> Result<PodInfo, LookupError> {
    let (namespace, name) = (req.namespace.to_owned(), req.name.to_owned());
    if let Some(expected) = req.uid.filter(|u| !u.is_empty()) {
        if pod.uid != expected {
            return Err(LookupError::UidMismatch {
                namespace,
                name,
                expected: expected.into(),
                found: pod.uid,
            });
        }
    }
    if let Some(since) = pod.deletion_timestamp {
        return Err(LookupError::Terminating {
            namespace,
            name,
            since,
        });
    }
    let ip_addrs = match pod.annotations.get(IP_ADDRS_ANNOTATION) {
        Some(v) => parse_ip_addrs(v).map_err(|reason| LookupError::BadAnnotation {
            namespace,
            name,
            reason,
        })?,
        None => Vec::new(),
    };
    Ok(PodInfo {
        uid: pod.uid,
        ip_addrs,
        node_name: pod.node_name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_annotation() {
        assert_eq!(
            parse_ip_addrs(r#"["10.99.0.7", "fd00::7"]"#).unwrap(),
            vec![
                "10.99.0.7".parse::<IpAddr>().unwrap(),
                "fd00::7".parse().unwrap()
            ]
        );
        assert!(parse_ip_addrs("[]").unwrap().is_empty());
        for bad in [
            "10.0.0.1",
            r#"["10.0.0.300"]"#,
            "[1]",
            r#"["10.0.0.1","10.0.0.1"]"#,
            r#"{"a":1}"#,
        ] {
            assert!(parse_ip_addrs(bad).is_err(), "{bad}");
        }
    }
}

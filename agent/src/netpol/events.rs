//! Events on the NetworkPolicies tern cannot read whole: a Warning on the object, so `kubectl
//! describe networkpolicy` says what the metric `tern_agent_network_policy_unreadable_policies`
//! counts — failed closed (its pods isolated and allowed nothing) or isolating nothing.
//!
//! One writer per fleet without a leader: every agent writes the same Event, named by the policy,
//! the reason and a hash of the error, after a random wait of up to [`SPREAD`]; the first create
//! wins and every later one gets 409 and stops. Each agent tries a given (policy, error) at most
//! [`TRIES`] times; a policy read whole again (or deleted) may be reported again later.
//!
//! Invariant: nothing here holds the store's lock over a request.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tern_kube::time::format_rfc3339;
use tracing::{info, warn};

use super::store::{Shared, Unreadable};
use crate::mint::in_cluster_client;
use crate::schedule::Rng;

/// How often the store's unreadable policies are looked at.
const PERIOD: Duration = Duration::from_secs(5);
/// The longest random wait before an agent's first create of an Event.
const SPREAD: Duration = Duration::from_secs(30);
/// Attempts per (policy, error) before giving up (logged).
const TRIES: u32 = 5;

/// The Event's reason for `why`.
fn reason(why: Unreadable) -> &'static str {
    match why {
        Unreadable::Rules => "PolicyFailedClosed",
        Unreadable::PodSelector => "PolicyUnreadable",
    }
}

/// The Event's name: the policy's name (cut to 200 bytes), the reason and 8 hex digits of a hash
/// of the error; the same on every agent, a DNS subdomain as Event names must be.
pub(super) fn event_name(policy: &str, why: Unreadable, error: &str) -> String {
    let mut cut = policy.len().min(200);
    while !policy.is_char_boundary(cut) {
        cut -= 1;
    }
    let digest = Sha256::digest(error.as_bytes());
    let hash: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}.tern-{}.{hash}",
        policy[..cut].trim_end_matches(['.', '-']),
        reason(why).to_ascii_lowercase()
    )
}

/// The core/v1 Event for policy `namespace/name` (`uid` empty when unknown) at `unix` seconds.
pub(super) fn event_body(
    (namespace, name, uid): (&str, &str, &str),
    (why, error): (Unreadable, &str),
    node: &str,
    unix: i64,
) -> Value {
    let what = match why {
        Unreadable::Rules => "its rules cannot be read; the pods it selects are isolated in the directions it names and allowed nothing until it can be read",
        Unreadable::PodSelector => "its podSelector cannot be read; it isolates no pod",
    };
    let mut message = format!("tern-agent: {what} ({error})");
    if message.len() > 1000 {
        let mut cut = 1000;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    let mut object = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "namespace": namespace, "name": name});
    if !uid.is_empty() {
        object["uid"] = json!(uid);
    }
    let at = format_rfc3339(unix);
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(name, why, error), "namespace": namespace},
        "involvedObject": object,
        "type": "Warning",
        "reason": reason(why),
        "message": message,
        "source": {"component": "tern-agent", "host": node},
        "firstTimestamp": at,
        "lastTimestamp": at,
        "count": 1,
    })
}

/// Writes the Event of one policy: its uid from its namespace's list (the agent may list
/// NetworkPolicies, not get one), then the create. `Ok` when the Event exists now or the policy
/// is gone.
fn post(s: &Shared, key: &str, (why, error): (Unreadable, &str)) -> Result<(), String> {
    let (namespace, name) = key.split_once('/').ok_or("not namespace/name")?;
    let timeout = s.run.api.request_timeout;
    let (client, _) = in_cluster_client(&s.run.api).map_err(|e| e.to_string())?;
    let list = client
        .list_objects(
            &format!("/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies"),
            timeout,
        )
        .map_err(|e| e.to_string())?;
    let Some(obj) = list
        .items
        .iter()
        .find(|v| v["metadata"]["name"].as_str() == Some(name))
    else {
        return Ok(());
    };
    let uid = obj["metadata"]["uid"].as_str().unwrap_or_default();
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let body = event_body((namespace, name, uid), (why, error), &s.cfg.node_name, unix);
    let created = client
        .create_event(namespace, &body, timeout)
        .map_err(|e| e.to_string())?;
    if created {
        info!(policy = %key, reason = reason(why), "network policy: Event written on the policy");
    }
    Ok(())
}

/// One (policy, error) being reported: when it is due and how many attempts failed.
struct Pending {
    due: Instant,
    failures: u32,
    done: bool,
}

/// The Events thread: runs until the controller stops.
pub(super) fn run(s: &Shared) {
    let mut rng = Rng::from_entropy();
    let mut pending: BTreeMap<(String, String), Pending> = BTreeMap::new();
    while !s.stop.sleep(PERIOD) {
        let now: Vec<(String, Unreadable, String)> = s
            .store()
            .unreadable
            .iter()
            .map(|(k, (why, e))| (k.clone(), *why, e.clone()))
            .collect();
        pending.retain(|(k, e), _| now.iter().any(|(k2, _, e2)| k == k2 && e == e2));
        for (key, why, error) in now {
            let p = pending
                .entry((key.clone(), error.clone()))
                .or_insert_with(|| Pending {
                    due: Instant::now() + SPREAD.mul_f64(rng.unit()),
                    failures: 0,
                    done: false,
                });
            if p.done || Instant::now() < p.due {
                continue;
            }
            match post(s, &key, (why, &error)) {
                Ok(()) => p.done = true,
                Err(e) => {
                    p.failures += 1;
                    p.done = p.failures >= TRIES;
                    p.due = Instant::now() + PERIOD * 2u32.pow(p.failures);
                    warn!(policy = %key, error = %e, attempt = p.failures, "network policy: cannot write the Event on an unreadable policy");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_agent_names_the_event_alike_and_validly() {
        let a = event_name("web-deny", Unreadable::PodSelector, "bad selector");
        assert_eq!(
            a,
            event_name("web-deny", Unreadable::PodSelector, "bad selector")
        );
        assert!(a.starts_with("web-deny.tern-policyunreadable."), "{a}");
        assert_ne!(a, event_name("web-deny", Unreadable::PodSelector, "other"));
        assert_ne!(a, event_name("web-deny", Unreadable::Rules, "bad selector"));
        let long = event_name(&"x".repeat(253), Unreadable::Rules, "e");
        assert!(long.len() <= 253, "{}", long.len());
        assert!(long
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-'));
    }

    #[test]
    fn the_event_names_the_policy_and_what_became_of_it() {
        let e = event_body(
            ("team-a", "web", "u-1"),
            (Unreadable::Rules, "spec.ingress[0].ports: bad"),
            "node-1",
            0,
        );
        assert_eq!(e["involvedObject"]["kind"], "NetworkPolicy");
        assert_eq!(e["involvedObject"]["namespace"], "team-a");
        assert_eq!(e["involvedObject"]["name"], "web");
        assert_eq!(e["involvedObject"]["uid"], "u-1");
        assert_eq!(e["metadata"]["namespace"], "team-a");
        assert_eq!(e["type"], "Warning");
        assert_eq!(e["reason"], "PolicyFailedClosed");
        assert_eq!(e["firstTimestamp"], "1970-01-01T00:00:00Z");
        let m = e["message"].as_str().unwrap();
        assert!(
            m.contains("isolated") && m.contains("spec.ingress[0].ports: bad"),
            "{m}"
        );
        let huge = event_body(
            ("n", "p", ""),
            (Unreadable::PodSelector, &"é".repeat(900)),
            "n",
            0,
        );
        assert!(huge["message"].as_str().unwrap().len() <= 1000);
        assert!(huge["involvedObject"].get("uid").is_none());
    }
}

//! One watcher per kind: list, replace that kind in the store, then watch from the list's
//! resourceVersion (with bookmarks), applying each event; list again on 410 Gone, resume a broken
//! watch from the last resourceVersion seen, and back off with the agent's retry policy on errors.
//!
//! Invariant: the store only changes by a list or an event; an API server that is down leaves
//! the store (and so the table) as it is.

use serde_json::Value;
use tern_kube::client::objects::{key_of, resource_version_of, ObjectEvent};
use tern_kube::KubeError;
use tracing::{debug, info, warn};

use super::model::{namespace_from_json, pod_from_json, policy_from_json};
use super::store::{Kind, Shared, Store};
use crate::mint::in_cluster_client;
use crate::schedule::Rng;

/// Puts one object into the store (`None`: removes it); false when it did not parse.
fn put(store: &mut Store, kind: Kind, key: String, obj: Option<&Value>) -> bool {
    let Some(v) = obj else {
        match kind {
            Kind::Pods => store.pods.remove(&key).is_some(),
            Kind::Namespaces => store.namespaces.remove(&key).is_some(),
            Kind::Policies => store.policies.remove(&key).is_some(),
        };
        if kind == Kind::Pods {
            store.settle_admitted(&key);
        }
        store.generation += 1;
        return true;
    };
    let ok = match kind {
        Kind::Pods => match pod_from_json(v) {
            Ok(p) => {
                store.pods.insert(key.clone(), p);
                store.settle_admitted(&key);
                true
            }
            Err(_) => false,
        },
        Kind::Namespaces => namespace_from_json(v)
            .map(|n| store.namespaces.insert(key, n))
            .is_ok(),
        // A policy that does not parse is dropped: a stale version of it would be wrong too.
        Kind::Policies => match policy_from_json(v) {
            Ok(p) => {
                store.policies.insert(key, p);
                true
            }
            Err(e) => {
                warn!(policy = %key, error = %e, "network policy: cannot read this NetworkPolicy; it is not enforced");
                store.policies.remove(&key);
                false
            }
        },
    };
    store.generation += 1;
    ok
}

/// Replaces every object of `kind` with a fresh list.
fn replace(store: &mut Store, kind: Kind, items: &[Value]) -> u64 {
    match kind {
        Kind::Pods => store.pods.clear(),
        Kind::Namespaces => store.namespaces.clear(),
        Kind::Policies => store.policies.clear(),
    }
    let bad = items
        .iter()
        .filter(|v| !put(store, kind, key_of(v), Some(v)))
        .count();
    if kind == Kind::Pods {
        let keys: Vec<String> = store.admitted.keys().cloned().collect();
        for key in keys {
            store.settle_admitted(&key);
        }
    }
    store.mark_listed(kind);
    bad as u64
}

struct Loop<'a> {
    s: &'a Shared,
    kind: Kind,
    rv: Option<String>,
    failures: u32,
    rng: Rng,
}

impl Loop<'_> {
    fn failed(&mut self, what: &str, e: &KubeError) -> bool {
        let delay = self.s.run.api_failure(
            &mut self.failures,
            &mut self.s.stats().api_errors,
            e,
            &mut self.rng,
        );
        warn!(kind = self.kind.label(), error = %e, retry_in = ?delay, "network policy: {what} failed; the table is unchanged");
        self.s.stop.sleep(delay)
    }

    fn decode_error(&self, n: u64) {
        if n > 0 {
            *self
                .s
                .stats()
                .decode_errors
                .entry(self.kind.label())
                .or_insert(0) += n;
        }
    }

    fn list(&mut self, client: &tern_kube::Client) -> Result<(), KubeError> {
        let list = client.list_objects(self.kind.collection(), self.s.run.api.request_timeout)?;
        info!(kind = self.kind.label(), items = list.items.len(), resource_version = %list.resource_version, "network policy: listed");
        let bad = replace(&mut self.s.store(), self.kind, &list.items);
        self.s.notify();
        self.decode_error(bad);
        self.rv = Some(list.resource_version);
        Ok(())
    }

    fn watch(&mut self, client: &tern_kube::Client, rv: &str) -> Result<(), KubeError> {
        let cfg = &self.s.cfg;
        let mut w = client.watch_objects(
            self.kind.collection(),
            rv,
            cfg.watch_timeout.as_secs().max(1),
            self.s.run.api.request_timeout,
            cfg.watch_idle,
        )?;
        debug!(
            kind = self.kind.label(),
            resource_version = rv,
            "network policy: watching"
        );
        while !self.s.stop.is_stopped() {
            let Some(event) = w.next_event()? else {
                return Ok(());
            };
            self.failures = 0;
            match event {
                ObjectEvent::Applied(v) => {
                    self.rv = Some(resource_version_of(&v));
                    let ok = put(&mut self.s.store(), self.kind, key_of(&v), Some(&v));
                    self.s.notify();
                    self.decode_error(u64::from(!ok));
                }
                ObjectEvent::Deleted(v) => {
                    self.rv = Some(resource_version_of(&v));
                    put(&mut self.s.store(), self.kind, key_of(&v), None);
                    self.s.notify();
                }
                ObjectEvent::Bookmark(rv) => self.rv = Some(rv),
                ObjectEvent::Gone => {
                    info!(
                        kind = self.kind.label(),
                        "network policy: resourceVersion too old (410 Gone); listing again"
                    );
                    self.rv = None;
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// A watcher thread: runs until the controller stops.
pub(super) fn run(s: &Shared, kind: Kind) {
    let mut l = Loop {
        s,
        kind,
        rv: None,
        failures: 0,
        rng: Rng::from_entropy(),
    };
    while !s.stop.is_stopped() {
        // Credentials are re-read per connection: the kubelet rotates the agent's token.
        let client = match in_cluster_client(&s.run.api) {
            Ok((c, _)) => c,
            Err(e) => {
                if l.failed("reading the agent's credentials", &e) {
                    return;
                }
                continue;
            }
        };
        let result = match l.rv.clone() {
            None => l.list(&client),
            Some(rv) => l.watch(&client, &rv),
        };
        match result {
            Ok(()) => l.failures = 0,
            Err(KubeError::UnexpectedStatus { code: 410, .. }) => l.rv = None,
            Err(e) => {
                let what = if l.rv.is_none() {
                    "listing"
                } else {
                    "watching"
                };
                if l.failed(what, &e) {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_replace_events_change_and_bad_policies_are_dropped() {
        let mut st = Store::default();
        let pod = |name: &str| json!({"metadata": {"namespace": "x", "name": name}, "status": {"podIP": "10.0.0.1"}});
        assert_eq!(replace(&mut st, Kind::Pods, &[pod("a"), pod("b")]), 0);
        assert!(!st.synced());
        replace(
            &mut st,
            Kind::Namespaces,
            &[json!({"metadata": {"name": "x"}})],
        );
        let good =
            json!({"metadata": {"namespace": "x", "name": "p"}, "spec": {"podSelector": {}}});
        replace(&mut st, Kind::Policies, std::slice::from_ref(&good));
        assert!(st.synced());
        assert_eq!(st.pods.len(), 2);
        assert_eq!(replace(&mut st, Kind::Pods, &[pod("c")]), 0);
        assert_eq!(st.pods.keys().collect::<Vec<_>>(), ["x/c"]);
        let g = st.generation;
        assert!(put(&mut st, Kind::Pods, "x/c".into(), None));
        assert!(st.pods.is_empty() && st.generation > g);
        let bad = json!({"metadata": {"namespace": "x", "name": "p"},
            "spec": {"ingress": [{"from": [{"ipBlock": {"cidr": "nonsense"}}]}]}});
        assert!(!put(&mut st, Kind::Policies, "x/p".into(), Some(&bad)));
        assert!(st.policies.is_empty(), "the old version is not kept");
        assert!(put(&mut st, Kind::Policies, "x/p".into(), Some(&good)));
        assert_eq!(st.policies.len(), 1);
    }

    #[test]
    fn admitted_addresses_stay_until_the_api_shows_them_or_the_pod_goes() {
        use crate::netpol::store::AdmittedPod;
        let mut st = Store::default();
        let pod = |uid: &str, ip: Option<&str>| {
            let status = ip.map_or(json!({}), |ip| json!({"podIPs": [{"ip": ip}]}));
            json!({"metadata": {"namespace": "x", "name": "a", "uid": uid},
                "spec": {"nodeName": "n1"}, "status": status})
        };
        let admit = |st: &mut Store| {
            st.admitted.insert(
                "x/a".into(),
                AdmittedPod {
                    uid: "u1".into(),
                    ips: vec!["10.0.0.9".parse().unwrap()],
                },
            );
        };
        replace(&mut st, Kind::Pods, &[pod("u1", None)]);
        admit(&mut st);
        assert_eq!(
            st.pods_with_admitted()[0].ips,
            ["10.0.0.9".parse::<std::net::IpAddr>().unwrap()]
        );
        // An update without addresses, or with stale ones of an earlier sandbox, keeps them.
        put(&mut st, Kind::Pods, "x/a".into(), Some(&pod("u1", None)));
        put(
            &mut st,
            Kind::Pods,
            "x/a".into(),
            Some(&pod("u1", Some("10.0.0.5"))),
        );
        assert_eq!(st.pods_with_admitted()[0].ips[0].to_string(), "10.0.0.9");
        // The kubelet posted them: the API is the source again.
        put(
            &mut st,
            Kind::Pods,
            "x/a".into(),
            Some(&pod("u1", Some("10.0.0.9"))),
        );
        assert!(st.admitted.is_empty());
        // Another pod of that name, a delete, or a relist without it: dropped.
        admit(&mut st);
        put(&mut st, Kind::Pods, "x/a".into(), Some(&pod("u2", None)));
        assert!(st.admitted.is_empty());
        admit(&mut st);
        put(&mut st, Kind::Pods, "x/a".into(), None);
        assert!(st.admitted.is_empty());
        admit(&mut st);
        replace(&mut st, Kind::Pods, &[]);
        assert!(st.admitted.is_empty());
    }
}

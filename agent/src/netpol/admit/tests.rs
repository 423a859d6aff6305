use std::sync::Arc;

use serde_json::{json, Value};
use tern_netpol::model::{namespace_from_json, pod_from_json, policy_from_json};

use super::*;
use crate::netpol::store::Kind;
use crate::netpol::sync::tests::shared;

mod kernel;

fn pod(name: &str, app: &str, node: &str, ips: &[&str]) -> Value {
    let ips: Vec<Value> = ips.iter().map(|i| json!({"ip": i})).collect();
    json!({"metadata": {"namespace": "x", "name": name, "uid": format!("uid-{name}"),
        "labels": {"app": app}}, "spec": {"nodeName": node}, "status": {"podIPs": ips}})
}

/// A store listed once: namespace x, a deny-all ingress policy for `app: web`, and `pods`.
fn listed(s: &Shared, pods: &[Value]) {
    let mut st = s.store();
    for p in pods {
        let p = pod_from_json(p).unwrap();
        st.put_pod(&format!("x/{}", p.name), Some(&Arc::new(p.into())));
    }
    let ns = namespace_from_json(&json!({"metadata": {"name": "x"}})).unwrap();
    st.engine.set_namespace("x", Some(&ns));
    let deny = policy_from_json(&json!({"metadata": {"namespace": "x", "name": "deny"},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}}}}))
    .unwrap();
    st.engine.set_policy("x/deny", Some(Arc::new(deny)));
    for k in Kind::ALL {
        st.mark_listed(k);
    }
}

fn req(name: &str, ips: &[&str]) -> AdmitRequest {
    AdmitRequest {
        namespace: "x".into(),
        name: name.into(),
        uid: Some(format!("uid-{name}")),
        ips: ips.iter().map(|i| i.parse().unwrap()).collect(),
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_millis(50)
}

fn later() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

/// Waits (bounded) until `cond` holds on the store.
fn until_store(s: &Shared, cond: impl Fn(&Store) -> bool) {
    let end = Instant::now() + Duration::from_secs(30);
    let mut st = s.store();
    while !cond(&st) {
        assert!(Instant::now() < end, "the store never got there");
        st = s
            .changed
            .wait_timeout(st, Duration::from_millis(10))
            .unwrap()
            .0;
    }
}

#[test]
fn a_pod_no_policy_selects_is_admitted_at_once() {
    let s = shared();
    listed(&s, &[pod("cli", "cli", "n1", &[])]);
    // Nothing will ever apply a table here: the answer cannot depend on one.
    assert_eq!(admit(&s, &req("cli", &["10.0.1.3"]), later()), Ok(false));
    let st = s.store();
    assert_eq!(st.admitted["x/cli"].ips[0].to_string(), "10.0.1.3");
    assert!(st.generation > st.applied, "the table learns it later");
}

#[test]
fn a_selected_pod_waits_for_the_table_that_isolates_it() {
    let s = Arc::new(shared());
    listed(&s, &[pod("web", "web", "n1", &[])]);
    // No syncer: the wait ends unanswered, and the addresses are not kept.
    let e = admit(&s, &req("web", &["10.0.1.2"]), soon()).unwrap_err();
    assert!(e.contains("not in the kernel yet"), "{e}");
    assert!(s.store().admitted.is_empty());

    let s2 = Arc::clone(&s);
    let waiting =
        std::thread::spawn(move || admit(&s2, &req("web", &["10.0.1.2", "fd00::2"]), later()));
    until_store(&s, |st| st.admitted.contains_key("x/web"));
    {
        // What the syncer does once the table for this generation is in the kernel.
        let mut st = s.store();
        st.applied = st.generation;
    }
    s.notify();
    assert_eq!(waiting.join().unwrap(), Ok(true));
}

#[test]
fn the_pod_watch_is_waited_for_then_the_pod_must_be_this_one_on_this_node() {
    let s = Arc::new(shared());
    listed(&s, &[]);
    let s2 = Arc::clone(&s);
    let waiting = std::thread::spawn(move || admit(&s2, &req("cli", &["10.0.1.3"]), later()));
    {
        let mut st = s.store();
        st.put_pod(
            "x/cli",
            Some(&Arc::new(
                pod_from_json(&pod("cli", "cli", "n1", &[])).unwrap().into(),
            )),
        );
        st.generation += 1;
    }
    s.notify();
    assert_eq!(waiting.join().unwrap(), Ok(false));

    let e = admit(&s, &req("gone", &["10.0.1.4"]), soon()).unwrap_err();
    assert!(e.contains("has not shown the pod"), "{e}");
    let mut other = req("cli", &["10.0.1.3"]);
    other.uid = Some("uid-earlier".into());
    let e = admit(&s, &other, soon()).unwrap_err();
    assert!(e.contains("UID"), "{e}");
    s.store().put_pod(
        "x/far",
        Some(&Arc::new(
            pod_from_json(&pod("far", "cli", "n2", &[])).unwrap().into(),
        )),
    );
    let e = admit(&s, &req("far", &["10.0.2.3"]), soon()).unwrap_err();
    assert!(e.contains("not this node"), "{e}");
}

#[test]
fn nothing_is_admitted_before_every_kind_is_listed_or_without_addresses() {
    let s = shared();
    s.store().mark_listed(Kind::Pods);
    let e = admit(&s, &req("cli", &["10.0.1.3"]), soon()).unwrap_err();
    assert!(e.contains("has not listed"), "{e}");
    listed(&s, &[pod("cli", "cli", "n1", &[])]);
    let e = admit(&s, &req("cli", &[]), later()).unwrap_err();
    assert!(e.contains("1 to 8 addresses"), "{e}");
    assert!(s.store().admitted.is_empty());
}

#[test]
fn a_stopping_agent_answers_failed() {
    let s = Arc::new(shared());
    listed(&s, &[pod("web", "web", "n1", &[])]);
    let s2 = Arc::clone(&s);
    let waiting = std::thread::spawn(move || admit(&s2, &req("web", &["10.0.1.2"]), later()));
    until_store(&s, |st| st.admitted.contains_key("x/web"));
    s.stop.stop();
    {
        let _g = s.store();
        s.notify();
    }
    let e = waiting.join().unwrap().unwrap_err();
    assert!(e.contains("stopping"), "{e}");
    assert!(s.store().admitted.is_empty());
}

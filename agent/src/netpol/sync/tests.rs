use serde_json::json;
use tern_netpol::model::{pod_from_json, policy_from_json};

use super::*;
use crate::netpol::config::NetpolConfig;
use crate::netpol::store::Kind;

pub(crate) fn shared() -> Shared {
    shared_logging(None)
}

/// A fresh controller state whose table logs denied connections as `log` says.
pub(crate) fn shared_logging(log: Option<tern_netpol::ruleset::LogDenied>) -> Shared {
    Shared::new(
        crate::mint::ControllerSettings {
            api: crate::mint::ApiAccess {
                api_server: "https://127.0.0.1:1".into(),
                sa_dir: "/nonexistent".into(),
                request_timeout: Duration::from_secs(1),
            },
            policy: crate::schedule::Policy::default(),
            kubeconfig: "/nonexistent/kubeconfig".into(),
        },
        NetpolConfig {
            node_name: "n1".into(),
            resync: Duration::from_secs(30),
            watch_timeout: Duration::from_secs(60),
            watch_idle: Duration::from_secs(180),
            log_denied: log,
            cluster: false,
        },
    )
}

/// Waits (bounded) until the kernel table is known to reflect the store.
fn until_applied(s: &Shared) {
    let end = Instant::now() + Duration::from_secs(30);
    let mut st = s.store();
    while st.applied < st.generation || st.applied == 0 {
        assert!(Instant::now() < end, "the syncer never applied");
        st = s.changed.wait_timeout(st, TICK).unwrap().0;
    }
}

/// (compiles, applies) so far.
fn work(s: &Shared) -> (u64, u64) {
    let st = s.stats();
    (st.compiles, st.applies)
}

#[test]
fn events_that_change_nothing_cost_no_compile_and_no_transaction() {
    use crate::netpol::admit::{admit, AdmitRequest};
    use crate::netpol::watch::json::{put, replace};
    use std::os::unix::fs::PermissionsExt as _;
    use std::sync::Arc;

    // An nft that takes every script and lists a fixed table: what is counted here is the
    // syncer's work, not the kernel's.
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("nft");
    std::fs::write(
        &bin,
        "#!/bin/sh\n[ \"$1\" = -f ] && { cat >/dev/null; exit 0; }\necho 'table inet tern_netpol {'; echo '}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();

    let web = |rv: usize, app: &str| {
        json!({"metadata": {"namespace": "x", "name": "web", "uid": "u1",
                "resourceVersion": rv.to_string(), "labels": {"app": app}},
            "spec": {"nodeName": "n1"},
            "status": {"podIPs": [{"ip": "10.0.0.2"}],
                "conditions": [{"type": "Ready", "status": if rv.is_multiple_of(2) { "True" } else { "False" }}]}})
    };
    let ns = json!({"metadata": {"name": "x"}});
    let deny = json!({"metadata": {"namespace": "x", "name": "deny"},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}}}});
    let list_all = |s: &Shared, rv: usize| {
        let mut st = s.store();
        replace(&mut st, Kind::Pods, &[web(rv, "web")]);
        replace(&mut st, Kind::Namespaces, std::slice::from_ref(&ns));
        replace(&mut st, Kind::Policies, std::slice::from_ref(&deny));
    };
    let s = Arc::new(shared());
    list_all(&s, 1);
    let s2 = Arc::clone(&s);
    let nft = Nft::at(&bin);
    let syncer = std::thread::spawn(move || run(&s2, &nft, false));
    until_applied(&s);
    let before = work(&s);
    let generation = s.store().generation;
    assert!(before.0 >= 1 && before.1 >= 1, "{before:?}");

    // K status writes of the pod and a relist after 410 Gone that finds the same: nothing.
    for rv in 2..52 {
        let v = web(rv, "web");
        assert!(!put(&mut s.store(), Kind::Pods, "x/web".into(), Some(&v)).changed);
        s.notify();
    }
    list_all(&s, 60);
    s.notify();
    std::thread::sleep(TICK * 4);
    assert_eq!(work(&s), before, "compiles and applies");
    assert_eq!(s.store().generation, generation);

    // An admission whose addresses the API already showed (the event that carried them
    // changed nothing since): answered, by a compile of its own and no transaction.
    let req = AdmitRequest {
        namespace: "x".into(),
        name: "web".into(),
        uid: Some("u1".into()),
        ips: vec!["10.0.0.2".parse().unwrap()],
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    assert_eq!(admit(&s, &req, deadline), Ok(true));
    let (compiles, applies) = work(&s);
    assert_eq!((compiles, applies), (before.0 + 1, before.1));

    // A label the compiler reads: one compile, one transaction (web is no longer isolated).
    put(
        &mut s.store(),
        Kind::Pods,
        "x/web".into(),
        Some(&web(70, "db")),
    );
    s.notify();
    until_applied(&s);
    let after = work(&s);
    assert!(after.0 > compiles && after.1 > applies, "{after:?}");
    assert_eq!(s.stats().size.pods, 0);

    s.stop.stop();
    {
        let _g = s.store();
        s.notify();
    }
    syncer.join().unwrap();
}

#[test]
fn nothing_is_compiled_before_every_kind_is_listed() {
    let s = shared();
    {
        let mut st = s.store();
        let pod = pod_from_json(&json!({"metadata": {"namespace": "x", "name": "a"},
            "spec": {"nodeName": "n1"}, "status": {"podIP": "10.0.0.2"}}))
        .unwrap();
        st.put_pod("x/a", Some(&std::sync::Arc::new(pod.into())));
        let pol = policy_from_json(&json!({"metadata": {"namespace": "x", "name": "deny"},
            "spec": {"podSelector": {}}}))
        .unwrap();
        st.engine
            .set_policy("x/deny", Some(std::sync::Arc::new(pol)));
        st.mark_listed(Kind::Pods);
        st.mark_listed(Kind::Policies);
    }
    // A restarted agent that has not listed Namespaces yet keeps the old table: an early
    // compile would miss every namespaceSelector peer.
    assert!(compile(&s, true).is_none());
    s.store().mark_listed(Kind::Namespaces);
    let c = compile(&s, true).unwrap();
    assert_eq!((c.size.pods, c.policies, c.change), (1, 1, Change::Replace));
    assert!(c.script.contains("10.0.0.2 : jump in_"), "{}", c.script);
    assert!(
        c.script
            .starts_with("add table inet tern_netpol\ndelete table"),
        "{}",
        c.script
    );
}

#[test]
fn the_drift_check_restores_only_what_someone_else_changed() {
    use super::drift::{Check, DriftState};
    use std::os::unix::fs::PermissionsExt as _;
    // An nft whose listing is a file the test writes.
    let dir = tempfile::tempdir().unwrap();
    let listed = dir.path().join("listed");
    let bin = dir.path().join("nft");
    std::fs::write(&listed, "table inet tern_netpol { v1 }\n").unwrap();
    std::fs::write(&bin, format!("#!/bin/sh\ncat {}\n", listed.display())).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let nft = Nft::at(&bin);
    let (state, mut k) = (DriftState::default(), Check::default());
    assert!(
        !k.drifted(&state, &nft),
        "no table of ours yet: nothing to compare"
    );
    // Ours applied: the first check only takes the reference.
    state.transaction_starts();
    state.transaction_ended(true);
    assert!(!k.drifted(&state, &nft));
    assert!(!k.drifted(&state, &nft), "the same listing");
    // Someone else changed it.
    std::fs::write(&listed, "table inet tern_netpol { edited }\n").unwrap();
    assert!(k.drifted(&state, &nft));
    // Restored by a replace (a transaction of ours): the next check takes a new reference.
    std::fs::write(&listed, "table inet tern_netpol { v1 }\n").unwrap();
    state.transaction_starts();
    state.transaction_ended(true);
    assert!(!k.drifted(&state, &nft));
    // A change of ours between two checks is no drift, whatever the listing.
    std::fs::write(&listed, "table inet tern_netpol { v2 }\n").unwrap();
    state.transaction_starts();
    state.transaction_ended(true);
    assert!(!k.drifted(&state, &nft));
    assert!(!k.drifted(&state, &nft));
    // A listing while a transaction of ours runs is never drift, and is no reference.
    state.transaction_starts();
    std::fs::write(&listed, "table inet tern_netpol { half-way }\n").unwrap();
    assert!(!k.drifted(&state, &nft));
    state.transaction_ended(true);
    assert!(!k.drifted(&state, &nft));
    // A refused transaction: the table is not ours, nothing to compare.
    state.transaction_starts();
    state.transaction_ended(false);
    std::fs::write(&listed, "table inet tern_netpol { other }\n").unwrap();
    assert!(!k.drifted(&state, &nft));
}

#[test]
fn the_drift_check_takes_at_most_a_fiftieth_of_the_time() {
    use super::drift::next_wait;
    let resync = Duration::from_secs(30);
    assert_eq!(next_wait(resync, Duration::from_millis(200)), resync);
    assert_eq!(
        next_wait(resync, Duration::from_secs(20)),
        Duration::from_secs(1000)
    );
}

mod kernel;

use super::json::{put as put_json, replace as replace_json};
use super::*;
use serde_json::{json, Value};
use tern_kube::client::objects::key_of;

#[test]
fn lists_replace_events_change_and_bad_policies_fail_closed() {
    let mut st = Store::new("n1", None, false);
    let pod = |name: &str| json!({"metadata": {"namespace": "x", "name": name}, "status": {"podIP": "10.0.0.1"}});
    assert_eq!(
        replace_json(&mut st, Kind::Pods, &[pod("a"), pod("b")]).unread,
        0
    );
    assert!(!st.synced());
    replace_json(
        &mut st,
        Kind::Namespaces,
        &[json!({"metadata": {"name": "x"}})],
    );
    let good = json!({"metadata": {"namespace": "x", "name": "p"}, "spec": {"podSelector": {}}});
    replace_json(&mut st, Kind::Policies, std::slice::from_ref(&good));
    assert!(st.synced());
    assert_eq!(st.engine.pod_keys().count(), 2);
    assert_eq!(replace_json(&mut st, Kind::Pods, &[pod("c")]).unread, 0);
    assert_eq!(st.engine.pod_keys().collect::<Vec<_>>(), ["x/c"]);
    let g = st.generation;
    assert!(put_json(&mut st, Kind::Pods, "x/c".into(), None).changed);
    assert!(st.engine.pod_keys().next().is_none() && st.generation > g);
    // Rules that cannot be read: kept as a deny-all of what it selects (never the old
    // version, never nothing).
    let bad = json!({"metadata": {"namespace": "x", "name": "p"},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"ipBlock": {"cidr": "nonsense"}}]}]}});
    let p = put_json(&mut st, Kind::Policies, "x/p".into(), Some(&bad));
    assert!(!p.read && p.changed);
    let closed = st.engine.policy("x/p").unwrap();
    assert!(closed.ingress_isolates && closed.ingress.is_empty());
    assert_eq!(closed.pod_selector.match_labels["app"], "web");
    assert_eq!(st.unreadable["x/p"].0, Unreadable::Rules);
    assert_eq!(st.unreadable_counts(false)["rules"], 1);
    assert!(put_json(&mut st, Kind::Policies, "x/p".into(), Some(&good)).read);
    assert_eq!(st.engine.policy_keys().count(), 1);
    assert!(st.unreadable.is_empty());
}

fn web(rv: &str, extra: &Value) -> Value {
    let mut v = json!({"metadata": {"namespace": "x", "name": "web", "uid": "u1",
            "resourceVersion": rv, "labels": {"app": "web"}},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.2"}]}});
    json_patch(&mut v, extra);
    v
}

/// Merges `patch` into `v` (objects merged key by key, anything else replaced).
fn json_patch(v: &mut Value, patch: &Value) {
    match (v, patch) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, pv) in b {
                json_patch(a.entry(k.clone()).or_insert(Value::Null), pv);
            }
        }
        (v, p) => *v = p.clone(),
    }
}

#[test]
fn events_that_change_nothing_the_compiler_reads_leave_the_generation() {
    let mut st = Store::new("n1", None, false);
    let ns = json!({"metadata": {"name": "x", "resourceVersion": "1"}});
    replace_json(&mut st, Kind::Pods, &[web("1", &json!({}))]);
    replace_json(&mut st, Kind::Namespaces, std::slice::from_ref(&ns));
    replace_json(&mut st, Kind::Policies, &[]);
    let g = st.generation;
    let unchanged = [
        web("1", &json!({})),
        web("1", &json!({})),
        web("2", &json!({})),
        web(
            "3",
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        ),
        web(
            "4",
            &json!({"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now"}}}),
        ),
        web(
            "5",
            &json!({"metadata": {"managedFields": [{"manager": "kubelet"}]}}),
        ),
    ];
    for v in &unchanged {
        let p = put_json(&mut st, Kind::Pods, key_of(v), Some(v));
        assert!(!p.changed && p.unchanged(Kind::Pods), "{v}");
    }
    let p = put_json(
        &mut st,
        Kind::Namespaces,
        "x".into(),
        Some(&json!({"metadata": {"name": "x", "resourceVersion": "9"}})),
    );
    assert!(p.unchanged(Kind::Namespaces));
    // A delete of what the store does not hold.
    assert!(put_json(&mut st, Kind::Pods, "x/gone".into(), None).unchanged(Kind::Pods));
    assert_eq!(st.generation, g);
    // A relist (after 410 Gone) that finds the same objects.
    let r = replace_json(&mut st, Kind::Pods, &[web("7", &json!({}))]);
    assert_eq!((r.changed, r.unchanged, r.unread), (false, 1, 0));
    assert!(!replace_json(&mut st, Kind::Namespaces, std::slice::from_ref(&ns)).changed);
    assert!(!replace_json(&mut st, Kind::Policies, &[]).changed);
    assert_eq!(st.generation, g);
    // A Pod that does not parse is a decode error, not an unchanged event.
    let broken = web("8", &json!({"spec": {"containers": 5}}));
    let p = put_json(&mut st, Kind::Pods, "x/web".into(), Some(&broken));
    assert!(!p.read && !p.unchanged(Kind::Pods));
    assert_eq!(st.generation, g);

    // What the compiler reads: labels, addresses, node, named ports, UID.
    for (i, extra) in [
        json!({"metadata": {"labels": {"app": "db"}}}),
        json!({"status": {"podIPs": [{"ip": "10.0.0.3"}]}}),
        json!({"status": {"phase": "Succeeded"}}),
        json!({"spec": {"containers": [{"ports": [{"name": "http", "containerPort": 80}]}]}}),
        json!({"metadata": {"uid": "u2"}}),
    ]
    .iter()
    .enumerate()
    {
        let g = st.generation;
        let v = web(&format!("1{i}"), extra);
        assert!(
            put_json(&mut st, Kind::Pods, key_of(&v), Some(&v)).changed,
            "{v}"
        );
        assert_eq!(st.generation, g + 1, "{v}");
    }
    // A relist that differs: one bump.
    let g = st.generation;
    let r = replace_json(
        &mut st,
        Kind::Pods,
        &[
            web("20", &json!({})),
            web("20", &json!({"metadata": {"name": "b"}})),
        ],
    );
    assert!(r.changed);
    assert_eq!(st.generation, g + 1);
    // A relist that lost an object.
    let r = replace_json(&mut st, Kind::Pods, &[web("21", &json!({}))]);
    assert!(r.changed && r.unchanged == 1);
}

#[test]
fn a_policy_whose_pod_selector_cannot_be_read_isolates_nothing_and_is_counted() {
    let mut st = Store::new("n1", None, false);
    let bad = json!({"metadata": {"namespace": "x", "name": "p"},
        "spec": {"podSelector": {"matchLabels": "app=web"}}});
    let r = replace_json(&mut st, Kind::Policies, std::slice::from_ref(&bad));
    assert_eq!((r.changed, r.unread), (true, 1), "the first list");
    assert!(st.engine.policy_keys().next().is_none());
    assert_eq!(st.unreadable["x/p"].0, Unreadable::PodSelector);
    let counts = st.unreadable_counts(false);
    assert_eq!((counts["pod_selector"], counts["rules"]), (1, 0));
    // Seen again (a relist): nothing moves, logged once.
    let g = st.generation;
    let p = put_json(&mut st, Kind::Policies, "x/p".into(), Some(&bad));
    assert!(!p.read && !p.changed);
    assert_eq!(st.generation, g);
    // A readable version that was enforced, then broken: dropped, not kept.
    let good = json!({"metadata": {"namespace": "x", "name": "p"},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}}}});
    assert!(put_json(&mut st, Kind::Policies, "x/p".into(), Some(&good)).changed);
    assert!(st.unreadable.is_empty());
    assert!(put_json(&mut st, Kind::Policies, "x/p".into(), Some(&bad)).changed);
    assert!(st.engine.policy_keys().next().is_none());
    // Its delete, or a relist without it, clears the count.
    put_json(&mut st, Kind::Policies, "x/p".into(), None);
    assert!(st.unreadable.is_empty());
    replace_json(&mut st, Kind::Policies, std::slice::from_ref(&bad));
    replace_json(&mut st, Kind::Policies, &[]);
    assert_eq!(st.unreadable_counts(false)["pod_selector"], 0);
}

#[test]
fn admitted_addresses_stay_until_the_api_shows_them_or_the_pod_goes() {
    let mut st = Store::new("n1", None, false);
    let pod = |uid: &str, ip: Option<&str>| {
        let status = ip.map_or(json!({}), |ip| json!({"podIPs": [{"ip": ip}]}));
        json!({"metadata": {"namespace": "x", "name": "a", "uid": uid},
            "spec": {"nodeName": "n1"}, "status": status})
    };
    let admit = |st: &mut Store| {
        st.admit("x/a", &["10.0.0.9".parse().unwrap()]);
    };
    replace_json(&mut st, Kind::Pods, &[pod("u1", None)]);
    admit(&mut st);
    assert_eq!(
        st.engine.pod("x/a").unwrap().ips,
        ["10.0.0.9".parse::<std::net::IpAddr>().unwrap()]
    );
    // An update without addresses, or with stale ones of an earlier sandbox, keeps them.
    put_json(&mut st, Kind::Pods, "x/a".into(), Some(&pod("u1", None)));
    put_json(
        &mut st,
        Kind::Pods,
        "x/a".into(),
        Some(&pod("u1", Some("10.0.0.5"))),
    );
    assert_eq!(st.engine.pod("x/a").unwrap().ips[0].to_string(), "10.0.0.9");
    // The kubelet posted them: the API is the source again.
    put_json(
        &mut st,
        Kind::Pods,
        "x/a".into(),
        Some(&pod("u1", Some("10.0.0.9"))),
    );
    assert!(st.admitted.is_empty());
    // Another pod of that name, a delete, or a relist without it: dropped.
    admit(&mut st);
    put_json(&mut st, Kind::Pods, "x/a".into(), Some(&pod("u2", None)));
    assert!(st.admitted.is_empty());
    admit(&mut st);
    put_json(&mut st, Kind::Pods, "x/a".into(), None);
    assert!(st.admitted.is_empty());
    admit(&mut st);
    replace_json(&mut st, Kind::Pods, &[]);
    assert!(st.admitted.is_empty());
}

#[test]
fn the_store_shares_the_watch_layers_pods_and_a_phase_alone_is_no_change() {
    let mut watched: tern_watch::Store<PodObject> = tern_watch::Store::default();
    let mut st = Store::new("n1", None, false);
    let decode = |v: &Value| (tern_watch::kinds::PODS.decode)(v).unwrap();
    let pending = web("1", &json!({"status": {"phase": "Pending"}}));
    watched.apply("x/web", Some(decode(&pending)));
    let r = replace(&mut st, watched.iter());
    assert!(r.changed);
    assert!(
        Arc::ptr_eq(
            st.engine.pod("x/web").unwrap(),
            watched.get("x/web").unwrap()
        ),
        "one copy"
    );
    // Pending to Running, same addresses: the watch layer delivers it (its phase is read), the
    // compiler reads nothing new; the store keeps the newest object all the same.
    let change = watched
        .apply("x/web", Some(decode(&web("2", &json!({})))))
        .unwrap();
    let g = st.generation;
    let p = put(&mut st, &change.key, change.new.as_ref());
    assert!(!p.changed && p.unchanged(Kind::Pods));
    assert_eq!(st.generation, g);
    assert_eq!(st.engine.pod("x/web").unwrap().phase, "Running");
    assert!(Arc::ptr_eq(
        st.engine.pod("x/web").unwrap(),
        watched.get("x/web").unwrap()
    ));
}

//! The syncer's fallbacks in a real kernel: an update the netlink batch cannot make (the
//! table is not what the agent thinks) goes through nft's script; one the script cannot make
//! either becomes a replace. The table is changed behind the syncer's back, as another tool
//! would, in a netns of its own. Needs root and nft (`TERN_ROOT_TESTS=run`).

use std::sync::Arc;

use tern_net::netns::NetNs;
use tern_testkit::netns::TestNetns;

use super::*;
use crate::netpol::watch::json::{put, replace};

fn pod(name: &str, node: &str, app: &str, ip: &str) -> serde_json::Value {
    json!({"metadata": {"namespace": "x", "name": name, "uid": name, "resourceVersion": "1",
            "labels": {"app": app}},
        "spec": {"nodeName": node},
        "status": {"podIPs": [{"ip": ip}]}})
}

/// The table as nft lists it in `ns`.
fn listing(ns: &TestNetns, nft: &Nft) -> String {
    in_netns(ns, || nft.list_table("inet", TABLE))
        .unwrap()
        .unwrap_or_default()
}

fn in_netns<T: Send>(ns: &TestNetns, f: impl FnOnce() -> T + Send) -> T {
    NetNs::open(ns.path()).unwrap().run_in(f).unwrap()
}

/// The name of the set whose elements include `ip`, and those elements.
fn set_holding(listed: &str, ip: &str) -> (String, String) {
    let mut name = "";
    for line in listed.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("set ") {
            name = rest.trim_end_matches(" {");
        } else if line.starts_with("elements") && line.contains(ip) {
            return (name.to_owned(), line.to_owned());
        }
    }
    panic!("no set holds {ip}:\n{listed}");
}

#[test]
fn a_refused_netlink_batch_falls_back_to_the_script_then_to_a_replace() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = TestNetns::new("sync-fb");
    let nft = Nft::find().unwrap();
    let s = Arc::new(shared());
    {
        let mut st = s.store();
        let pods = [
            pod("web", "n1", "web", "10.0.0.2"),
            pod("cli1", "n2", "cli", "10.0.1.5"),
        ];
        replace(&mut st, Kind::Pods, &pods);
        replace(
            &mut st,
            Kind::Namespaces,
            &[json!({"metadata": {"name": "x"}})],
        );
        let allow = json!({"metadata": {"namespace": "x", "name": "from-cli"},
            "spec": {"podSelector": {"matchLabels": {"app": "web"}},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}]}]}});
        replace(&mut st, Kind::Policies, &[allow]);
    }
    let (s2, nft2) = (Arc::clone(&s), nft.clone());
    let syncer = in_netns(&node, move || {
        std::thread::spawn(move || run(&s2, &nft2, true))
    });
    until_applied(&s);
    let (set, _) = set_holding(&listing(&node, &nft), "10.0.1.5");
    let before = s.stats().clone();

    // Someone adds cli2's address first: the batch's add (NLM_F_EXCL) is refused, nft's
    // `add element` is not.
    let add = format!("add element inet {TABLE} {set} {{ 10.0.1.6 }}\n");
    in_netns(&node, || nft.apply(&add)).unwrap();
    put(
        &mut s.store(),
        Kind::Pods,
        "x/cli2".into(),
        Some(&pod("cli2", "n2", "cli", "10.0.1.6")),
    );
    s.notify();
    until_applied(&s);
    let after = s.stats().clone();
    assert_eq!(
        (after.netlink_errors, after.apply_errors, after.updates),
        (
            before.netlink_errors + 1,
            before.apply_errors,
            before.updates + 1
        ),
        "netlink refused, the script took it"
    );
    let (_, elements) = set_holding(&listing(&node, &nft), "10.0.1.6");
    assert!(elements.contains("10.0.1.5"), "{elements}");

    // Someone deletes cli1's address first: the batch's delete and the script's are both
    // refused (ENOENT), and the replace makes the table the render again.
    let delete = format!("delete element inet {TABLE} {set} {{ 10.0.1.5 }}\n");
    in_netns(&node, || nft.apply(&delete)).unwrap();
    put(&mut s.store(), Kind::Pods, "x/cli1".into(), None);
    s.notify();
    until_applied(&s);
    let last = s.stats().clone();
    assert_eq!(
        (last.netlink_errors, last.apply_errors),
        (after.netlink_errors + 1, after.apply_errors + 1),
        "netlink and the script refused"
    );
    assert_eq!(last.applies, after.applies + 1, "the replace took it");
    let listed = listing(&node, &nft);
    let (_, elements) = set_holding(&listed, "10.0.1.6");
    assert!(!listed.contains("10.0.1.5"), "{listed}");
    assert!(elements.contains("10.0.1.6"), "{elements}");

    s.stop.stop();
    {
        let _g = s.store();
        s.notify();
    }
    syncer.join().unwrap();
}

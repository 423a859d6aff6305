//! The syncer's element updates in a real kernel: a table changed by `ruleset::update_script`
//! lists exactly as the same render applied whole. For a run of changes (an admitted pod that
//! shares a chain, a peer's address moving so that a set's intervals merge and split, a pod
//! leaving isolation, a replaced address), one netns gets the first table replaced and then
//! each update in turn, another the table of each step replaced whole; after every step the two
//! `nft list table` outputs are compared. Needs root and nft.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use tern_net::netns::NetNs;
use tern_net::nft::Nft;
use tern_netpol::model::{pod_from_json, policy_from_json, Pod};
use tern_netpol::ruleset::{self, render, update_script, Table};
use tern_netpol::{compile, World};
use tern_testkit::netns::TestNetns;

fn pod(ns: &str, name: &str, app: &str, node: &str, ips: &[&str]) -> Pod {
    let ips: Vec<Value> = ips.iter().map(|i| json!({"ip": i})).collect();
    pod_from_json(&json!({"metadata": {"namespace": ns, "name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "m", "ports": [{"name": "h", "containerPort": 8080}]}]},
        "status": {"podIPs": ips}}))
    .unwrap()
}

/// Ingress for `web` from `cli` and an ipBlock on TCP 80; `db` reached by `web` on the named
/// port; `db` egress-isolated to `web`.
fn policies() -> Vec<tern_netpol::model::Policy> {
    [
        json!({"metadata": {"namespace": "x", "name": "web"}, "spec": {
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}},
                                  {"ipBlock": {"cidr": "10.9.0.0/16", "except": ["10.9.1.0/24"]}}],
                         "ports": [{"port": 80}]}]}}),
        json!({"metadata": {"namespace": "x", "name": "db"}, "spec": {
            "podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "web"}}}], "ports": [{"port": "h"}]}]}}),
    ]
    .iter()
    .map(|p| policy_from_json(p).unwrap())
    .collect()
}

fn table(pods: &[Pod]) -> Table {
    let pols = policies();
    render(&compile(&World {
        node: "n1",
        pods,
        namespaces: &[],
        policies: &pols,
    }))
    .0
}

/// One change to the cluster's pods.
type Step = Box<dyn Fn(&mut Vec<Pod>)>;

fn listing(ns: &NetNs, nft: &Nft) -> String {
    ns.run_in(|| nft.list_table(ruleset::FAMILY, ruleset::TABLE))
        .unwrap()
        .unwrap()
        .expect("the table exists")
}

#[test]
fn element_updates_list_as_the_same_table_applied_whole() {
    if tern_testkit::root::skip() {
        return;
    }
    let nft = Nft::find().unwrap();
    let (inc_ns, full_ns) = (TestNetns::new("npu-inc"), TestNetns::new("npu-full"));
    let (inc, full) = (
        NetNs::open(inc_ns.path()).unwrap(),
        NetNs::open(full_ns.path()).unwrap(),
    );
    let mut pods = vec![
        pod("x", "a", "web", "n1", &["10.0.1.2", "fd00:1::2"]),
        pod("x", "b", "web", "n1", &["10.0.1.3", "fd00:1::3"]),
        pod("x", "c", "cli", "n2", &["10.0.2.2", "fd00:2::2"]),
        pod("x", "d", "db", "n1", &["10.0.1.4", "fd00:1::4"]),
        pod("x", "e", "cli", "n2", &["10.0.2.4"]),
    ];
    let mut old = table(&pods);
    inc.run_in(|| nft.apply(&old.replace_script()))
        .unwrap()
        .unwrap();
    let steps: Vec<(&str, Step)> = vec![
        (
            "a web pod admitted: its addresses join the maps and db's peer and endpoint sets",
            Box::new(|p| p.push(pod("x", "f", "web", "n1", &["10.0.1.9", "fd00:1::9"]))),
        ),
        (
            "a cli pod between two others: the peer set's intervals merge",
            Box::new(|p| p.push(pod("x", "g", "cli", "n2", &["10.0.2.3"]))),
        ),
        (
            "a cli pod's address next to the ipBlock, another's split from its run",
            Box::new(|p| {
                p[2] = pod("x", "c", "cli", "n2", &["10.10.0.0", "fd00:2::2"]);
                p[4] = pod("x", "e", "cli", "n2", &["10.9.1.7"]);
            }),
        ),
        (
            "a web pod readmitted with another address",
            Box::new(|p| p[1] = pod("x", "b", "web", "n1", &["10.0.1.30", "fd00:1::30"])),
        ),
        (
            "a web pod leaves isolation and the peers",
            Box::new(|p| p[0] = pod("x", "a", "other", "n1", &["10.0.1.2", "fd00:1::2"])),
        ),
    ];
    for (what, change) in steps {
        change(&mut pods);
        let new = table(&pods);
        let update = update_script(&old, &new).unwrap_or_else(|| panic!("{what}: elements only"));
        assert!(!update.is_empty(), "{what}: something changes");
        assert!(
            update
                .lines()
                .all(|l| l.starts_with("add element ") || l.starts_with("delete element ")),
            "{what}: {update}"
        );
        inc.run_in(|| nft.apply(&update))
            .unwrap()
            .unwrap_or_else(|e| panic!("{what}: the kernel refused {update}: {e}"));
        full.run_in(|| nft.apply(&new.replace_script()))
            .unwrap()
            .unwrap();
        assert_eq!(
            listing(&inc, &nft),
            listing(&full, &nft),
            "{what}: updated and replaced tables differ; the update was\n{update}"
        );
        old = new;
    }
    // A change the elements cannot carry (a new chain) is left to a replace.
    pods.push(pod("x", "h", "db", "n1", &["10.0.1.40"]));
    pods.push(pod("y", "i", "web", "n1", &["10.0.3.2"]));
    let mut pols = policies();
    pols.push(
        policy_from_json(&json!({"metadata": {"namespace": "y", "name": "deny"},
            "spec": {"podSelector": {}}}))
        .unwrap(),
    );
    let with_new_chain = render(&compile(&World {
        node: "n1",
        pods: &pods,
        namespaces: &[],
        policies: &pols,
    }))
    .0;
    assert_eq!(update_script(&old, &with_new_chain), None);
}

//! The denied-flow thread as the agent runs it, in a real kernel: one "node" netns with `web`
//! and `cli` wired as tern wires them, the controller's real syncer applying the table with
//! logging on, and `report::run` bound to the group in the node netns (both threads spawned from
//! a thread inside it, so they inherit it). A connect `cli → web:80` that the deny-all policy
//! denies is counted under that policy in the controller's stats. Needs root and nft.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tern_net::netns::NetNs;
use tern_net::nft::Nft;
use tern_netpol::model::{namespace_from_json, pod_from_json, policy_from_json};
use tern_netpol::ruleset::LogDenied;
use tern_testkit::netns::TestNetns;

use crate::netpol::store::Kind;
use crate::netpol::sync::tests::shared_logging;

#[test]
fn a_denied_connect_is_counted_under_its_policy_by_the_agents_thread() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = TestNetns::new("rep-node");
    node.set_sysctl("net/ipv4/ip_forward", "1");
    let (web, cli) = (TestNetns::new("rep-web"), TestNetns::new("rep-cli"));
    node.wire_routed_pod(&web, "hweb", "10.0.1.2", "fd00:1::2");
    node.wire_routed_pod(&cli, "hcli", "10.0.1.3", "fd00:1::3");
    let l = NetNs::open(web.path())
        .unwrap()
        .run_in(|| TcpListener::bind(("10.0.1.2", 80)))
        .unwrap()
        .unwrap();
    std::thread::spawn(move || l.incoming().for_each(drop));

    let group = 4303;
    let s = Arc::new(shared_logging(Some(LogDenied { group, rate: 100 })));
    {
        let mut st = s.store();
        for (name, ip) in [("web", "10.0.1.2"), ("cli", "10.0.1.3")] {
            let p = pod_from_json(&json!({"metadata": {"namespace": "x", "name": name,
                "labels": {"app": name}}, "spec": {"nodeName": "n1"},
                "status": {"podIPs": [{"ip": ip}]}}))
            .unwrap();
            st.put_pod(&format!("x/{name}"), Some(&Arc::new(p.into())));
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
    let (s2, s3, nft) = (Arc::clone(&s), Arc::clone(&s), Nft::find().unwrap());
    let threads = NetNs::open(node.path())
        .unwrap()
        .run_in(move || {
            [
                std::thread::spawn(move || crate::netpol::sync::run(&s2, &nft, true)),
                std::thread::spawn(move || super::run(&s3, group)),
            ]
        })
        .unwrap();
    let applied = Instant::now() + Duration::from_secs(30);
    while s.store().applied == 0 {
        assert!(Instant::now() < applied, "the syncer never applied");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The reader binds within its first try; a connect before it would go unlogged.
    std::thread::sleep(Duration::from_millis(300));
    let to = SocketAddr::new("10.0.1.2".parse::<IpAddr>().unwrap(), 80);
    let connected = NetNs::open(cli.path())
        .unwrap()
        .run_in(|| TcpStream::connect_timeout(&to, Duration::from_millis(800)).is_ok())
        .unwrap();
    assert!(!connected, "x/deny isolates web");
    let key = ("x".to_owned(), "deny".to_owned(), "ingress");
    let counted = Instant::now() + Duration::from_secs(5);
    while s.stats().denied.0.get(&key).copied() != Some(1) {
        assert!(
            Instant::now() < counted,
            "not counted: {:?} {:?}",
            s.stats().denied,
            s.stats().denied_reader
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    s.stop.stop();
    s.notify();
    for t in threads {
        t.join().unwrap();
    }
}

//! `"subnet": "usePodCidr"` against the API server stand-in: the node's podCIDRs are read once,
//! through the kubeconfig of tern's netconf, cached in the data dir, and used dual-stack; CHECK,
//! STATUS, DEL and GC never call the API.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{add, add_ok, Call, Ipam, Net};
use serde_json::{json, Value};
use tern_apiserver::ApiServer;
use tern_kube::{kubeconfig, write_atomic, BearerToken};

struct Fixture {
    s: ApiServer,
    _kdir: tempfile::TempDir,
    kc: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let s = ApiServer::start().unwrap();
    let kdir = tempfile::tempdir().unwrap();
    let kc = kdir.path().join("tern-kubeconfig");
    let tok = BearerToken::new(s.issue_token("kube-system", "cni", 3600));
    write_atomic(
        &kc,
        kubeconfig::render(&s.url(), s.ca_pem().as_bytes(), &tok).as_bytes(),
        0o600,
    )
    .unwrap();
    Fixture { s, _kdir: kdir, kc }
}

fn conf(n: &Net, f: &Fixture, node: &str, ipam: Value) -> Value {
    let mut c = n.conf("1.1.0", ipam);
    c["type"] = json!("tern");
    c["kubernetes"] = json!({"kubeconfig": f.kc, "nodeName": node});
    c
}

#[test]
fn pod_cidrs_are_read_once_and_cached() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = fixture();
    f.s.set_node("node-a", &["10.77.0.0/24", "fd77::/64"]);
    let path = "/api/v1/nodes/node-a";
    let n = Net::new();
    let c = conf(
        &n,
        &f,
        "node-a",
        json!({"subnet": "usePodCidr", "routes": [{"dst": "0.0.0.0/0"}]}),
    );

    let status = Call::new(Ipam::Tern, "STATUS", "x").run(&c);
    assert!(
        status.success(),
        "STATUS before any ADD: {}",
        status.describe()
    );
    assert_eq!(f.s.count(path), 0, "STATUS makes no API call");

    assert_eq!(add_ok(Ipam::Tern, "c1", &c), ["10.77.0.2/24", "fd77::2/64"]);
    assert_eq!(f.s.count(path), 1);
    assert_eq!(add_ok(Ipam::Tern, "c2", &c), ["10.77.0.3/24", "fd77::3/64"]);
    for verb in ["CHECK", "STATUS"] {
        let o = Call::new(Ipam::Tern, verb, "c1").run(&c);
        assert!(o.success(), "{verb}: {}", o.describe());
    }
    let d = Call::new(Ipam::Tern, "DEL", "c2").run(&c);
    assert!(d.success(), "{}", d.describe());
    assert_eq!(f.s.count(path), 1, "only the first ADD asked the API");
    let cache: Value =
        serde_json::from_slice(&std::fs::read(n.dir().join("pod_cidrs.json")).unwrap()).unwrap();
    assert_eq!(
        cache,
        json!({"node": "node-a", "podCIDRs": ["10.77.0.0/24", "fd77::/64"]})
    );

    // The cache file is no lease for host-local either: its DEL and ADD work beside it.
    let hl = {
        let mut c = n.conf("1.0.0", json!({"subnet": "10.77.0.0/24"}));
        c["ipam"]["dataDir"] = json!(n.data_dir());
        c
    };
    assert_eq!(add_ok(Ipam::HostLocal, "h1", &hl), ["10.77.0.4/24"]);
    assert!(common::del(Ipam::HostLocal, "h1", &hl).success());
    assert!(n.dir().join("pod_cidrs.json").is_file());
}

#[test]
fn pod_cidr_errors() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = fixture();
    f.s.set_node("bare", &[]);
    let n = Net::new();
    let o = add(
        Ipam::Tern,
        "c1",
        &conf(
            &n,
            &f,
            "bare",
            json!({"ranges": [[{"subnet": "usePodCidr"}]]}),
        ),
    );
    assert_eq!(o.error_code(), Some(11), "{}", o.describe());
    assert_eq!(
        o.error_msg(),
        Some("usePodCidr: node bare has no spec.podCIDRs yet")
    );
    let o = add(
        Ipam::Tern,
        "c1",
        &conf(&n, &f, "missing", json!({"subnet": "usePodCidr"})),
    );
    assert_eq!(o.error_code(), Some(11), "{}", o.describe());
    assert!(
        o.error_msg()
            .unwrap()
            .starts_with("usePodCidr: get node missing: not found (404)"),
        "{}",
        o.describe()
    );
    let mut no_kc = conf(&n, &f, "bare", json!({"subnet": "usePodCidr"}));
    no_kc["kubernetes"] = json!({"nodeName": "bare"});
    let o = add(Ipam::Tern, "c1", &no_kc);
    assert_eq!(
        (o.error_code(), o.error_msg()),
        (
            Some(7),
            Some("usePodCidr needs kubernetes.kubeconfig in the network configuration")
        )
    );
    assert!(n.leases().is_empty());
    // Once the node gets its CIDR, ADD works.
    f.s.set_node("bare", &["10.78.0.0/24"]);
    let c = conf(
        &n,
        &f,
        "bare",
        json!({"ranges": [[{"subnet": "usePodCidr"}]]}),
    );
    assert_eq!(add_ok(Ipam::Tern, "c1", &c), ["10.78.0.2/24"]);
}

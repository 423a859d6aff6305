//! tern's pod lookup on ADD against the API server stand-in: the plugin binary runs in a fake host
//! netns, exactly as a runtime execs it; the stand-in listens inside that netns. What the lookup
//! decides: a recreated, gone or terminating pod is refused, the `tern.io/ip-addrs` annotation is
//! honoured, no API call without pod arguments or on DEL and CHECK. Needs root.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod lookup_fixture;

use tern_testkit::netns::TestNetns;

use lookup_fixture::*;

#[test]
fn a_pod_whose_uid_changed_is_refused_and_nothing_is_wired() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = Fixture::new("kluid");
    f.api().set_pod("default", "web", "uid-new", &[], false);
    let o = f.run(
        "ADD",
        "cuid",
        &f.hp.pod.path(),
        &Fixture::pod_args("web", "uid-old"),
    );
    assert!(!o.ok);
    assert_eq!(o.json["code"], 3, "{}", o.json);
    assert!(
        o.json["msg"].as_str().unwrap().contains("uid-new"),
        "{}",
        o.json
    );
    f.assert_nothing_left("cuid");
    assert!(!f.hp.pod.has_link("eth0"));
    assert_eq!(f.api().count("/api/v1/namespaces/default/pods/web"), 1);
}

#[test]
fn a_gone_or_terminating_pod_is_refused() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = Fixture::new("klgone");
    let o = f.run(
        "ADD",
        "cgone",
        &f.hp.pod.path(),
        &Fixture::pod_args("ghost", "u1"),
    );
    assert_eq!(o.json["code"], 3, "{}", o.json);
    f.api().set_pod("default", "leaving", "u2", &[], true);
    let o = f.run(
        "ADD",
        "cgone",
        &f.hp.pod.path(),
        &Fixture::pod_args("leaving", "u2"),
    );
    assert_eq!(o.json["code"], 3, "{}", o.json);
    assert!(
        o.json["msg"].as_str().unwrap().contains("terminating"),
        "{}",
        o.json
    );
    f.assert_nothing_left("cgone");
}

#[test]
fn the_ip_addrs_annotation_gives_the_pod_the_asked_address() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = Fixture::new("klip");
    f.api().set_pod(
        "default",
        "fixed",
        "u3",
        &[("tern.io/ip-addrs", r#"["10.98.0.77"]"#)],
        false,
    );
    let o = f.run(
        "ADD",
        "cfixed",
        &f.hp.pod.path(),
        &Fixture::pod_args("fixed", "u3"),
    );
    assert!(o.ok, "{} {}", o.json, o.stderr);
    assert_eq!(o.json["ips"][0]["address"], "10.98.0.77/32");
    assert!(f
        .hp
        .pod
        .ip(&["addr", "show", "eth0"])
        .contains("10.98.0.77/32"));
    // A malformed annotation is a clear configuration error, and nothing is wired.
    let other = TestNetns::new("klip2");
    f.api().set_pod(
        "default",
        "bad",
        "u4",
        &[("tern.io/ip-addrs", "10.98.0.8")],
        false,
    );
    let o = f.run(
        "ADD",
        "cbad",
        &other.path(),
        &Fixture::pod_args("bad", "u4"),
    );
    assert_eq!(o.json["code"], 7, "{}", o.json);
    assert!(
        o.json["msg"].as_str().unwrap().contains("tern.io/ip-addrs"),
        "{}",
        o.json
    );
    f.assert_nothing_left("cbad");
    let d = f.run("DEL", "cfixed", &f.hp.pod.path(), "");
    assert!(d.ok, "{}", d.json);
    f.assert_nothing_left("cfixed");
}

#[test]
fn no_lookup_without_pod_args_and_no_api_call_on_del_check() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = Fixture::new("klnone");
    let o = f.run("ADD", "cnone", &f.hp.pod.path(), "");
    assert!(o.ok, "{} {}", o.json, o.stderr);
    assert!(f.api().requests().is_empty(), "{:?}", f.api().requests());
    let d = f.run(
        "DEL",
        "cnone",
        &f.hp.pod.path(),
        &Fixture::pod_args("x", "y"),
    );
    assert!(d.ok);
    assert!(f.api().requests().is_empty(), "DEL called the API server");
}

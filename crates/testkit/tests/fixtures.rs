//! The netns fixtures themselves, in real namespaces. Needs root (`tern_testkit::root::skip`).

use tern_testkit::netns::{HostAndPod, TestNetns, UPLINK};

#[test]
fn netns_lifecycle() {
    if tern_testkit::root::skip() {
        return;
    }
    let path;
    {
        let ns = TestNetns::new("tk");
        path = ns.path();
        assert!(path.exists());
        assert!(ns.exec_ok(&["ip", "link", "show", "lo"]).contains("UP"));
        ns.add_veth("a0", "b0");
        assert!(ns.has_link("a0") && ns.has_link("b0"));
        assert!(!ns.has_link("nope"));
    }
    assert!(!path.exists(), "namespace not deleted on drop");
}

#[test]
fn uplink_gives_default_routes() {
    if tern_testkit::root::skip() {
        return;
    }
    let hp = HostAndPod::with_uplink("tku");
    let v4 = hp.host.ip(&["route", "get", "169.254.1.1"]);
    assert!(v4.contains(&format!("dev {UPLINK}")), "{v4}");
    let v6 = hp.host.ip(&["-6", "route", "show", "default"]);
    assert!(v6.contains(UPLINK), "{v6}");
    assert!(!hp.pod.has_link(UPLINK));
}

#[test]
fn host_and_pod_link() {
    if tern_testkit::root::skip() {
        return;
    }
    let hp = HostAndPod::with_pod_link("tk", "eth0.100", "vethtk0");
    assert!(hp.pod.has_link("eth0.100"));
    assert!(hp.host.has_link("vethtk0"));
    assert!(!hp.host.has_link("eth0.100"));
    assert_ne!(hp.host.path(), hp.pod.path());
}

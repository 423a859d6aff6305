//! Kernel tests of the netns seam's calling-thread model ([`netns::enter_on_calling_thread`], the
//! plugins' model): its own test process, since the model is process-wide. Needs root.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::os::unix::fs::MetadataExt;

use tern_net::netns::{self, NetNs};
use tern_testkit::netns::TestNetns;

/// The calling thread's network namespace inode.
fn own_netns() -> u64 {
    std::fs::metadata(netns::THREAD_SELF_NETNS).unwrap().ino()
}

#[test]
fn run_in_enters_on_the_calling_thread_and_comes_back() {
    if tern_testkit::root::skip() {
        return;
    }
    netns::enter_on_calling_thread();
    let ns = TestNetns::new("tn-ct-run");
    let pod = NetNs::open(ns.path()).unwrap();
    let expected = std::fs::metadata(ns.path()).unwrap().ino();
    let before = own_netns();
    assert_ne!(before, expected);
    let tid = nix::unistd::gettid();
    for _ in 0..3 {
        let (inside, inside_tid) = pod.run_in(|| (own_netns(), nix::unistd::gettid())).unwrap();
        assert_eq!(inside, expected, "closure did not run in the target netns");
        assert_eq!(inside_tid, tid, "closure ran on another thread");
        assert_eq!(
            own_netns(),
            before,
            "calling thread left in the target netns"
        );
    }
    // A netlink socket opened inside stays in the pod netns after the way back: it sees a link
    // only the pod has, the calling thread's socket does not.
    ns.ip(&[
        "link", "add", "ct-only", "type", "veth", "peer", "name", "ct-peer",
    ]);
    let handle = tern_net::netlink::Handle::in_netns(&pod).unwrap();
    assert_eq!(own_netns(), before);
    assert!(handle.link_by_name("ct-only").unwrap().is_some());
    let here = tern_net::netlink::Handle::new().unwrap();
    assert!(here.link_by_name("ct-only").unwrap().is_none());
}

#[test]
fn a_panic_inside_is_resumed_after_the_way_back() {
    if tern_testkit::root::skip() {
        return;
    }
    netns::enter_on_calling_thread();
    let ns = TestNetns::new("tn-ct-panic");
    let pod = NetNs::open(ns.path()).unwrap();
    let before = own_netns();
    let r = std::panic::catch_unwind(|| pod.run_in(|| panic!("boom")));
    let payload = r.unwrap_err();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom"));
    assert_eq!(
        own_netns(),
        before,
        "a panic left the thread in the pod netns"
    );
    // The thread still enters and comes back afterwards.
    assert_ne!(pod.run_in(own_netns).unwrap(), before);
    assert_eq!(own_netns(), before);
}

#[test]
fn an_entry_inside_an_entry_returns_to_the_outer_namespace() {
    if tern_testkit::root::skip() {
        return;
    }
    netns::enter_on_calling_thread();
    let (a, b) = (TestNetns::new("tn-ct-a"), TestNetns::new("tn-ct-b"));
    let (ns_a, ns_b) = (
        NetNs::open(a.path()).unwrap(),
        NetNs::open(b.path()).unwrap(),
    );
    let ino = |t: &TestNetns| std::fs::metadata(t.path()).unwrap().ino();
    let before = own_netns();
    let (in_b, back_in_a) = ns_a
        .run_in(|| {
            let in_b = ns_b.run_in(own_netns).unwrap();
            (in_b, own_netns())
        })
        .unwrap();
    assert_eq!(in_b, ino(&b));
    assert_eq!(
        back_in_a,
        ino(&a),
        "the inner entry did not return to the outer namespace"
    );
    assert_eq!(own_netns(), before);
}

#[test]
fn a_new_namespace_is_entered_and_left_on_the_calling_thread() {
    if tern_testkit::root::skip() {
        return;
    }
    netns::enter_on_calling_thread();
    let before = own_netns();
    let tid = nix::unistd::gettid();
    let (inside, inside_tid) = netns::run_in_new(|| (own_netns(), nix::unistd::gettid())).unwrap();
    assert_ne!(inside, before, "not a new namespace");
    assert_eq!(inside_tid, tid);
    assert_eq!(own_netns(), before);
    // Each call gets a namespace of its own.
    let again = netns::run_in_new(own_netns).unwrap();
    assert_ne!(again, before);
}

#[test]
fn sysctls_read_inside_are_the_pod_netns_values() {
    if tern_testkit::root::skip() {
        return;
    }
    netns::enter_on_calling_thread();
    let ns = TestNetns::new("tn-ct-sysctl");
    let pod = NetNs::open(ns.path()).unwrap();
    let key = tern_net::sysctl::SysctlKey::parse("net.ipv4.tcp_keepalive_time", "eth0").unwrap();
    let value = tern_net::sysctl::SysctlValue::parse("net.ipv4.tcp_keepalive_time", "613").unwrap();
    let host_before = tern_net::sysctl::read_host(&key).unwrap();
    tern_net::sysctl::write_all(&pod, &[(key.clone(), value)]).unwrap();
    assert_eq!(
        tern_net::sysctl::read(&pod, std::slice::from_ref(&key)).unwrap(),
        vec!["613"]
    );
    assert_eq!(
        tern_net::sysctl::read_host(&key).unwrap(),
        host_before,
        "written on the host"
    );
}

/// Set in the child of [`a_thread_that_may_not_come_back_takes_a_fresh_thread`].
const USERNS_CHILD: &str = "TERN_NETNS_TEST_USERNS_CHILD";

/// A thread that may not switch back to its own namespace (here: inside a user namespace that
/// does not own it, setns(2) there is EPERM) finds that out before its first entry and takes a
/// fresh thread per entry: without the probe it would enter on the calling thread and abort on
/// the way back. Runs itself again under `unshare -U -r` (a user namespace, mapped root).
#[test]
fn a_thread_that_may_not_come_back_takes_a_fresh_thread() {
    if std::env::var_os(USERNS_CHILD).is_some() {
        netns::enter_on_calling_thread();
        let tid = nix::unistd::gettid();
        // A new netns is owned by this user namespace, so creating one is allowed.
        let inside = netns::run_in_new(nix::unistd::gettid).unwrap();
        assert_ne!(
            inside, tid,
            "entered on the calling thread, which may not come back"
        );
        println!("fresh thread: ok");
        return;
    }
    if tern_testkit::root::skip() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("unshare")
        .args(["-U", "-r"])
        .arg(&exe)
        .args([
            "--exact",
            "a_thread_that_may_not_come_back_takes_a_fresh_thread",
            "--nocapture",
        ])
        .env(USERNS_CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("fresh thread: ok"),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

//! Kernel tests of the netns seam: real namespaces made with iproute2. Needs root.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::os::unix::fs::MetadataExt;

use tern_net::netns::NetNs;
use tern_net::Error;
use tern_testkit::netns::TestNetns;

#[test]
fn open_checks_the_path_is_a_network_namespace() {
    if tern_testkit::root::skip() {
        return;
    }
    let ns = TestNetns::new("tn-open");
    let opened = NetNs::open(ns.path()).unwrap();
    assert_eq!(opened.path(), ns.path());

    let missing = NetNs::open("/run/netns/tern-definitely-missing").unwrap_err();
    assert!(missing.is_netns_gone(), "{missing}");
    assert_eq!(missing.errno(), Some(libc::ENOENT));

    // A regular file is not a namespace (nor treated as "gone").
    let file = tempfile::NamedTempFile::new().unwrap();
    let e = NetNs::open(file.path()).unwrap_err();
    assert!(matches!(e, Error::NotANetns { .. }), "{e}");
    assert!(!e.is_netns_gone());
    assert!(e.is_netns_unusable(), "{e}");
    assert!(missing.is_netns_unusable(), "{missing}");

    // Another namespace type on nsfs is refused too.
    let e = NetNs::open("/proc/thread-self/ns/mnt").unwrap_err();
    assert!(matches!(e, Error::NotANetns { .. }), "{e}");
}

#[test]
fn is_current_distinguishes_own_netns() {
    if tern_testkit::root::skip() {
        return;
    }
    let ns = TestNetns::new("tn-cur");
    let pod = NetNs::open(ns.path()).unwrap();
    assert!(!pod.is_current().unwrap());
    assert!(NetNs::current().unwrap().is_current().unwrap());
    // The calling thread's netns opened through another path (what a runtime could pass).
    let own = NetNs::open(format!("/proc/{}/ns/net", std::process::id())).unwrap();
    assert!(own.is_current().unwrap());
    // Inside the pod netns, the pod handle is current.
    assert!(pod.run_in(|| pod.is_current().unwrap()).unwrap());
}

#[test]
fn run_in_enters_on_a_thread_that_ends_and_leaves_caller_alone() {
    if tern_testkit::root::skip() {
        return;
    }
    let ns = TestNetns::new("tn-run");
    let pod = NetNs::open(ns.path()).unwrap();
    let before = std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino();
    let (inside, tid) = pod
        .run_in(|| {
            let ino = std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino();
            (ino, nix::unistd::gettid())
        })
        .unwrap();
    let expected = std::fs::metadata(ns.path()).unwrap().ino();
    assert_eq!(inside, expected, "closure did not run in the target netns");
    assert_ne!(
        tid,
        nix::unistd::gettid(),
        "closure ran on the calling thread"
    );
    let after = std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino();
    assert_eq!(before, after, "calling thread changed netns");
    // The worker thread is gone.
    assert!(!std::path::Path::new(&format!("/proc/self/task/{tid}")).exists());
}

#[test]
fn run_in_propagates_panics_without_leaking_the_namespace() {
    if tern_testkit::root::skip() {
        return;
    }
    let ns = TestNetns::new("tn-panic");
    let pod = NetNs::open(ns.path()).unwrap();
    let before = std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino();
    let r = std::panic::catch_unwind(|| pod.run_in(|| panic!("boom")));
    assert!(r.is_err());
    assert_eq!(
        before,
        std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino()
    );
}

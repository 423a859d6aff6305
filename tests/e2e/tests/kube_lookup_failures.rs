//! tern's pod lookup when the API side fails (bug-report case 24): an unauthorized or silent API
//! server, a stuck or missing tern-lookup, a FIFO kubeconfig; ADD fails in time with the right
//! code and STATUS says why. No agent runs here: a 401 cannot be repaired, which is what that case
//! asks about. Needs root.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod lookup_fixture;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use tern_apiserver::Fault;
use tern_testkit::exec::{bin_dir, ref_plugin_dir};
use tern_testkit::netns::TestNetns;

use lookup_fixture::*;

#[test]
fn case_24_unauthorized_or_silent_api_server() {
    if tern_testkit::root::skip() {
        return;
    }
    let f = Fixture::new("kl24");
    f.api().set_pod("default", "early", "u-early", &[], false);
    let early = f.run(
        "ADD",
        "cearly",
        &f.hp.pod.path(),
        &Fixture::pod_args("early", "u-early"),
    );
    assert!(early.ok, "{} {}", early.json, early.stderr);

    for (what, fault) in [
        ("401 to everything", Fault::Status(401)),
        ("never answers", Fault::Stall),
    ] {
        f.api().set_fault(Some(fault));
        f.api().set_pod("default", "late", "u-late", &[], false);
        let pod = TestNetns::new("kl24late");
        let o = f.run(
            "ADD",
            "clate",
            &pod.path(),
            &Fixture::pod_args("late", "u-late"),
        );
        assert!(!o.ok, "{what}: ADD succeeded");
        assert_eq!(o.json["code"], 11, "{what}: {}", o.json);
        let msg = o.json["msg"].as_str().unwrap().to_owned();
        assert!(
            msg.contains(f.path("kubeconfig").to_str().unwrap()),
            "{what}: {msg}"
        );
        assert!(o.elapsed < DEADLINE + SLACK, "{what}: took {:?}", o.elapsed);
        assert!(!pod.has_link("eth0"), "{what}: pod wired");
        f.assert_nothing_left("clate");
    }

    // DEL of the earlier pod needs no API server: it succeeds at once and leaves nothing.
    let before = f.api().requests().len();
    let d = f.run(
        "DEL",
        "cearly",
        &f.hp.pod.path(),
        &Fixture::pod_args("early", "u-early"),
    );
    assert!(d.ok, "{}", d.json);
    assert!(d.elapsed < DEADLINE, "DEL took {:?}", d.elapsed);
    assert_eq!(
        f.api().requests().len(),
        before,
        "DEL called the API server"
    );
    f.assert_nothing_left("cearly");

    // Healthy again: ADD succeeds.
    f.api().set_fault(None);
    let o = f.run(
        "ADD",
        "cafter",
        &f.hp.pod.path(),
        &Fixture::pod_args("late", "u-late"),
    );
    assert!(o.ok, "{} {}", o.json, o.stderr);
    let d = f.run("DEL", "cafter", &f.hp.pod.path(), "");
    assert!(d.ok);
    f.assert_nothing_left("cafter");
}

/// A `tern-lookup` that never answers (and leaves a child holding its pipes) is killed a second
/// after the lookup deadline: ADD fails with 11 and leaves nothing. Without `tern-lookup` in
/// `CNI_PATH`, ADD fails with 7 naming it and STATUS reports 50.
#[test]
fn a_stuck_or_missing_tern_lookup_fails_add_in_time_and_status_says_so() {
    if tern_testkit::root::skip() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new("klstuck");
    f.api().set_pod("default", "web", "uid-1", &[], false);
    let stuck = f.path("stuck-bin");
    std::fs::create_dir_all(&stuck).unwrap();
    let script = stuck.join("tern-lookup");
    std::fs::write(&script, "#!/bin/sh\n(sleep 30) &\nsleep 30\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    for name in ["tern", "tern-ipam"] {
        std::fs::copy(bin_dir().join(name), stuck.join(name)).unwrap();
    }
    let path = format!("{}:{}", stuck.display(), ref_plugin_dir().display());
    let args = Fixture::pod_args("web", "uid-1");
    let o = f.run_with(
        "ADD",
        "cstuck",
        &f.hp.pod.path(),
        &args,
        &path,
        &f.netconf(),
    );
    assert!(!o.ok);
    assert_eq!(o.json["code"], 11, "{}", o.json);
    assert!(
        o.elapsed < DEADLINE + Duration::from_secs(1) + SLACK,
        "ADD took {:?}",
        o.elapsed
    );
    f.assert_nothing_left("cstuck");

    std::fs::remove_file(&script).unwrap();
    let o = f.run_with("ADD", "cmiss", &f.hp.pod.path(), &args, &path, &f.netconf());
    assert_eq!(o.json["code"], 7, "{}", o.json);
    assert!(
        o.json["msg"].as_str().unwrap().contains("tern-lookup"),
        "{}",
        o.json
    );
    f.assert_nothing_left("cmiss");
    let mut conf = f.netconf();
    conf["cniVersion"] = json!("1.1.0");
    // Debian's host-local predates STATUS; tern-ipam answers it.
    conf["ipam"]["type"] = json!("tern-ipam");
    let o = f.run_with("STATUS", "", Path::new(""), "", &path, &conf);
    assert_eq!(o.json["code"], 50, "{} {}", o.json, o.stderr);
    assert!(
        o.json["msg"].as_str().unwrap().contains("tern-lookup"),
        "{}",
        o.json
    );
}

/// STATUS has no deadline of its own: a kubeconfig path that is a FIFO nobody writes is refused
/// at once with 50 naming it, never waited on; only a missing one points at tern-agent.
#[test]
fn status_refuses_a_fifo_kubeconfig_without_waiting_on_it() {
    if tern_testkit::root::skip() {
        return;
    }
    use std::os::unix::fs::OpenOptionsExt;
    let f = Fixture::new("klfifo");
    let kc = f.path("kubeconfig");
    let _ = std::fs::remove_file(&kc);
    assert!(Command::new("mkfifo").arg(&kc).status().unwrap().success());
    // A STATUS stuck on the FIFO is released after 5 s (a writer opens and closes it), so a
    // regression fails the elapsed-time assertion instead of hanging the test run.
    let release = {
        let kc = kc.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(5));
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
                .open(&kc);
        })
    };
    let path = format!("{}:{}", bin_dir().display(), ref_plugin_dir().display());
    let mut conf = f.netconf();
    conf["cniVersion"] = json!("1.1.0");
    // Debian's host-local predates STATUS; tern-ipam answers it.
    conf["ipam"]["type"] = json!("tern-ipam");
    let o = f.run_with("STATUS", "", Path::new(""), "", &path, &conf);
    assert!(
        o.elapsed < Duration::from_secs(2),
        "STATUS took {:?}",
        o.elapsed
    );
    assert_eq!(o.json["code"], 50, "{} {}", o.json, o.stderr);
    let msg = o.json["msg"].as_str().unwrap();
    assert!(msg.contains("a FIFO"), "{}", o.json);
    assert!(
        !msg.contains("tern-agent"),
        "a bad file is not the agent's: {msg}"
    );
    release.join().unwrap();

    // A missing kubeconfig is the agent's to write: then the hint names it.
    std::fs::remove_file(&kc).unwrap();
    let o = f.run_with("STATUS", "", Path::new(""), "", &path, &conf);
    assert_eq!(o.json["code"], 50, "{} {}", o.json, o.stderr);
    let msg = o.json["msg"].as_str().unwrap();
    assert!(msg.contains("is tern-agent running?"), "{msg}");
}

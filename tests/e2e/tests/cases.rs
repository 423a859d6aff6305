//! Cases from real bug reports (numbered as reported): 01 (A, B), 03, 05 (A, B), 07 and 10,
//! with the default chain C0 (tern, host-local 10.99.0.0/24, then tern-tuning with the three TCP
//! keepalive sysctls and a per-test `dataDir`, `Node::c0_followers`). Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tern_testkit::netns::TestNetns;

fn c0_node(tag: &str) -> (Node, Value) {
    let mut node = Node::new(tag);
    let list = node.c0("1.0.0");
    node.tool.write_conflist(&list).unwrap();
    (node, list)
}

/// DELs each plugin of `list` directly, in reverse order as libcni does, with `netns` (possibly
/// empty) and `prev` as prevResult (`None`: no prevResult key). Each must exit 0 with nothing on
/// stdout.
fn del_each(node: &Node, list: &Value, cid: &str, netns: &str, prev: Option<&Value>) {
    let n = list["plugins"].as_array().unwrap().len();
    for i in (0..n).rev() {
        let mut conf = Node::plugin_conf(list, i);
        if let Some(p) = prev {
            conf["prevResult"] = p.clone();
        }
        let plugin = conf["type"].as_str().unwrap().to_owned();
        let out = node
            .call(&plugin, "DEL")
            .container_id(cid)
            .env("CNI_NETNS", netns)
            .netconf(&conf)
            .unwrap()
            .run()
            .unwrap();
        ok(
            &out,
            &format!(
                "DEL {plugin} (CNI_NETNS={netns:?}, prevResult: {})",
                prev.is_some()
            ),
        );
        assert!(
            out.stdout.is_empty(),
            "DEL {plugin} printed:\n{}",
            out.describe()
        );
    }
}

/// case-01 A: the netns is deleted, then DEL through libcni with the old path.
#[test]
fn case_01a_del_after_netns_deleted() {
    let (node, _) = c0_node("c01a");
    let pod = node.pod("c01a");
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD");
    assert_tuned(&pod);
    let addrs = result_addrs(add.json.as_ref().unwrap());
    let path = pod.path();
    drop(pod);
    for round in ["DEL", "repeated DEL"] {
        let del = node.tool.del(&path).unwrap();
        ok(&del, round);
        assert!(del.stdout.is_empty(), "{}", del.describe());
        node.assert_nothing_left(&addrs);
    }
}

/// case-01 B: DEL each plugin directly with `CNI_NETNS=""` and the ADD result as prevResult,
/// then delete the netns.
#[test]
fn case_01b_del_with_empty_netns() {
    let (node, list) = c0_node("c01b");
    let pod = node.pod("c01b");
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD");
    assert_tuned(&pod);
    let result = add.json.clone().unwrap();
    let addrs = result_addrs(&result);
    let cid = node.tool.get_container_id().to_owned();
    del_each(&node, &list, &cid, "", Some(&result));
    node.assert_nothing_left(&addrs);
    // Without a netns path tern-tuning cannot restore (the pod's values stay as tuned, the
    // netns is about to go); it drops its backup, which assert_nothing_left checks.
    drop(pod);
    del_each(&node, &list, &cid, "", Some(&result));
    node.assert_nothing_left(&addrs);
}

/// case-03: DEL each plugin directly without prevResult (the runtime lost its cache).
#[test]
fn case_03_del_without_prev_result() {
    let (node, list) = c0_node("c03");
    let pod = node.pod("c03");
    let before = keepalive_of(&pod);
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD");
    assert_tuned(&pod);
    let addrs = result_addrs(add.json.as_ref().unwrap());
    let cid = node.tool.get_container_id().to_owned();
    let ns = pod.path().display().to_string();
    del_each(&node, &list, &cid, &ns, None);
    assert!(!pod.has_link("eth0"), "pod end left");
    assert_eq!(keepalive_of(&pod), before, "tern-tuning did not restore");
    node.assert_nothing_left(&addrs);
    del_each(&node, &list, &cid, &ns, None);
}

/// C0's tern-tuning ran: the pod holds the configured keepalive values.
fn assert_tuned(pod: &TestNetns) {
    let want: Vec<String> = KEEPALIVE.iter().map(|(_, v)| (*v).to_owned()).collect();
    assert_eq!(
        keepalive_of(pod),
        want,
        "C0's keepalive not applied in the pod"
    );
}

fn ifindex(ns: &TestNetns, dev: &str) -> u64 {
    link_of(ns, dev)["ifindex"].as_u64().unwrap()
}

/// case-05 A: the pod already holds `eth0` (a veth end): ADD fails with an error JSON, nothing
/// is reserved or created, the existing `eth0` keeps its ifindex, no pod sysctl changed.
#[test]
fn case_05a_ifname_taken() {
    let (node, _) = c0_node("c05a");
    let pod = node.pod("c05a");
    pod.add_veth("eth0", "other0");
    let before = ifindex(&pod, "eth0");
    let keepalive = keepalive_of(&pod);
    assert_ne!(
        keepalive[0], KEEPALIVE[0].1,
        "C0's value must differ from the default"
    );
    let out = node.tool.add(pod.path()).unwrap();
    failed_with(&out, 100, "eth0 already exists", "ADD into a taken ifname");
    assert_eq!(
        ifindex(&pod, "eth0"),
        before,
        "the existing eth0 was replaced"
    );
    assert_eq!(link_of(&pod, "eth0")["linkinfo"]["info_kind"], "veth");
    assert_eq!(keepalive_of(&pod), keepalive, "a pod sysctl changed");
    node.assert_nothing_left(&["10.99.0.2".parse().unwrap()]);
    // The runtime's DEL of the failed ADD must not take the foreign eth0 with it.
    ok(
        &node.tool.del(pod.path()).unwrap(),
        "DEL after the failed ADD",
    );
    assert_eq!(
        ifindex(&pod, "eth0"),
        before,
        "DEL removed a link tern did not create"
    );
}

/// case-05 B: `"mtu": 70000`: ADD fails with code 7; nothing left (no tern-tuning backup either:
/// tuning never ran); no pod sysctl changed.
#[test]
fn case_05b_mtu_70000() {
    let (mut node, mut list) = c0_node("c05b");
    list["plugins"][0]["mtu"] = json!(70000);
    node.tool.write_conflist(&list).unwrap();
    let pod = node.pod("c05b");
    let keepalive = keepalive_of(&pod);
    assert_ne!(
        keepalive[0], KEEPALIVE[0].1,
        "C0's value must differ from the default"
    );
    let out = node.tool.add(pod.path()).unwrap();
    failed_with(&out, 7, "70000", "ADD with mtu 70000");
    assert!(!pod.has_link("eth0"));
    assert_eq!(keepalive_of(&pod), keepalive, "a pod sysctl changed");
    assert!(
        !node.tuning_dir().exists(),
        "tern-tuning ran: its dataDir was created"
    );
    node.assert_nothing_left(&["10.99.0.2".parse().unwrap()]);
}

/// case-07: ADD through libcni in its own process group, SIGKILLed after t ms for t in 5..320,
/// five sweeps; after each kill DEL exits 0 and nothing is left; the next ADD is not blocked by
/// a stale IPAM lock; no half-written file anywhere.
#[test]
fn case_07_add_killed_midway() {
    let (mut node, _) = c0_node("c07");
    let pod = node.pod("c07");
    let keepalive = keepalive_of(&pod);
    let t0 = Instant::now();
    let mut completed = 0;
    let mut libcni_corrupt_caches = 0;
    let mut host_local_torn = 0;
    for sweep in 0..5 {
        for t in [5u64, 10, 20, 40, 80, 160, 320] {
            let cid = format!("c07-{sweep}-{t}");
            node.tool.container_id(&cid);
            let mut cmd = node.tool.command("add", Some(&pod.path()));
            cmd.process_group(0)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let started = Instant::now();
            let mut child = cmd.spawn().unwrap();
            let pgid = Pid::from_raw(i32::try_from(child.id()).unwrap());
            std::thread::sleep(Duration::from_millis(t));
            if child.try_wait().unwrap().is_some() {
                completed += 1;
            }
            // The whole group: cnitool, tern and host-local if they are still running.
            let _ = killpg(pgid, Signal::SIGKILL);
            child.wait().unwrap();
            // Nothing of the group may outlive the kill.
            while killpg(pgid, None).is_ok() {
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "group {pgid} survived SIGKILL"
                );
                std::thread::sleep(Duration::from_millis(2));
            }
            let mut del = node.tool.del(pod.path()).unwrap();
            if !del.success() {
                // Debian's libcni 1.1.2 writes its result cache with a plain WriteFile: a kill
                // mid-write leaves a truncated file that makes its DEL fail before any plugin
                // runs (the containerd#5438 story, on the runtime's side). Only that failure is
                // accepted: a runtime library's own file, then removed as a fixed runtime would.
                failed_with(&del, 0, "cached result", "libcni DEL after a kill");
                let corrupt = corrupt_json_files(&node.tool.cache_dir());
                assert!(
                    !corrupt.is_empty(),
                    "DEL failed, but no corrupt libcni cache file:\n{}",
                    del.describe()
                );
                libcni_corrupt_caches += 1;
                corrupt
                    .iter()
                    .for_each(|p| std::fs::remove_file(p).unwrap());
                del = node.tool.del(pod.path()).unwrap();
            }
            ok(&del, &format!("DEL after a kill at {t} ms (sweep {sweep})"));
            assert!(!pod.has_link("eth0"), "pod end left after DEL ({t} ms)");
            assert_eq!(
                keepalive_of(&pod),
                keepalive,
                "pod keepalive not restored after a kill at {t} ms"
            );
            host_local_torn += remove_torn_reservations(&node);
            node.assert_nothing_left(
                &(2..12)
                    .map(|i| format!("10.99.0.{i}").parse().unwrap())
                    .collect::<Vec<_>>(),
            );
        }
    }
    // The next ADD works at once (no stale lock), and its DEL leaves nothing.
    node.tool.container_id("c07-final");
    node.tool.timeout(Duration::from_secs(10));
    let add = node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD after the kills");
    ok(&node.tool.del(pod.path()).unwrap(), "final DEL");
    node.assert_nothing_left(&result_addrs(add.json.as_ref().unwrap()));
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "case-07 took {:?}",
        t0.elapsed()
    );
    eprintln!("case-07: {completed} ADDs finished before the kill; {libcni_corrupt_caches} kills left a truncated libcni cache file, {host_local_torn} an empty host-local reservation");
    // Some kills must land mid-ADD, or the test proves nothing.
    assert!(completed < 35, "every ADD finished before its kill");
}

/// case-10: `CNI_NETNS` is the plugin's own netns: tern's ADD and DEL and tern-tuning's ADD (with
/// a keepalive sysctl and a valid prevResult, so only the netns can be the reason) are refused
/// with code 8 before any change; the host link `brt-dummy0` is intact, the host's keepalive
/// unchanged.
#[test]
fn case_10_own_netns_refused() {
    let (node, list) = c0_node("c10");
    node.host.add_veth("brt-dummy0", "brt-peer0");
    node.host
        .ip(&["addr", "add", "198.51.100.7/24", "dev", "brt-dummy0"]);
    let before = link_of(&node.host, "brt-dummy0");
    let addrs_before = addrs_of(&node.host, "brt-dummy0");
    let keepalive = keepalive_of(&node.host);
    let machine = machine_keepalive();
    assert_ne!(
        keepalive[0], KEEPALIVE[0].1,
        "C0's value must differ from the host's"
    );
    let conf = Node::plugin_conf(&list, 0);
    for (verb, ifname) in [
        ("ADD", "eth0"),
        ("DEL", "brt-dummy0"),
        ("ADD", "brt-dummy0"),
    ] {
        let out = node
            .call("tern", verb)
            .netns("/proc/self/ns/net")
            .ifname(ifname)
            .netconf(&conf)
            .unwrap()
            .run()
            .unwrap();
        failed_with(
            &out,
            8,
            "should not be the same",
            &format!("{verb} {ifname} in own netns"),
        );
    }
    // tern-tuning, with a prevResult naming brt-dummy0 in "the pod" (really the host).
    let mut tconf = Node::plugin_conf(&list, 1);
    tconf["prevResult"] = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "brt-dummy0", "sandbox": "/proc/self/ns/net"}],
        "ips": [{"interface": 0, "address": "198.51.100.7/24"}],
    });
    for ifname in ["brt-dummy0", "eth0"] {
        let out = node
            .call("tern-tuning", "ADD")
            .netns("/proc/self/ns/net")
            .ifname(ifname)
            .netconf(&tconf)
            .unwrap()
            .run()
            .unwrap();
        failed_with(
            &out,
            8,
            "should not be the same",
            &format!("tern-tuning ADD {ifname} in own netns"),
        );
    }
    assert!(
        !node.tuning_dir().exists(),
        "tern-tuning wrote a backup for a refused ADD"
    );
    // Through libcni as well: the plugin resolves /proc/self in its own process.
    let out = node.tool.add("/proc/self/ns/net").unwrap();
    failed_with(
        &out,
        8,
        "should not be the same",
        "ADD through libcni into /proc/self/ns/net",
    );
    let after = link_of(&node.host, "brt-dummy0");
    for k in ["ifindex", "flags", "mtu", "address", "operstate"] {
        assert_eq!(before[k], after[k], "brt-dummy0 {k} changed");
    }
    assert_eq!(
        addrs_of(&node.host, "brt-dummy0"),
        addrs_before,
        "brt-dummy0 addresses changed"
    );
    assert_eq!(
        keepalive_of(&node.host),
        keepalive,
        "the host's keepalive changed"
    );
    assert_eq!(
        machine_keepalive(),
        machine,
        "the machine's keepalive changed"
    );
    node.assert_nothing_left(&["10.99.0.2".parse().unwrap()]);
}

/// Files under `dir` that are not valid JSON (truncated by a kill mid-write).
fn corrupt_json_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|p| serde_json::from_slice::<Value>(&std::fs::read(p).unwrap()).is_err())
        .collect()
}

/// Debian's host-local creates a reservation file (O_EXCL) and then writes the container ID into
/// it: killed in between, it leaves an empty file that no DEL can match (release is by the ID in
/// the file). That is host-local's own torn write, not a missed release: only *empty* files are
/// accepted and removed here; a reservation holding an ID after DEL fails the test.
fn remove_torn_reservations(node: &Node) -> usize {
    let mut torn = 0;
    for p in files_under(&node.data_dir()) {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.parse::<std::net::IpAddr>().is_err() {
            continue;
        }
        let content = std::fs::read_to_string(&p).unwrap();
        assert!(
            content.trim().is_empty(),
            "reservation {name} still holds {content:?} after DEL: IPAM was not released"
        );
        std::fs::remove_file(&p).unwrap();
        torn += 1;
    }
    torn
}

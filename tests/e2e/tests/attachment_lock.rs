//! ADD and DEL of one attachment racing, and GC of lock files.
//!
//! ADD and DEL of one attachment racing, through libcni: DEL waits for the ADD in flight (the
//! per-attachment lock), so the pod is never left wired with a released address, while a verb of
//! another attachment does not wait. (A chain's later plugins are the runtime's to order: the
//! spec forbids it concurrent verbs of one attachment; each plugin only serialises its own.) Deterministic: the IPAM plugin (host-local behind a script)
//! pauses inside ADD, after allocating, until the test lets it go. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use tern_testkit::exec::conflist;

/// host-local, then (ADD only) a pause until `go` exists in the script's directory.
fn write_pausing_ipam(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let script = format!(
        "#!/bin/sh\n# test-only: host-local, then a pause the test controls (ADD only).\n\
         d=$(dirname \"$0\")\nin=$(cat)\nout=$(printf '%s' \"$in\" | {hl})\nrc=$?\n\
         if [ \"$CNI_COMMAND\" = ADD ]; then touch \"$d/in-ipam\"; i=0; \
         while [ ! -e \"$d/go\" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; fi\n\
         printf '%s\\n' \"$out\"\nexit $rc\n",
        hl = tern_testkit::exec::ref_plugin_dir()
            .join("host-local")
            .display()
    );
    let p = dir.join("slow-host-local");
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn spawn(mut cmd: Command) -> JoinHandle<(Output, Duration)> {
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let out = cmd.output().unwrap();
        (out, t0.elapsed())
    })
}

fn node_with_pausing_ipam(tag: &str) -> Node {
    let mut node = Node::new(tag);
    let bin = node.tool.scratch().join("ipam-bin");
    write_pausing_ipam(&bin);
    let mut t = node.tern(Fam::V4.ranges());
    t["ipam"]["type"] = json!("slow-host-local");
    let list = conflist(C0_NAME, "1.0.0", vec![t]);
    node.tool.write_conflist(&list).unwrap();
    node.tool.cni_path(&cni_path_with(&bin));
    node
}

#[test]
fn del_waits_for_the_add_in_flight_and_other_attachments_do_not() {
    if tern_testkit::root::skip() {
        return;
    }
    // Repeated: the outcome must not depend on timing.
    for round in 0..3 {
        let tag = format!("lock{round}");
        let tag = tag.as_str();
        let mut node = node_with_pausing_ipam(tag);
        let bin = node.tool.scratch().join("ipam-bin");
        let (pod, other) = (node.pod(tag), node.pod(&format!("{tag}o")));
        let add = spawn(node.tool.command("add", Some(&pod.path())));
        wait_for("IPAM to allocate inside ADD", || {
            bin.join("in-ipam").exists()
        });
        let del = spawn(node.tool.command("del", Some(&pod.path())));
        // Another attachment's verbs go through while this one's ADD holds its lock.
        let cid = node.tool.get_container_id().to_owned();
        node.tool.container_id("another-attachment");
        let t0 = Instant::now();
        let out = node.tool.del(other.path()).unwrap();
        ok(&out, "DEL of another attachment");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "another attachment waited {:?}",
            t0.elapsed()
        );
        node.tool.container_id(&cid);
        std::thread::sleep(Duration::from_millis(500));
        assert!(!del.is_finished(), "DEL did not wait for the ADD in flight");
        std::fs::write(bin.join("go"), b"").unwrap();
        let (added, _) = add.join().unwrap();
        let (deleted, waited) = del.join().unwrap();
        assert!(
            added.status.success(),
            "ADD: {}",
            String::from_utf8_lossy(&added.stdout)
        );
        assert!(
            deleted.status.success(),
            "DEL: {}",
            String::from_utf8_lossy(&deleted.stdout)
        );
        assert!(waited >= Duration::from_millis(500), "DEL took {waited:?}");
        let r: Value = serde_json::from_slice(&added.stdout).unwrap();
        // DEL came last: nothing of the attachment may remain (no wired pod, lease released).
        node.assert_nothing_left(&result_addrs(&r));
        assert!(!pod.has_link("eth0"), "the pod is still wired");
    }
}

/// A verb killed with SIGKILL and never followed by DEL leaves its lock file: tern's and
/// tern-tuning's GC remove such files (no verb holds them) and leave a held one alone.
#[test]
fn gc_removes_lock_files_no_verb_holds() {
    if tern_testkit::root::skip() {
        return;
    }
    let node = Node::new("lockgc");
    let mut tern = node.tern(Fam::V4.ranges());
    tern["ipam"]["type"] = json!("tern-ipam"); // Debian's host-local predates GC
    tern["cniVersion"] = json!("1.1.0");
    tern["name"] = json!("lockgc");
    tern["cni.dev/valid-attachments"] = json!([{"containerID": "alive", "ifname": "eth0"}]);
    let mut tuning = node.tuning(keepalive_sysctls());
    tuning["cniVersion"] = json!("1.1.0");
    tuning["name"] = json!("lockgc");
    tuning["cni.dev/valid-attachments"] = tern["cni.dev/valid-attachments"].clone();
    for (plugin, conf, dir) in [
        ("tern", &tern, node.state_dir().join("lockgc")),
        ("tern-tuning", &tuning, node.tuning_dir()),
    ] {
        std::fs::create_dir_all(&dir).unwrap();
        let stray = dir.join("killed_eth0.lock");
        std::fs::write(&stray, b"").unwrap();
        let held = tern_node::lock::AttachmentLock::acquire(&dir, "busy", "eth0").unwrap();
        let out = node
            .call(plugin, "GC")
            .netconf(conf)
            .unwrap()
            .run()
            .unwrap();
        ok(&out, &format!("{plugin} GC"));
        assert!(
            !stray.exists(),
            "{plugin}: a killed verb's lock file survived GC"
        );
        assert!(held.path().exists(), "{plugin}: GC removed a held lock");
        drop(held);
        assert!(
            files_under(&dir).is_empty(),
            "{plugin}: {:?}",
            files_under(&dir)
        );
    }
}

//! tern-ipam under tern, as a node runs it: tern (the release binary, in a fake host netns)
//! delegates ADD, STATUS and GC at cniVersion 1.1.0 to tern-ipam found in `CNI_PATH`, which tern
//! runs in-process (the same library); a decoy `tern-ipam` that fails when exec'd proves it.
//! Needs root (network namespaces) and both release binaries.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{Ipam, Net};
use serde_json::{json, Value};
use tern_testkit::exec::bin_dir;
use tern_testkit::netns::HostAndPod;

struct Out {
    ok: bool,
    json: Option<Value>,
    text: String,
}

/// Runs the tern binary inside `hp.host` with `CNI_NETNS` = the pod netns.
fn tern(hp: &HostAndPod, cmd: &str, id: &str, conf: &Value) -> Out {
    tern_with_path(hp, cmd, id, conf, &bin_dir().display().to_string())
}

/// [`tern`] with another `CNI_PATH`.
fn tern_with_path(hp: &HostAndPod, cmd: &str, id: &str, conf: &Value, cni_path: &str) -> Out {
    let tern = bin_dir().join("tern");
    assert!(
        tern.is_file(),
        "{} missing: cargo build --release -p tern",
        tern.display()
    );
    let _ = Ipam::Tern.path(); // asserts tern-ipam is built too
    let mut c = Command::new("ip");
    c.args(["netns", "exec", hp.host.name()])
        .arg(&tern)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("CNI_COMMAND", cmd)
        .env("CNI_CONTAINERID", id)
        .env("CNI_IFNAME", "eth0")
        .env("CNI_NETNS", hp.pod.path())
        .env("CNI_PATH", cni_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(conf).unwrap())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    Out {
        ok: o.status.success(),
        json: serde_json::from_slice(&o.stdout).ok(),
        text: format!(
            "status {}\nstdout {}\nstderr {}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    }
}

#[test]
fn tern_delegates_add_status_and_gc_to_tern_ipam_at_1_1_0() {
    if tern_testkit::root::skip() {
        return;
    }
    let hp = HostAndPod::new("tipam");
    let n = Net::new();
    let mut c = n.conf("1.1.0", json!({"subnet": "10.124.0.0/24"}));
    c["type"] = json!("tern");
    c["stateDir"] = json!(n.data_dir().join("tern-state"));

    let add = tern(&hp, "ADD", "chain1", &c);
    assert!(add.ok, "{}", add.text);
    let j = add.json.unwrap();
    assert_eq!(j["ips"][0]["address"], "10.124.0.2/32", "{j}");
    assert_eq!(
        n.leases(),
        [("10.124.0.2".to_owned(), "chain1\r\neth0".to_owned())]
    );
    assert!(hp
        .pod
        .ip(&["-br", "addr", "show", "eth0"])
        .contains("10.124.0.2/32"));

    let status = tern(&hp, "STATUS", "x", &c);
    assert!(status.ok, "{}", status.text);

    let mut keep = c.clone();
    keep["cni.dev/valid-attachments"] = json!([{"containerID": "chain1", "ifname": "eth0"}]);
    let gc = tern(&hp, "GC", "x", &keep);
    assert!(gc.ok, "{}", gc.text);
    assert_eq!(n.leases().len(), 1, "a valid attachment keeps its lease");

    let mut none = c.clone();
    none["cni.dev/valid-attachments"] = json!([]);
    let gc = tern(&hp, "GC", "x", &none);
    assert!(gc.ok, "{}", gc.text);
    assert!(
        n.leases().is_empty(),
        "tern's GC reached tern-ipam: {:?}",
        n.leases()
    );

    // STATUS is forwarded: an unusable data dir makes tern report 50 too.
    let file = n.data_dir().join("a-file");
    std::fs::write(&file, "").unwrap();
    let mut bad = c.clone();
    bad["ipam"]["dataDir"] = json!(file.join("x"));
    let status = tern(&hp, "STATUS", "x", &bad);
    assert!(!status.ok, "{}", status.text);
    assert_eq!(status.json.unwrap()["code"], 50);
}

/// tern runs tern-ipam in-process for every verb: a `tern-ipam` in `CNI_PATH` that fails whenever
/// it is exec'd is never run, and the leases are host-local's format as the binary writes them.
/// Without a `tern-ipam` in `CNI_PATH`, tern fails as with exec (7; STATUS 50).
#[test]
fn tern_runs_tern_ipam_in_process_for_every_verb_once_found_in_cni_path() {
    if tern_testkit::root::skip() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let hp = HostAndPod::new("tipin");
    let n = Net::new();
    let decoy = n.data_dir().join("decoy-bin");
    std::fs::create_dir_all(&decoy).unwrap();
    let marker = n.data_dir().join("decoy-ran");
    let script = decoy.join("tern-ipam");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ntouch {}\necho '{{\"code\": 999, \"msg\": \"decoy exec'd\"}}'\nexit 1\n",
            marker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = decoy.display().to_string();
    let mut c = n.conf("1.1.0", json!({"subnet": "10.125.0.0/24"}));
    c["type"] = json!("tern");
    c["stateDir"] = json!(n.data_dir().join("tern-state"));

    let add = tern_with_path(&hp, "ADD", "inproc1", &c, &path);
    assert!(add.ok, "{}", add.text);
    let result = add.json.unwrap();
    assert_eq!(result["ips"][0]["address"], "10.125.0.2/32", "{result}");
    assert_eq!(
        n.leases(),
        [("10.125.0.2".to_owned(), "inproc1\r\neth0".to_owned())]
    );
    let mut chk = c.clone();
    chk["prevResult"] = result;
    let check = tern_with_path(&hp, "CHECK", "inproc1", &chk, &path);
    assert!(check.ok, "{}", check.text);
    let status = tern_with_path(&hp, "STATUS", "x", &c, &path);
    assert!(status.ok, "{}", status.text);
    let mut keep = c.clone();
    keep["cni.dev/valid-attachments"] = json!([{"containerID": "inproc1", "ifname": "eth0"}]);
    let gc = tern_with_path(&hp, "GC", "x", &keep, &path);
    assert!(gc.ok, "{}", gc.text);
    assert_eq!(n.leases().len(), 1, "GC kept the valid lease");
    let del = tern_with_path(&hp, "DEL", "inproc1", &c, &path);
    assert!(del.ok, "{}", del.text);
    assert!(n.leases().is_empty(), "DEL released: {:?}", n.leases());
    assert!(!marker.exists(), "the tern-ipam binary was exec'd");

    // No tern-ipam in CNI_PATH: the same failures as exec.
    let empty = n.data_dir().join("empty-bin");
    std::fs::create_dir_all(&empty).unwrap();
    let empty = empty.display().to_string();
    let add = tern_with_path(&hp, "ADD", "inproc2", &c, &empty);
    assert!(!add.ok, "{}", add.text);
    let e = add.json.unwrap();
    assert_eq!(e["code"], 7, "{e}");
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("failed to find plugin \"tern-ipam\""),
        "{e}"
    );
    let status = tern_with_path(&hp, "STATUS", "x", &c, &empty);
    assert!(!status.ok, "{}", status.text);
    assert_eq!(status.json.unwrap()["code"], 50);
    assert!(n.leases().is_empty());
}

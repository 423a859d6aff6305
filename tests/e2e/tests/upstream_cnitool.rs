//! Upstream `cnitool` (github.com/containernetworking/cni v1.3.0, libcni with CNI 1.1.0's STATUS
//! and GC; built by `scripts/build-go cni`) drives the default chain at cniVersion 1.1.0: ADD,
//! CHECK, STATUS, DEL, and GC with no valid attachment, which must remove everything ADD made;
//! and the draining conflist (`tern-agent uninstall`): STATUS fails, ADD is refused, DEL and GC work.
//!
//! deploy/'s chain — tern, tern-tuning, then the reference portmap and bandwidth (v1.10.0, the
//! entries taken from deploy/configmap.yaml as they are) — goes through the same verbs with a
//! hostPort and both bandwidth directions, dual stack: CHECK passes (v1.10.0's portmap checks
//! each family in its own table; Debian's 1.1.1 fails it, tests/e2e/tests/concurrency_chaining.rs),
//! STATUS and GC pass (neither plugin implements them; the CNI library answers for them), DEL
//! and GC remove their rules, qdiscs and ifb links.
//!
//! IPAM is the current reference host-local (`scripts/build-go plugins`, v1.10), which implements
//! GC; Debian's 1.1.1 does not. cnitool runs inside the test's fake host netns; it names the
//! container `cnitool-<hash of the netns path>` and keeps libcni's cache in `/var/lib/cni`.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::process::Output;

use common::{result_addrs, Fam, Node};
use serde_json::Value;
use tern_testkit::exec::bin_dir;
use tern_testkit::netns::TestNetns;

/// The Go programs `scripts/build-go` builds, as `scripts/test` exports them.
fn go_bin(var: &str, default: &str) -> PathBuf {
    let p = PathBuf::from(std::env::var(var).unwrap_or_else(|_| default.to_owned()));
    assert!(
        p.exists(),
        "{} missing: run `bash scripts/build-go` (or set {var})",
        p.display()
    );
    p
}

fn upstream_cnitool() -> PathBuf {
    go_bin(
        "TERN_UPSTREAM_CNITOOL",
        "/var/cache/tern-build/bin/cni/cnitool",
    )
}

fn current_ref_plugins() -> PathBuf {
    go_bin(
        "TERN_REF_PLUGINS_CURRENT",
        "/var/cache/tern-build/bin/plugins",
    )
}

/// `cnitool VERB c0 <pod netns>` inside the node's host netns.
fn cnitool(node: &Node, verb: &str, pod: &TestNetns) -> Output {
    cnitool_caps(node, verb, pod, None)
}

/// [`cnitool`] with `caps` as the runtime's capability arguments (cnitool's `CAP_ARGS`).
fn cnitool_caps(node: &Node, verb: &str, pod: &TestNetns, caps: Option<&Value>) -> Output {
    let cni_path = format!(
        "{}:{}",
        bin_dir().display(),
        current_ref_plugins().display()
    );
    std::process::Command::new("ip")
        .args(["netns", "exec", node.host.name()])
        .arg("env")
        .arg(format!("NETCONFPATH={}", node.tool.conf_dir().display()))
        .arg(format!("CNI_PATH={cni_path}"))
        .arg(format!(
            "CAP_ARGS={}",
            caps.map(Value::to_string).unwrap_or_default()
        ))
        .arg(upstream_cnitool())
        .args([verb, "c0"])
        .arg(pod.path())
        .output()
        .unwrap()
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Upstream cnitool keeps libcni's cache in `/var/lib/cni` for every test, and its GC DELs every
/// cached attachment of the network that is not valid — another test's pod too, while that test
/// runs (seen: a draining test's veth left after a GC raced the other GC test). One test at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A node whose chain C0 is at 1.1.0 with v1.10's host-local as IPAM.
fn node(tag: &str) -> Node {
    let mut n = Node::new(tag);
    let c0 = n.c0("1.1.0");
    n.tool.write_conflist(&c0).unwrap();
    n
}

#[test]
fn add_check_status_del_at_1_1_0() {
    if tern_testkit::root::skip() {
        return;
    }
    let _serial = serial();
    let node = node("upcni-del");
    let pod = node.pod("upcni-del");
    let out = cnitool(&node, "status", &pod);
    ok(&out, "STATUS before ADD");
    let out = cnitool(&node, "add", &pod);
    ok(&out, "ADD");
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["cniVersion"], "1.1.0", "{result}");
    let addrs = result_addrs(&result);
    assert_eq!(addrs.len(), 1, "{result}");
    assert!(
        pod.ip(&["-4", "addr", "show", "eth0"])
            .contains(&format!("{}/32", addrs[0])),
        "pod lacks {}",
        addrs[0]
    );
    ok(&cnitool(&node, "check", &pod), "CHECK");
    ok(&cnitool(&node, "status", &pod), "STATUS");
    ok(&cnitool(&node, "del", &pod), "DEL");
    node.assert_nothing_left(&addrs);
    ok(&cnitool(&node, "del", &pod), "DEL again");
}

#[test]
fn gc_with_no_valid_attachment_removes_everything() {
    if tern_testkit::root::skip() {
        return;
    }
    let _serial = serial();
    let node = node("upcni-gc");
    let pod = node.pod("upcni-gc");
    let out = cnitool(&node, "add", &pod);
    ok(&out, "ADD");
    let addrs = result_addrs(&serde_json::from_slice(&out.stdout).unwrap());
    assert!(!node.reservations().is_empty(), "ADD reserved nothing");
    // upstream cnitool's gc passes no valid attachment: every attachment of c0 is garbage
    ok(&cnitool(&node, "gc", &pod), "GC");
    node.assert_nothing_left(&addrs);
    ok(&cnitool(&node, "del", &pod), "DEL after GC");
}

/// cnitool's error line: libcni's error text (the plugin's `msg; details`; the code is not
/// printed, `tests/e2e/tests/drain.rs` checks the codes calling the plugin directly).
fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The draining conflist (`tern-agent uninstall`) through upstream libcni, as a 1.1.0 runtime
/// sees it: STATUS fails ("draining": the kubelet's network-not-ready), ADD is refused before
/// anything is made, while DEL and GC still work on the pod wired before the drain.
#[test]
fn draining_status_fails_add_refused_del_and_gc_work() {
    if tern_testkit::root::skip() {
        return;
    }
    let _serial = serial();
    let mut node = node("upcni-drain");
    let pod = node.pod("upcni-drain");
    let out = cnitool(&node, "add", &pod);
    ok(&out, "ADD before the drain");
    let addrs = result_addrs(&serde_json::from_slice(&out.stdout).unwrap());
    let mut c0 = node.c0("1.1.0");
    c0["plugins"][0]["draining"] = Value::Bool(true);
    node.tool.write_conflist(&c0).unwrap();

    let out = cnitool(&node, "status", &pod);
    assert!(!out.status.success(), "STATUS passed while draining");
    assert!(stderr(&out).starts_with("draining: "), "STATUS: {out:?}");
    let late = node.pod("upcni-drain-l");
    let out = cnitool(&node, "add", &late);
    assert!(!out.status.success(), "ADD passed while draining");
    assert!(stderr(&out).contains("being uninstalled"), "ADD: {out:?}");
    assert!(!late.has_link("eth0"), "the refused ADD made eth0");

    ok(&cnitool(&node, "gc", &pod), "GC while draining");
    node.assert_nothing_left(&addrs);
    ok(&cnitool(&node, "del", &pod), "DEL while draining");
}

/// The plugins deploy/configmap.yaml's conflist template chains after tern-tuning, as written
/// there (the template's placeholders filled with stand-ins).
fn deployed_followers() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/configmap.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let mut template = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.trim_end().ends_with("conflist.template: |") {
            inside = true;
        } else if inside && (line.starts_with("    ") || line.trim().is_empty()) {
            template.push_str(line);
            template.push('\n');
        } else if inside {
            break;
        }
    }
    let list: Value = serde_json::from_str(
        &template
            .replace("__KUBECONFIG_FILEPATH__", "/k")
            .replace("__POD_CIDR_RANGES__", "[]"),
    )
    .unwrap();
    let plugins = list["plugins"].as_array().unwrap();
    let types: Vec<&str> = plugins
        .iter()
        .map(|p| p["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["tern", "tern-tuning", "portmap", "bandwidth"]);
    plugins[2..].to_vec()
}

/// The host's nat rules (both families) that name host port 18090.
fn hostport_rules(node: &Node) -> String {
    let mut v = String::new();
    for tool in ["iptables-save", "ip6tables-save"] {
        for l in node.host.exec_ok(&[tool, "-t", "nat"]).lines() {
            if l.contains("18090") {
                v.push_str(l);
                v.push('\n');
            }
        }
    }
    v
}

/// The bandwidth plugin's ifb links (`bwp*`) in the node's host netns.
fn ifb_links(node: &Node) -> Vec<String> {
    node.host
        .ip(&["-o", "link", "show"])
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .filter(|n| n.starts_with("bwp"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn deployed_chain_with_portmap_and_bandwidth_at_1_1_0() {
    if tern_testkit::root::skip() {
        return;
    }
    let _serial = serial();
    let mut node = Node::new("upcni-pm");
    let mut followers = node.c0_followers();
    followers.extend(deployed_followers());
    let list = node.chain("1.1.0", Fam::Dual, followers);
    node.tool.write_conflist(&list).unwrap();
    // what containerd passes for a hostPort and for both bandwidth annotations at 10M (its burst
    // is 2^32-1 bits, toCNIBandWidth)
    let caps = serde_json::json!({
        "portMappings": [{"hostPort": 18090, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 10_000_000, "ingressBurst": 4_294_967_295_u64,
                      "egressRate": 10_000_000, "egressBurst": 4_294_967_295_u64},
    });
    for round in ["DEL", "GC"] {
        let pod = node.pod(&format!("upcni-pm-{}", round.to_lowercase()));
        let out = cnitool_caps(&node, "add", &pod, Some(&caps));
        ok(&out, &format!("ADD ({round} round)"));
        let result: Value = serde_json::from_slice(&out.stdout).unwrap();
        let addrs = result_addrs(&result);
        assert_eq!(addrs.len(), 2, "{result}");
        let rules = hostport_rules(&node);
        assert!(
            rules.contains(&format!("{}:80", addrs[0]))
                && rules.contains(&format!("[{}]:80", addrs[1])),
            "portmap DNAT of 18090 missing for {addrs:?}:\n{rules}"
        );
        let hv = result["interfaces"][0]["name"].as_str().unwrap().to_owned();
        assert!(hv.starts_with("tern"), "{result}");
        let tc = node.host.exec_ok(&["tc", "qdisc", "show", "dev", &hv]);
        assert!(
            tc.contains("tbf") && tc.contains("rate 10Mbit"),
            "ingress tbf on {hv}: {tc}"
        );
        assert_eq!(ifb_links(&node).len(), 1, "egress ifb link");
        ok(
            &cnitool_caps(&node, "check", &pod, Some(&caps)),
            &format!("CHECK ({round} round)"),
        );
        ok(&cnitool(&node, "status", &pod), "STATUS");
        if round == "DEL" {
            ok(&cnitool_caps(&node, "del", &pod, Some(&caps)), "DEL");
        } else {
            // no valid attachment: libcni DELs the cached attachment (with its cached
            // capability arguments, so portmap finds its rules), then GCs each plugin
            ok(&cnitool(&node, "gc", &pod), "GC");
        }
        assert_eq!(
            hostport_rules(&node),
            "",
            "portmap rules left after {round}"
        );
        assert_eq!(
            ifb_links(&node),
            Vec::<String>::new(),
            "ifb left after {round}"
        );
        node.assert_nothing_left(&addrs);
    }
}

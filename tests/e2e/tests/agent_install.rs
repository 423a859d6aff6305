//! `tern-agent install` with the real binaries, its output used as a runtime would: the installed
//! files wire a pod through libcni with the pod lookup (`agent_fixture`'s node, stand-in and
//! in-cluster credentials).
//!
//! The install steps themselves (binaries, kubeconfig, conflist into a scratch root; a tuning key
//! outside the allowlist refused with the previous conflist left in place) are covered by
//! agent/tests/install.rs (`installs_binaries_kubeconfig_and_conflist`,
//! `refuses_a_tuning_key_outside_the_allowlist_and_keeps_the_previous_conflist`,
//! `the_binary_installs_from_flags_and_environment`); this adds what those cannot. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent_fixture;
mod common;

use std::process::Command;

use agent_fixture::Cluster;
use common::*;
use serde_json::{json, Value};
use tern_testkit::exec::bin_dir;

/// `tern-agent install`, run as the init container would (in the fake host netns, in-cluster
/// credentials), into a scratch root from the real binaries: the conflist it renders (node
/// podCIDRs from the stand-in, the kubeconfig path filled) and the kubeconfig it writes (a token
/// from one TokenRequest) wire a pod through libcni with the pod lookup, and DEL leaves nothing.
#[test]
fn installed_conflist_wires_a_pod() {
    if tern_testkit::root::skip() {
        return;
    }
    let mut c = Cluster::new("aginst", 5.0);
    c.api().set_node("node-9", &["10.99.0.0/24"]);
    let src = c.dir("image/bin");
    std::fs::create_dir_all(&src).unwrap();
    for b in ["tern", "tern-tuning", "tern-ipam", "tern-lookup"] {
        std::fs::copy(bin_dir().join(b), src.join(b)).unwrap();
    }
    // the reference portmap and bandwidth tern's image ships beside them (tern-xtask image)
    let reference = std::path::PathBuf::from(
        std::env::var("TERN_REF_PLUGINS_CURRENT")
            .unwrap_or_else(|_| "/var/cache/tern-build/bin/plugins".into()),
    );
    for b in ["portmap", "bandwidth"] {
        std::fs::copy(reference.join(b), src.join(b))
            .unwrap_or_else(|e| panic!("{}: {e} (bash scripts/build-go plugins)", b));
    }
    let (bin, conf) = (c.dir("root/opt/cni/bin"), c.dir("root/etc/cni/net.d"));
    let template = json!({
        "cniVersion": "1.0.0",
        "name": "tern-__NODE_NAME__",
        "plugins": [
            {
                "type": "tern",
                "stateDir": c.node.state_dir(),
                "agentSocket": c.socket(),
                "kubernetes": {"kubeconfig": "__KUBECONFIG_FILEPATH__"},
                "ipam": {"type": "tern-ipam", "dataDir": c.node.data_dir(), "ranges": "__RANGES__"}
            },
            c.node.tuning(keepalive_sysctls()),
        ]
    })
    .to_string()
    .replace("\"__RANGES__\"", "__POD_CIDR_RANGES__");
    let addr = c.api().addr();
    let out = Command::new("ip")
        .args(["netns", "exec", c.node.host.name()])
        .arg(bin_dir().join("tern-agent"))
        .arg("install")
        .args(["--sa-dir", c.dir("sa").to_str().unwrap()])
        .args(["--src-bin-dir", src.to_str().unwrap()])
        .args(["--cni-bin-dir", bin.to_str().unwrap()])
        .args(["--cni-conf-dir", conf.to_str().unwrap()])
        .args(["--host-conf-dir", conf.to_str().unwrap()])
        .args(["--allowlist", c.dir("no-allowlist.conf").to_str().unwrap()])
        .args(["--pod-cidrs-from-node", "true"])
        .in_cluster(addr)
        .env("TERN_CONFLIST_TEMPLATE", template)
        .env("NODE_NAME", "node-9")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "install: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(c.token_requests(), 1);
    assert_eq!(c.api().count("/api/v1/nodes/node-9"), 1);
    for b in ["portmap", "bandwidth"] {
        assert_eq!(
            std::fs::read(bin.join(b)).unwrap(),
            std::fs::read(src.join(b)).unwrap(),
            "{b} installed from the image"
        );
    }
    let list: Value =
        serde_json::from_slice(&std::fs::read(conf.join("10-tern.conflist")).unwrap()).unwrap();
    assert_eq!(list["name"], "tern-node-9");
    assert_eq!(
        list["plugins"][0]["ipam"]["ranges"],
        json!([[{"subnet": "10.99.0.0/24"}]])
    );
    let kc = conf.join("tern-kubeconfig");
    assert_eq!(list["plugins"][0]["kubernetes"]["kubeconfig"], json!(kc));

    c.node.tool.write_conflist(&list).unwrap();
    c.node.tool.cni_path(&format!(
        "{}:{}",
        bin.display(),
        tern_testkit::exec::ref_plugin_dir().display()
    ));
    let pod = c.node.pod("aginst");
    c.use_pod("installed");
    let add = c.node.tool.add(pod.path()).unwrap();
    ok(&add, "ADD with the installed files");
    assert_eq!(
        c.pod_statuses("installed"),
        vec![200],
        "pod lookup with the installed kubeconfig"
    );
    assert_eq!(
        result_addrs(add.json.as_ref().unwrap()),
        Fam::V4.nth_addrs(0)
    );
    assert_eq!(keepalive_of(&pod)[0], KEEPALIVE[0].1);
    ok(&c.node.tool.check(pod.path()).unwrap(), "CHECK");
    ok(&c.node.tool.del(pod.path()).unwrap(), "DEL");
    c.node
        .assert_nothing_left(&result_addrs(add.json.as_ref().unwrap()));
}

//! `tern-agent install` as the init container runs it: copying only the CNI plugins tern ships,
//! fetching the token before it touches the host, working with no template flags, and reading
//! its flags' environment fallbacks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;
use tern_apiserver::Fault;

/// An image directory like `target/release`: the plugins beside everything else.
fn image(f: &Fixture) -> (PathBuf, PathBuf, PathBuf) {
    let src = f.dir.path().join("image/bin");
    std::fs::create_dir_all(src.join("build")).unwrap();
    for name in [
        "tern",
        "tern-tuning",
        "tern-ipam",
        "tern-lookup",
        "portmap",
        "bandwidth",
        "tern-agent",
        "tern-apiserver",
        "tern-bench",
        "libtern_kube.rlib",
        "tern.d",
        ".cargo-lock",
    ] {
        std::fs::write(src.join(name), format!("#!/bin/sh\necho {name}\n")).unwrap();
    }
    let root = f.dir.path().join("root");
    (src, root.join("opt/cni/bin"), root.join("etc/cni/net.d"))
}

fn install_cmd(f: &Fixture, src: &Path, bin: &Path, conf: &Path, extra: &[&str]) -> Output {
    agent(&["install"])
        .args(["--api-server", &f.s.url()])
        .args(["--sa-dir", f.cfg.sa_dir.to_str().unwrap()])
        .args(["--namespace", NS])
        .args(["--src-bin-dir", src.to_str().unwrap()])
        .args(["--cni-bin-dir", bin.to_str().unwrap()])
        .args(["--cni-conf-dir", conf.to_str().unwrap()])
        .args([
            "--allowlist",
            f.dir.path().join("none.conf").to_str().unwrap(),
        ])
        .args(extra)
        .env("NODE_NAME", "node-1")
        .output()
        .unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

#[test]
fn install_copies_only_the_plugins() {
    let f = Fixture::new();
    f.s.set_node("node-1", &["10.99.0.0/24"]);
    let (src, bin, conf) = image(&f);
    let out = install_cmd(&f, &src, &bin, &conf, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        names(&bin),
        [
            ".tern-reference-plugins",
            "bandwidth",
            "portmap",
            "tern",
            "tern-ipam",
            "tern-lookup",
            "tern-tuning"
        ]
    );
    for b in names(&bin).into_iter().filter(|b| !b.starts_with('.')) {
        let m = std::fs::metadata(bin.join(&b))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(m & 0o777, 0o755, "{b}");
        assert_eq!(
            std::fs::read(bin.join(&b)).unwrap(),
            std::fs::read(src.join(&b)).unwrap()
        );
    }
    assert_eq!(names(&conf), ["10-tern.conflist", "tern-kubeconfig"]);

    // The list is a flag.
    let f = Fixture::new();
    f.s.set_node("node-1", &["10.99.0.0/24"]);
    let (src, bin, conf) = image(&f);
    // The default conflist calls the API (kubernetes.kubeconfig): tern-lookup cannot be left out.
    let out = install_cmd(&f, &src, &bin, &conf, &["--plugins", "tern,tern-tuning"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("add tern-lookup"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(names(&bin), Vec::<String>::new(), "nothing installed");
    let out = install_cmd(
        &f,
        &src,
        &bin,
        &conf,
        &["--plugins", "tern,tern-tuning,tern-lookup"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        names(&bin),
        [
            ".tern-reference-plugins",
            "bandwidth",
            "portmap",
            "tern",
            "tern-lookup",
            "tern-tuning"
        ]
    );
    for bad in ["", "tern,,tern-ipam", "../tern", "tern,tern"] {
        let out = install_cmd(&f, &src, &bin, &conf, &["--plugins", bad]);
        assert!(!out.status.success(), "--plugins {bad:?} accepted");
        assert!(
            text(&out.stderr).contains("--plugins"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_missing_plugin_is_named_and_nothing_is_written() {
    let f = Fixture::new();
    f.s.set_node("node-1", &["10.99.0.0/24"]);
    let (src, bin, conf) = image(&f);
    std::fs::remove_file(src.join("tern-ipam")).unwrap();
    let out = install_cmd(&f, &src, &bin, &conf, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("tern-ipam") && err.contains("--plugins"),
        "{err}"
    );
    assert_eq!(names(&bin), Vec::<String>::new(), "no binary copied");
    assert_eq!(names(&conf), Vec::<String>::new());
    assert_eq!(f.token_requests(), 0, "checked before the TokenRequest");
}

#[test]
fn a_missing_reference_plugin_is_named_and_nothing_is_written() {
    let f = Fixture::new();
    f.s.set_node("node-1", &["10.99.0.0/24"]);
    let (src, bin, conf) = image(&f);
    std::fs::remove_file(src.join("bandwidth")).unwrap();
    let out = install_cmd(&f, &src, &bin, &conf, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("plugin bandwidth not found") && err.contains("--reference-plugins"),
        "{err}"
    );
    assert_eq!(names(&bin), Vec::<String>::new(), "no binary copied");
    assert_eq!(f.token_requests(), 0, "checked before the TokenRequest");
    // "" installs none; a name in both lists is refused
    let out = install_cmd(&f, &src, &bin, &conf, &["--reference-plugins", ""]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!bin.join("portmap").exists() && !bin.join(".tern-reference-plugins").exists());
    let out = install_cmd(
        &f,
        &src,
        &bin,
        &conf,
        &["--reference-plugins", "portmap,tern-ipam"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("both --plugins and --reference-plugins"),
        "{}",
        text(&out.stderr)
    );
}

/// The node's own portmap (Debian's, say) is replaced by default as Calico's install-cni does,
/// kept with `--update-reference-plugins false`, and in both cases survives uninstall, which
/// removes only what tern placed.
#[test]
fn the_nodes_own_portmap_is_never_removed() {
    let f = Fixture::new();
    f.s.set_node("node-1", &["10.99.0.0/24"]);
    let (src, bin, conf) = image(&f);
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("portmap"), "debian portmap 1.1.1").unwrap();
    let out = install_cmd(
        &f,
        &src,
        &bin,
        &conf,
        &["--update-reference-plugins", "false"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(bin.join("portmap")).unwrap(),
        "debian portmap 1.1.1"
    );
    assert_eq!(
        std::fs::read(bin.join("bandwidth")).unwrap(),
        std::fs::read(src.join("bandwidth")).unwrap()
    );
    let out = install_cmd(&f, &src, &bin, &conf, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("replaced a reference plugin tern did not install"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read(bin.join("portmap")).unwrap(),
        std::fs::read(src.join("portmap")).unwrap()
    );
    let state = f.dir.path().join("state");
    let out = agent(&["uninstall"])
        .args(["--cni-bin-dir", bin.to_str().unwrap()])
        .args(["--cni-conf-dir", conf.to_str().unwrap()])
        .args(["--state-dir", state.to_str().unwrap()])
        .args([
            "--remove-egress-nat",
            "false",
            "--remove-node-routes",
            "false",
            // the machine's own table: a real-cluster tier running meanwhile owns it
            "--remove-network-policy",
            "false",
            "--sandbox-removal-wait",
            "0s",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(names(&bin), ["portmap"], "only the node's own name is left");
}

#[test]
fn a_failing_token_request_leaves_the_binaries_alone() {
    let f = Fixture::new();
    f.s.set_node("node-1", &["10.99.0.0/24"]);
    let (src, bin, conf) = image(&f);
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("tern"), "old tern").unwrap();
    f.s.set_fault_on("/token", Fault::Status(500));
    let out = install_cmd(&f, &src, &bin, &conf, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("first CNI token"), "{err}");
    assert_eq!(
        err.matches("first CNI token").count(),
        1,
        "printed once: {err}"
    );
    assert_eq!(names(&bin), ["tern"], "nothing new in the bin dir");
    assert_eq!(std::fs::read(bin.join("tern")).unwrap(), b"old tern");
    assert!(!conf.join("10-tern.conflist").exists());
    assert!(!conf.join("tern-kubeconfig").exists());
}

#[test]
fn install_with_no_template_flags_uses_the_nodes_pod_cidrs() {
    let f = Fixture::new();
    f.s.set_node("node-1", &["10.99.0.0/24", "fd00:99::/64"]);
    let (src, bin, conf) = image(&f);
    let out = install_cmd(&f, &src, &bin, &conf, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: serde_json::Value =
        serde_json::from_slice(&std::fs::read(conf.join("10-tern.conflist")).unwrap()).unwrap();
    assert_eq!(
        list["plugins"][0]["ipam"]["ranges"],
        serde_json::json!([[{"subnet": "10.99.0.0/24"}], [{"subnet": "fd00:99::/64"}]])
    );
    assert_eq!(f.s.count("/api/v1/nodes/node-1"), 1);

    // Explicitly off with the built-in template: the error names the flag to change.
    let f = Fixture::new();
    let (src, bin, conf) = image(&f);
    let out = install_cmd(&f, &src, &bin, &conf, &["--pod-cidrs-from-node", "false"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("__POD_CIDR_RANGES__") && err.contains("--pod-cidrs-from-node true"),
        "{err}"
    );
    assert_eq!(names(&conf), Vec::<String>::new());
    assert_eq!(names(&bin), Vec::<String>::new());

    // Without a node name the error says which variable or flag to set.
    let out = agent(&["install"])
        .args(["--api-server", &f.s.url()])
        .args(["--src-bin-dir", src.to_str().unwrap()])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(
        err.contains("NODE_NAME") && err.contains("--node-name"),
        "{err}"
    );
}

#[test]
fn flags_fall_back_to_their_environment_variables_and_win_over_them() {
    let f = Fixture::new();
    f.s.set_node("node-1", &["10.99.0.0/24"]);
    let (src, bin, conf) = image(&f);
    let install = |extra: &[&str]| {
        agent(&["install"])
            .args(["--api-server", &f.s.url()])
            .args(["--sa-dir", f.cfg.sa_dir.to_str().unwrap()])
            .args(["--src-bin-dir", src.to_str().unwrap()])
            .args(["--cni-bin-dir", bin.to_str().unwrap()])
            .args(["--cni-conf-dir", conf.to_str().unwrap()])
            .args(extra)
            .env("NODE_NAME", "node-1")
            .env("POD_NAMESPACE", NS)
            .env("TERN_CNI_SERVICE_ACCOUNT", "tern-cni")
            .output()
            .unwrap()
    };
    // The sa-dir's namespace file says "tern" too: make it say something else, so only
    // POD_NAMESPACE can name the right one.
    std::fs::write(f.cfg.sa_dir.join("namespace"), "elsewhere").unwrap();
    let out = install(&[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        f.token_requests(),
        1,
        "POD_NAMESPACE and TERN_CNI_SERVICE_ACCOUNT used"
    );
    // The flag wins over the variable.
    let out = install(&["--service-account", "nobody"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(f.token_requests(), 1);
    assert_eq!(
        f.s.count("/api/v1/namespaces/tern/serviceaccounts/nobody/token"),
        1,
        "{}",
        text(&out.stderr)
    );
}

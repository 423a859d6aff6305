//! `tern-agent install` into a scratch root, against the API stand-in.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

use common::*;
use tern_agent::conflist::DEFAULT_TEMPLATE;
use tern_agent::install::reference::{Placement, DEFAULT_REFERENCE_PLUGINS, LEDGER};
use tern_agent::install::{install, InstallConfig, DEFAULT_PLUGINS};
use tern_apiserver::Fault;

struct Root {
    src: PathBuf,
    bin: PathBuf,
    conf: PathBuf,
    allowlist: PathBuf,
}

fn root(f: &Fixture) -> Root {
    let r = f.dir.path().join("root");
    let src = f.dir.path().join("image/opt/tern/bin");
    std::fs::create_dir_all(&src).unwrap();
    for (name, body) in [
        ("tern", "#!/bin/sh\necho tern\n"),
        ("tern-tuning", "#!/bin/sh\necho tuning\n"),
        ("tern-ipam", "#!/bin/sh\necho ipam\n"),
        ("tern-lookup", "#!/bin/sh\necho lookup\n"),
        ("portmap", "#!/bin/sh\necho portmap v1.10.0\n"),
        ("bandwidth", "#!/bin/sh\necho bandwidth v1.10.0\n"),
    ] {
        std::fs::write(src.join(name), body).unwrap();
    }
    Root {
        src,
        bin: r.join("opt/cni/bin"),
        conf: r.join("etc/cni/net.d"),
        allowlist: r.join("etc/cni/tuning/allowlist.conf"),
    }
}

fn cfg(f: &Fixture, r: &Root, template: &str) -> InstallConfig {
    InstallConfig {
        src_bin_dir: r.src.clone(),
        plugins: DEFAULT_PLUGINS.iter().map(|p| (*p).to_owned()).collect(),
        reference_plugins: DEFAULT_REFERENCE_PLUGINS
            .iter()
            .map(|p| (*p).to_owned())
            .collect(),
        update_reference_plugins: true,
        cni_bin_dir: r.bin.clone(),
        cni_conf_dir: r.conf.clone(),
        host_conf_dir: "/etc/cni/net.d".into(),
        conflist_name: "10-tern.conflist".into(),
        kubeconfig_name: "tern-kubeconfig".into(),
        template: template.into(),
        node_name: "node-1".into(),
        pod_cidrs_from_node: true,
        allowlist: r.allowlist.clone(),
        token_target: f.cfg.token_target(),
    }
}

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn installs_binaries_kubeconfig_and_conflist() {
    let f = Fixture::new();
    f.s.set_node("node-1", &["10.99.0.0/24", "fd00:99::/64"]);
    let r = root(&f);
    let report = install(&cfg(&f, &r, DEFAULT_TEMPLATE)).unwrap();
    assert_eq!(
        report.binaries,
        vec!["tern", "tern-tuning", "tern-ipam", "tern-lookup"]
    );
    for b in ["tern", "tern-tuning", "tern-ipam", "tern-lookup"] {
        assert_eq!(
            std::fs::read(r.bin.join(b)).unwrap(),
            std::fs::read(r.src.join(b)).unwrap()
        );
        assert_eq!(mode(&r.bin.join(b)), 0o755);
    }
    // the reference plugins, absent from the node: installed and recorded as tern's
    assert_eq!(
        report.reference,
        vec![
            ("portmap".to_owned(), Placement::Installed),
            ("bandwidth".to_owned(), Placement::Installed)
        ]
    );
    for b in ["portmap", "bandwidth"] {
        assert_eq!(
            std::fs::read(r.bin.join(b)).unwrap(),
            std::fs::read(r.src.join(b)).unwrap()
        );
        assert_eq!(mode(&r.bin.join(b)), 0o755);
    }
    assert!(r.bin.join(LEDGER).is_file());
    assert_eq!(mode(&report.kubeconfig), 0o600);
    assert_eq!(f.s.count("/api/v1/nodes/node-1"), 1, "podCIDRs read once");
    let kc = tern_kube::kubeconfig::load(&report.kubeconfig).unwrap();
    tern_kube::Client::new(&kc)
        .unwrap()
        .get_node("node-1", std::time::Duration::from_secs(2))
        .unwrap();
    let conflist: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report.conflist).unwrap()).unwrap();
    assert_eq!(
        conflist["plugins"][0]["kubernetes"]["kubeconfig"],
        "/etc/cni/net.d/tern-kubeconfig"
    );
    assert_eq!(
        conflist["plugins"][0]["ipam"]["ranges"],
        serde_json::json!([[{"subnet": "10.99.0.0/24"}], [{"subnet": "fd00:99::/64"}]])
    );
    assert_eq!(f.token_requests(), 1);
    let temp_left = std::fs::read_dir(&r.conf)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with('.')
        })
        .count();
    assert_eq!(temp_left, 0);
}

#[test]
fn refuses_a_tuning_key_outside_the_allowlist_and_keeps_the_previous_conflist() {
    let f = Fixture::new();
    f.s.set_node("node-1", &["10.99.0.0/24"]);
    let r = root(&f);
    install(&cfg(&f, &r, DEFAULT_TEMPLATE)).unwrap();
    let conflist = r.conf.join("10-tern.conflist");
    let before = std::fs::read(&conflist).unwrap();
    let kc_before = std::fs::read(r.conf.join("tern-kubeconfig")).unwrap();
    std::fs::write(r.src.join("tern"), "new binary").unwrap();
    let bad = DEFAULT_TEMPLATE.replace(
        "\"net.ipv4.tcp_keepalive_probes\": \"5\"",
        "\"net.ipv4.tcp_keepalive_probes\": \"5\", \"net.ipv4.ip_forward\": \"1\"",
    );
    let e = install(&cfg(&f, &r, &bad)).unwrap_err().to_string();
    assert!(e.contains("net.ipv4.ip_forward"), "{e}");
    assert_eq!(
        std::fs::read(&conflist).unwrap(),
        before,
        "previous conflist left in place"
    );
    assert_eq!(
        std::fs::read(r.conf.join("tern-kubeconfig")).unwrap(),
        kc_before,
        "nothing else touched"
    );
    assert_ne!(std::fs::read(r.bin.join("tern")).unwrap(), b"new binary");
    assert_eq!(f.token_requests(), 1);
    // A host allowlist narrower than the template is honoured too.
    std::fs::create_dir_all(r.allowlist.parent().unwrap()).unwrap();
    std::fs::write(&r.allowlist, "net\\.ipv4\\.tcp_keepalive_time\n").unwrap();
    let e = install(&cfg(&f, &r, DEFAULT_TEMPLATE))
        .unwrap_err()
        .to_string();
    assert!(e.contains("net.ipv4.tcp_keepalive_intvl"), "{e}");
    assert_eq!(std::fs::read(&conflist).unwrap(), before);
    // An unusable allowlist fails closed.
    std::fs::write(&r.allowlist, "net\\.ipv4\\.(\n").unwrap();
    assert!(install(&cfg(&f, &r, DEFAULT_TEMPLATE)).is_err());
    assert_eq!(std::fs::read(&conflist).unwrap(), before);
}

#[test]
fn no_conflist_without_a_kubeconfig() {
    let f = Fixture::new();
    f.s.set_node("node-1", &["10.99.0.0/24"]);
    f.s.set_fault_on("/token", Fault::Status(500));
    let r = root(&f);
    let e = install(&cfg(&f, &r, DEFAULT_TEMPLATE)).unwrap_err();
    assert!(format!("{e:#}").contains("first CNI token"), "{e:#}");
    assert!(!r.conf.join("10-tern.conflist").exists());
    assert!(!r.conf.join("tern-kubeconfig").exists());
    // A node without podCIDRs is refused before anything is written.
    f.s.set_fault(None);
    f.s.set_node("node-1", &[]);
    let e = install(&cfg(&f, &r, DEFAULT_TEMPLATE))
        .unwrap_err()
        .to_string();
    assert!(e.contains("podCIDRs"), "{e}");
    assert!(!r.conf.join("10-tern.conflist").exists());
}

#[test]
fn the_binary_installs_from_flags_and_environment() {
    let f = Fixture::new();
    let r = root(&f);
    let template = "{\"cniVersion\":\"1.0.0\",\"name\":\"tern-__NODE_NAME__\",\"plugins\":[{\"type\":\"tern\",\"kubernetes\":{\"kubeconfig\":\"__KUBECONFIG_FILEPATH__\"},\"ipam\":{\"type\":\"host-local\",\"ranges\":[[{\"subnet\":\"10.98.0.0/24\"}]]}}]}";
    let out = Command::new(env!("CARGO_BIN_EXE_tern-agent"))
        .arg("install")
        .args([
            "--api-server",
            &f.s.url(),
            "--sa-dir",
            f.cfg.sa_dir.to_str().unwrap(),
            "--namespace",
            NS,
        ])
        .args([
            "--src-bin-dir",
            r.src.to_str().unwrap(),
            "--cni-bin-dir",
            r.bin.to_str().unwrap(),
        ])
        .args([
            "--cni-conf-dir",
            r.conf.to_str().unwrap(),
            "--allowlist",
            r.allowlist.to_str().unwrap(),
        ])
        .env("TERN_CONFLIST_TEMPLATE", template)
        .env("NODE_NAME", "node-7")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let conflist: serde_json::Value =
        serde_json::from_slice(&std::fs::read(r.conf.join("10-tern.conflist")).unwrap()).unwrap();
    assert_eq!(conflist["name"], "tern-node-7");
    assert!(r.bin.join("tern-tuning").exists());
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("eyJ"),
        "no token in the log"
    );
}

/// An install that begins while an uninstall runs (a DaemonSet deleted and created again: the
/// old pod's preStop uninstalls while the new pod's init container installs) is never undone by
/// that uninstall's finish: afterwards the node is installed (conflist not draining, kubeconfig,
/// plugins, no mark). The uninstall's attachment count walks many network directories, so its
/// finish comes well after its drain: without the conf dir's lock over the whole uninstall and
/// over install's writes, the finish removed what the install had just written.
#[test]
fn an_install_during_an_uninstall_is_not_undone_by_its_finish() {
    let f = Fixture::new();
    f.s.set_node("node-1", &["10.99.0.0/24"]);
    let r = root(&f);
    let c = cfg(&f, &r, DEFAULT_TEMPLATE);
    let state = f.dir.path().join("state");
    for i in 0..4000 {
        std::fs::create_dir_all(state.join(format!("net{i}"))).unwrap();
    }
    let p = |d: &std::path::Path| d.display().to_string();
    let args: Vec<String> = vec![
        "--cni-bin-dir".into(),
        p(&r.bin),
        "--cni-conf-dir".into(),
        p(&r.conf),
        "--state-dir".into(),
        p(&state),
        "--remove-egress-nat".into(),
        "false".into(),
        "--remove-node-routes".into(),
        "false".into(),
        "--remove-network-policy".into(),
        "false".into(),
        "--sandbox-removal-wait".into(),
        "0s".into(),
    ];
    let un: tern_agent::uninstall::UninstallArgs =
        tern_agent::args::parse_subcommand("uninstall", &args).unwrap();
    let mark = r.conf.join(tern_agent::uninstall::UNINSTALLING_MARK);
    for round in 0..5 {
        install(&c).unwrap();
        std::thread::scope(|s| {
            let h = s.spawn(|| tern_agent::uninstall::uninstall(&un).unwrap());
            // The uninstall began (its mark is written): install again.
            assert!(wait_until(std::time::Duration::from_secs(10), || mark
                .exists()
                || h.is_finished()));
            install(&c).unwrap();
            h.join().unwrap();
        });
        let conflist = r.conf.join("10-tern.conflist");
        assert!(conflist.exists(), "round {round}: the conflist is gone");
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&conflist).unwrap()).unwrap();
        assert_eq!(v["plugins"][0].get("draining"), None, "round {round}");
        assert!(r.conf.join("tern-kubeconfig").exists(), "round {round}");
        for b in ["tern", "tern-tuning", "tern-ipam", "tern-lookup"] {
            assert!(r.bin.join(b).exists(), "round {round}: {b} is gone");
        }
        assert!(!mark.exists(), "round {round}: the mark is left");
    }
}

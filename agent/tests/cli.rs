//! The `tern-agent` command line as an operator meets it: `--help` per subcommand, unknown,
//! repeated and malformed flags, one message per error, and `install` copying only the CNI
//! plugins tern ships, fetching the token before it touches the host, and working with no
//! template flags.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use tern_apiserver::Fault;

fn agent(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tern-agent"));
    c.args(args)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("POD_NAMESPACE")
        .env_remove("NODE_NAME")
        .env_remove("TERN_CONFLIST_TEMPLATE")
        .env_remove("CNI_TOKEN_REFRESH_DURATION")
        .env_remove("TERN_CNI_SERVICE_ACCOUNT");
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `tern-agent <args>`, expects failure, returns stderr.
fn fails(args: &[&str]) -> String {
    let out = agent(args).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
    text(&out.stderr)
}

#[test]
fn help_for_each_subcommand_exits_zero_and_lists_flags_defaults_and_env() {
    for sub in ["install", "run"] {
        for h in ["--help", "-h"] {
            let out = agent(&[sub, h]).output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{sub} {h}: {out:?}");
            let help = text(&out.stdout);
            assert!(help.contains(&format!("tern-agent {sub}")), "{help}");
            assert!(help.contains("--api-server"), "{help}");
            assert!(help.contains("KUBERNETES_SERVICE_HOST"), "{help}");
            assert!(help.contains("POD_NAMESPACE"), "{help}");
            assert!(!help.contains("needs a value"), "{help}");
        }
        // Help wins even after other flags.
        let out = agent(&[sub, "--namespace", "x", "--help"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    let run = text(&agent(&["run", "--help"]).output().unwrap().stdout);
    for needle in [
        "--token-lifetime",
        "[default: 24h]",
        "--listen",
        "127.0.0.1:9412",
        "--allow-non-loopback-listen",
        "--channel-interval",
        "CNI_TOKEN_REFRESH_DURATION",
        "TERN_CNI_SERVICE_ACCOUNT",
        "TERN_LOG",
    ] {
        assert!(run.contains(needle), "run --help lacks {needle:?}:\n{run}");
    }
    let install = text(&agent(&["install", "--help"]).output().unwrap().stdout);
    for needle in [
        "--src-bin-dir",
        "/opt/tern/bin",
        "--plugins",
        "tern,tern-tuning,tern-ipam,tern-lookup",
        "--cni-bin-dir",
        "--pod-cidrs-from-node",
        "--template",
        "TERN_CONFLIST_TEMPLATE",
        "NODE_NAME",
    ] {
        assert!(
            install.contains(needle),
            "install --help lacks {needle:?}:\n{install}"
        );
    }
    // The top-level usage lists the subcommands and points to their --help.
    let out = agent(&[]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let usage = text(&out.stderr);
    for needle in ["tern-agent run --help", "tern-agent install --help"] {
        assert!(usage.contains(needle), "{usage}");
    }
    let out = agent(&["--help"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("tern-agent install --help"));
}

#[test]
fn unknown_flags_are_named_and_every_error_is_printed_once() {
    for sub in ["install", "run"] {
        for args in [
            vec![sub, "--bogus"],
            vec![sub, "--bogus", "1"],
            vec![sub, "--bogus=1"],
        ] {
            let err = fails(&args);
            assert!(err.contains("unknown flag --bogus"), "{args:?}: {err}");
            assert!(err.contains("--api-server"), "lists the known flags: {err}");
            assert!(!err.contains("needs a value"), "{err}");
            assert_eq!(
                err.matches("unknown flag").count(),
                1,
                "printed once: {err}"
            );
            assert_eq!(err.lines().count(), 1, "one line: {err}");
        }
    }
    let err = fails(&["run", "--namespace"]);
    assert!(err.contains("--namespace needs a value"), "{err}");
    let err = fails(&["run", "--namespace", "--sa-dir", "/x"]);
    assert!(err.contains("--namespace needs a value"), "{err}");
}

#[test]
fn repeated_flags_are_refused() {
    for args in [
        vec!["run", "--namespace", "n", "--namespace", "m"],
        vec!["run", "--namespace=n", "--namespace", "m"],
        vec!["install", "--namespace", "n", "--namespace=n"],
    ] {
        let err = fails(&args);
        assert!(err.contains("--namespace given twice"), "{args:?}: {err}");
    }
}

#[test]
fn boolean_flags_accept_true_false_1_0_and_refuse_the_rest() {
    for v in ["yes", "on", "", "truee"] {
        let err = fails(&[
            "run",
            "--api-server",
            "https://h:1",
            "--listen",
            "0.0.0.0:0",
            "--allow-non-loopback-listen",
            v,
        ]);
        assert!(
            err.contains("--allow-non-loopback-listen")
                && err.contains(&format!("{v:?}"))
                && err.contains("true, false, 1 or 0"),
            "{v:?}: {err}"
        );
        let err = fails(&["install", "--pod-cidrs-from-node", v]);
        assert!(
            err.contains("--pod-cidrs-from-node") && err.contains("true, false, 1 or 0"),
            "{v:?}: {err}"
        );
    }
    let cfg = |v: &str| {
        let args: Vec<String> = [
            "--api-server",
            "https://h:1",
            "--listen",
            "0.0.0.0:9412",
            "--allow-non-loopback-listen",
            v,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        tern_agent::RunConfig::from_args(&args, &|_| None)
    };
    for v in ["true", "TRUE", "True", "1"] {
        assert!(cfg(v).is_ok(), "{v}: {:?}", cfg(v).err());
    }
    for v in ["false", "FALSE", "0"] {
        let e = cfg(v).unwrap_err().to_string();
        assert!(e.contains("not loopback"), "{v}: {e}");
    }
}

/// An image directory like `target/release`: the plugins beside everything else.
fn image(f: &Fixture) -> (PathBuf, PathBuf, PathBuf) {
    let src = f.dir.path().join("image/bin");
    std::fs::create_dir_all(src.join("build")).unwrap();
    for name in [
        "tern",
        "tern-tuning",
        "tern-ipam",
        "tern-lookup",
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
        ["tern", "tern-ipam", "tern-lookup", "tern-tuning"]
    );
    for b in names(&bin) {
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
    assert_eq!(names(&bin), ["tern", "tern-lookup", "tern-tuning"]);
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

//! The `tern-agent` command line as an operator meets it: `--help` per subcommand, unknown,
//! repeated and malformed flags, one message per error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

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
    // uninstall takes the API server flags (for --if-daemonset-deleted) but none of the CNI
    // token's: it mints nothing.
    let out = agent(&["uninstall", "--help"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let uninstall = text(&out.stdout);
    for needle in [
        "--api-server",
        "--sa-dir",
        "--if-daemonset-deleted",
        "--state-dir",
    ] {
        assert!(
            uninstall.contains(needle),
            "uninstall --help lacks {needle:?}:\n{uninstall}"
        );
    }
    for absent in ["--service-account", "--token-lifetime"] {
        assert!(
            !uninstall.contains(absent),
            "uninstall --help shows {absent:?}:\n{uninstall}"
        );
    }
    let err = fails(&["uninstall", "--token-lifetime", "1h"]);
    assert!(err.contains("unknown flag --token-lifetime"), "{err}");
    // The top-level usage lists the subcommands and points to their --help.
    let out = agent(&[]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let usage = text(&out.stderr);
    for needle in ["tern-agent run --help", "tern-agent install --help"] {
        assert!(usage.contains(needle), "{usage}");
    }
    for args in [&["nope"][..], &["--bogus"], &["--bogus", "run"]] {
        let out = agent(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(text(&out.stderr).contains("tern-agent"), "{out:?}");
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

#[test]
fn trace_exits_2_when_it_cannot_answer() {
    let two = |args: &[&str]| {
        let out = agent(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
        text(&out.stderr)
    };
    let help = agent(&["trace", "--help"]).output().unwrap();
    assert_eq!(help.status.code(), Some(0));
    assert!(text(&help.stdout).contains("--kubeconfig"));
    // A bad flag is 2, not 1 (1 is "denied").
    let err = two(&["trace", "--from", "a", "--to", "b/c", "--port", "80"]);
    assert!(
        err.contains("--from takes NAMESPACE/NAME or an address"),
        "{err}"
    );
    // No in-cluster environment.
    let err = two(&["trace", "--from", "a/b", "--to", "b/c", "--port", "80"]);
    assert!(err.contains("KUBERNETES_SERVICE_HOST"), "{err}");
    // The stand-in API server through --kubeconfig: it serves no Pod list, and that is said.
    let s = tern_apiserver::ApiServer::start().unwrap();
    s.add_service_account(NS, "tern-agent");
    let dir = tempfile::tempdir().unwrap();
    s.write_ca(&dir.path().join("ca.crt")).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let token = s.issue_token(NS, "tern-agent", 3600);
    std::fs::write(
        &kubeconfig,
        format!(
            "clusters: [{{name: c, cluster: {{server: '{}', certificate-authority: ca.crt}}}}]
users: [{{name: u, user: {{token: '{token}'}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
",
            s.url()
        ),
    )
    .unwrap();
    let path = kubeconfig.to_str().unwrap();
    let err = two(&[
        "trace",
        "--from=a/b",
        "--to=b/c",
        "--port=80",
        "--kubeconfig",
        path,
    ]);
    assert!(
        err.starts_with("tern-agent: list /api/v1/pods: not found (404)"),
        "{err}"
    );
    assert_eq!(s.count("/api/v1/pods"), 1);
}

//! The invocation environment: verbs, container IDs, interface and network names, `CNI_ARGS`.

use tern_cni::env::{validate_network_name, CniArgs, ContainerId, IfName, Verb};

#[test]
fn container_id_rules() {
    assert_eq!(ContainerId::parse("").unwrap_err().code, 3);
    for bad in ["1234%%%", "a/b", "-abc", ".x", "a b"] {
        let e = ContainerId::parse(bad).unwrap_err();
        assert_eq!(
            (e.code, e.msg.as_str()),
            (4, "invalid characters in containerID")
        );
        assert_eq!(e.details, bad);
    }
    for good in ["a51debf7e1eb", "A_b.c-d", "0"] {
        assert_eq!(ContainerId::parse(good).unwrap().as_str(), good);
    }
}

#[test]
fn ifname_rules() {
    let cases = [
        ("", "interface name is empty"),
        ("testnamemorethan16", "interface name is too long"),
        ("sixteen-bytes-xx", "interface name is too long"),
        (".", "interface name is . or .."),
        ("..", "interface name is . or .."),
        (
            "/testname",
            "interface name contains / or : or whitespace characters",
        ),
        (
            "a:b",
            "interface name contains / or : or whitespace characters",
        ),
        (
            "test name",
            "interface name contains / or : or whitespace characters",
        ),
        (
            "tab\tx",
            "interface name contains / or : or whitespace characters",
        ),
    ];
    for (name, msg) in cases {
        let e = IfName::parse(name).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (4, msg), "{name:?}");
    }
    for good in ["testname", "eth0", "eth0.100", "fifteen-bytes-x"] {
        assert!(IfName::parse(good).is_ok(), "{good}");
    }
}

#[test]
fn network_name_rules() {
    assert_eq!(
        validate_network_name("").unwrap_err().msg,
        "missing network name"
    );
    let e = validate_network_name("my net").unwrap_err();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (7, "invalid characters found in network name")
    );
    assert!(validate_network_name("tern-net_1.0").is_ok());
}

#[test]
fn cni_args_parse_and_unknown_keys() {
    let a = CniArgs::parse("IgnoreUnknown=1;K8S_POD_NAME=web;IP=10.0.0.5").unwrap();
    assert_eq!(a.get("K8S_POD_NAME"), Some("web"));
    assert_eq!(a.get("ip"), None, "keys are case-sensitive");
    assert!(
        a.check_known(&[]).is_ok(),
        "IgnoreUnknown lets anything through"
    );
    let b = CniArgs::parse("FOO=bar;IP=1.2.3.4").unwrap();
    let e = b.check_known(&["IP"]).unwrap_err();
    assert_eq!(
        (e.code, e.msg.as_str()),
        (4, r#"ARGS: unknown args ["FOO=bar"]"#)
    );
    for bad in [
        "novalue",
        "a=b=c",
        "=v",
        "K8S_POD_NAME=a;K8S_POD_NAME=b",
        "IP=10.0.0.5;IP=10.0.0.6",
        "IgnoreUnknown=maybe",
        "IgnoreUnknown=",
        "IgnoreUnknown=1;IgnoreUnknown=1",
    ] {
        assert_eq!(CniArgs::parse(bad).unwrap_err().code, 4, "{bad}");
    }
    for good in ["IgnoreUnknown=TRUE", "IgnoreUnknown=0;A=", "A=1;;B=2", ";"] {
        assert!(CniArgs::parse(good).is_ok(), "{good}");
    }
    assert!(CniArgs::parse("").unwrap().pairs().is_empty());
}

#[test]
fn commands() {
    assert_eq!(Verb::parse("GC").unwrap(), Verb::Gc);
    let e = Verb::parse("FROB").unwrap_err();
    assert_eq!((e.code, e.msg.as_str()), (4, "unknown CNI_COMMAND: FROB"));
    assert!(Verb::Del.required_vars().iter().all(|v| *v != "CNI_NETNS"));
}

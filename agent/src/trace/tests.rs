use serde_json::json;

use super::*;

/// The lists of a small cluster: web/api (selected by a deny-all and by an allow from the
/// client namespace on its named port http), client/cli, and two policies that cannot be read
/// whole (one fails closed, one isolates nothing).
fn listed() -> Listed {
    let pod = |ns: &str, name: &str, ip: &str| {
        json!({"metadata": {"namespace": ns, "name": name, "labels": {"app": name}},
            "spec": {"nodeName": "n1", "containers": [{"ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip}})
    };
    let ns = |name: &str| json!({"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}});
    let pol = |ns: &str, name: &str, spec: Value| json!({"metadata": {"namespace": ns, "name": name}, "spec": spec});
    Listed::read(
        &[
            pod("web", "api", "10.0.1.5"),
            pod("client", "cli", "10.0.2.7"),
            pod("client", "batch", "10.0.2.8"),
        ],
        &[ns("web"), ns("client")],
        &[
            pol("web", "deny-all", json!({"podSelector": {}})),
            pol(
                "web",
                "allow-cli",
                json!({"podSelector": {"matchLabels": {"app": "api"}},
                "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "client"}}}],
                             "ports": [{"port": "http"}]}]}),
            ),
            pol(
                "client",
                "broken",
                json!({"podSelector": {"matchLabels": {"app": "batch"}}, "policyTypes": ["Egress"],
                "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/40"}}]}]}),
            ),
            pol("web", "garbage", json!({"podSelector": "api"})),
        ],
    )
}

fn answer(args: &[&str]) -> (bool, String) {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    let a: TraceArgs = crate::args::parse_subcommand("trace", &args).unwrap();
    let l = listed();
    let q = query(&a);
    let t = l.trace(&q).unwrap();
    (t.allowed(), render(&l, &q, &t))
}

#[test]
fn the_answer_is_a_verdict_then_one_reason_per_line() {
    let (ok, text) = answer(&["--from", "client/cli", "--to", "web/api", "--port", "8080"]);
    assert!(ok);
    assert_eq!(
        text,
        "allowed: client/cli -> web/api port 8080/TCP
  egress of client/cli (10.0.2.7): allowed, no NetworkPolicy isolates it for egress
  ingress of web/api (10.0.1.5): allowed by web/allow-cli ingress[0] from[0] ports[0]; isolated by web/deny-all, web/allow-cli
  note: NetworkPolicy web/garbage cannot be read and isolates nothing: spec.podSelector cannot be read: invalid type: string \"api\", expected struct LabelSelector (invalid type: string \"api\", expected struct LabelSelector)
"
    );
    let (ok, text) = answer(&[
        "--from",
        "10.9.9.9",
        "--to",
        "web/api",
        "--port",
        "8080",
        "--protocol",
        "udp",
    ]);
    assert!(!ok);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "denied: 10.9.9.9 -> web/api port 8080/UDP");
    assert_eq!(
        lines[1],
        "  egress of 10.9.9.9: no pod has this address, no policy judges its egress"
    );
    assert_eq!(
        lines[2],
        "  ingress of web/api (10.0.1.5): denied, isolated by web/deny-all, web/allow-cli and no ingress rule of theirs allows 10.9.9.9 port 8080/UDP"
    );
    assert_eq!(
        lines[3],
        "  note: traffic from web/api's own node is never judged"
    );
    let (ok, text) = answer(&["--from", "client/batch", "--to=web/api", "--port=8080"]);
    assert!(!ok);
    assert!(text.contains("  egress of client/batch (10.0.2.8): denied, isolated by client/broken (cannot be read whole, allows nothing: ipBlock \"10.0.0.0/40\""), "{text}");
    let (ok, text) = answer(&[
        "--from",
        "10.0.1.5",
        "--to",
        "web/api",
        "--port",
        "1",
        "--protocol",
        "SCTP",
    ]);
    assert!(ok);
    assert!(
        text.starts_with(
            "allowed: web/api -> web/api port 1/SCTP\n  a pod's traffic to its own address"
        ),
        "{text}"
    );
}

#[test]
fn flags_are_checked_before_the_api_is_asked() {
    let parse = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        crate::args::parse_subcommand::<TraceArgs>("trace", &args).map_err(|e| e.to_string())
    };
    let a = parse(&[
        "--from",
        "fd00::1",
        "--to",
        "a/b",
        "--port",
        "53",
        "--protocol",
        "Udp",
    ])
    .unwrap();
    assert_eq!(a.from, Source::Ip("fd00::1".parse().unwrap()));
    assert_eq!(
        (a.port, a.protocol, a.kubeconfig),
        (53, Protocol::Udp, None)
    );
    for (args, want) in [
        (
            &["--from", "a", "--to", "a/b", "--port", "1"][..],
            "--from takes NAMESPACE/NAME or an address, not \"a\"",
        ),
        (
            &["--from", "a/b", "--to", "10.0.0.1", "--port", "1"],
            "--to takes a pod as NAMESPACE/NAME",
        ),
        (
            &["--from", "a/b", "--to", "a/b", "--port", "0"],
            "--port 0 is not in 1..=65535",
        ),
        (
            &[
                "--from",
                "a/b",
                "--to",
                "a/b",
                "--port",
                "1",
                "--protocol",
                "icmp",
            ],
            "--protocol takes TCP, UDP or SCTP",
        ),
        (&["--from", "a/b", "--to", "a/b"], "--port"),
    ] {
        let e = parse(args).unwrap_err();
        assert!(e.contains(want), "{args:?}: {e}");
    }
}

#[test]
fn cluster_network_policies_are_traced_where_listed() {
    let mut l = listed();
    let admin = json!({"metadata": {"name": "block-client"}, "spec": {"tier": "Admin", "priority": 3,
        "subject": {"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "web"}}},
        "ingress": [{"name": "no-client", "action": "Deny",
            "from": [{"namespaces": {"matchLabels": {"kubernetes.io/metadata.name": "client"}}}]}]}});
    let broken = json!({"metadata": {"name": "broken"}, "spec": {"tier": "Admin", "priority": 1,
        "subject": "everyone"}});
    l.read_cluster(&[admin, broken], &[]);
    let q = Query {
        from: Source::Pod {
            namespace: "client".into(),
            name: "cli".into(),
        },
        to_namespace: "web".into(),
        to_name: "api".into(),
        protocol: Protocol::Tcp,
        port: 8080,
    };
    let t = l.trace(&q).unwrap();
    assert!(!t.allowed());
    let text = render(&l, &q, &t);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "denied: client/cli -> web/api port 8080/TCP");
    assert_eq!(
        lines[2],
        "  ingress of web/api (10.0.1.5): denied by ClusterNetworkPolicy block-client (Admin tier, priority 3) ingress[0] (no-client) Deny"
    );
    assert!(
        lines.last().unwrap().starts_with(
            "  note: ClusterNetworkPolicy broken cannot be read and applies to no pod: "
        ),
        "{text}"
    );
    // Without them (not served), the NetworkPolicy allowing client decides.
    assert!(listed().trace(&q).unwrap().allowed());
}

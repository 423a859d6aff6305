//! Truth tables, cyclonus-style: for each classic policy set, every source (each pod, the
//! address of one pod given as an address, and two addresses of no pod) to every pod on TCP 80,
//! TCP 81, UDP 53 and SCTP 80. Each verdict of the trace must agree with the compiled plans'
//! and with the table written here by hand.

use super::*;

const PORTS: [(Protocol, u16); 4] = [
    (Protocol::Tcp, 80),
    (Protocol::Tcp, 81),
    (Protocol::Udp, 53),
    (Protocol::Sctp, 80),
];

/// One end as the hand-written tables see it (`ns` and `app` empty: no pod's address).
#[derive(Clone, Debug)]
struct End {
    ns: String,
    app: String,
    ip: IpAddr,
}

impl End {
    fn is(&self, key: &str) -> bool {
        format!("{}/{}", self.ns, self.app) == key
    }
}

fn end(p: &Pod) -> End {
    End {
        ns: p.namespace.to_string(),
        app: p.name.clone(),
        ip: p.ips[0],
    }
}

/// `web`'s number on a pod.
fn web(app: &str) -> u16 {
    if app == "b" {
        81
    } else {
        80
    }
}

fn in_net(ip: IpAddr, net: &str) -> bool {
    net.parse::<ipnetwork::IpNetwork>().unwrap().contains(ip)
}

type Expect = fn(&End, &End, Protocol, u16) -> bool;

struct Case {
    name: &'static str,
    policies: Vec<Policy>,
    cluster: Vec<ClusterPolicy>,
    closed: BTreeMap<String, String>,
    /// The verdict, a pod's own traffic aside (always allowed).
    expect: Expect,
}

fn case(name: &'static str, policies: Vec<Policy>, expect: Expect) -> Case {
    Case {
        name,
        policies,
        cluster: Vec::new(),
        closed: BTreeMap::new(),
        expect,
    }
}

/// Every source: each pod with an address, y/b's address, and two addresses of no pod (one
/// inside 10.0.0.0/16, one outside).
fn sources(pods: &[Pod]) -> Vec<(Source, End)> {
    let mut out: Vec<(Source, End)> = pods
        .iter()
        .filter(|p| !p.ips.is_empty())
        .map(|p| (from_pod(&format!("{}/{}", p.namespace, p.name)), end(p)))
        .collect();
    let yb = pods
        .iter()
        .find(|p| p.namespace == "y" && p.name == "b")
        .unwrap();
    out.push((Source::Ip(yb.ips[0]), end(yb)));
    for outside in ["10.0.9.9", "192.168.0.9"] {
        let e = End {
            ns: String::new(),
            app: String::new(),
            ip: ip(outside),
        };
        out.push((Source::Ip(e.ip), e));
    }
    out
}

/// Checks every pair of `c`; returns how many.
fn check(c: &Case) -> usize {
    let (pods, nss) = cluster();
    let w = world_with(&pods, &nss, &c.policies, &c.cluster);
    let plans = plans_with(&pods, &nss, &c.policies, &c.cluster);
    let (mut n, mut wrong) = (0, Vec::new());
    for (from, src) in sources(&pods) {
        for dst in pods.iter().filter(|p| !p.ips.is_empty()) {
            for (proto, port) in PORTS {
                let q = query(
                    from.clone(),
                    &format!("{}/{}", dst.namespace, dst.name),
                    proto,
                    port,
                );
                let t = trace(&w, &c.closed, &q).unwrap();
                let plan = plan_allows(&plans, &dst.ips, src.ip, dst.ips[0], proto, port);
                let own = dst.ips.contains(&src.ip);
                let hand = own || (c.expect)(&src, &end(dst), proto, port);
                if t.allowed() != plan || plan != hand {
                    wrong.push(format!(
                        "{from:?} -> {}/{} {proto:?} {port}: trace {}, plan {plan}, table {hand}\n  {t:?}",
                        dst.namespace,
                        dst.name,
                        t.allowed()
                    ));
                }
                n += 1;
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{}: {} of {n} disagree:\n{}",
        c.name,
        wrong.len(),
        wrong.join("\n")
    );
    n
}

fn ingress_cases() -> Vec<Case> {
    let p = policy;
    vec![
        case("no policy", vec![], |_, _, _, _| true),
        case(
            "default-deny ingress in x",
            vec![p("x", "deny", json!({"podSelector": {}}))],
            |_, d, _, _| d.ns != "x",
        ),
        case(
            "allow from the same namespace in x",
            vec![p(
                "x",
                "same",
                json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}),
            )],
            |s, d, _, _| d.ns != "x" || s.ns == "x",
        ),
        case(
            "x/a: from namespaces labelled env=prod",
            vec![p(
                "x",
                "prod",
                json!({"podSelector": {"matchLabels": {"app": "a"}},
                "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"env": "prod"}}}]}]}),
            )],
            |s, d, _, _| !d.is("x/a") || s.ns == "x" || s.ns == "y",
        ),
        case(
            "x/a: port 80 only (TCP by default), from anywhere",
            vec![p(
                "x",
                "web",
                json!({"podSelector": {"matchLabels": {"app": "a"}},
                "ingress": [{"ports": [{"port": 80}]}]}),
            )],
            |_, d, proto, port| !d.is("x/a") || (proto == Protocol::Tcp && port == 80),
        ),
        case(
            "policies add up: x/a port 80 from anywhere, every port from y",
            vec![
                p(
                    "x",
                    "web",
                    json!({"podSelector": {"matchLabels": {"app": "a"}}, "ingress": [{"ports": [{"port": 80}]}]}),
                ),
                p(
                    "x",
                    "from-y",
                    json!({"podSelector": {"matchLabels": {"app": "a"}},
                    "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "y"}}}]}]}),
                ),
            ],
            |s, d, proto, port| {
                !d.is("x/a") || (proto == Protocol::Tcp && port == 80) || s.ns == "y"
            },
        ),
    ]
}

fn peer_and_port_cases() -> Vec<Case> {
    let p = policy;
    vec![
        case(
            "y/b: ipBlock 10.0.0.0/16 except 10.0.1.0/24",
            vec![p(
                "y",
                "block",
                json!({"podSelector": {"matchLabels": {"app": "b"}},
                "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.1.0/24"]}}]}]}),
            )],
            |s, d, _, _| {
                !d.is("y/b") || (in_net(s.ip, "10.0.0.0/16") && !in_net(s.ip, "10.0.1.0/24"))
            },
        ),
        case(
            "x/b: namespaceSelector AND podSelector in one peer",
            vec![p(
                "x",
                "and",
                json!({"podSelector": {"matchLabels": {"app": "b"}},
                "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"env": "prod"}},
                                       "podSelector": {"matchLabels": {"app": "a"}}}]}]}),
            )],
            |s, d, _, _| !d.is("x/b") || ((s.ns == "x" || s.ns == "y") && s.app == "a"),
        ),
        case(
            "x/b: namespaceSelector OR podSelector, two peers",
            vec![p(
                "x",
                "or",
                json!({"podSelector": {"matchLabels": {"app": "b"}},
                "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"env": "dev"}}},
                                      {"podSelector": {"matchLabels": {"app": "a"}}}]}]}),
            )],
            |s, d, _, _| !d.is("x/b") || s.ns == "z" || s.is("x/a"),
        ),
        case(
            "x/c: from a namespace the World does not list, by its name label",
            vec![p(
                "x",
                "w",
                json!({"podSelector": {"matchLabels": {"app": "c"}},
                "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "w"}}},
                                      {"namespaceSelector": {"matchLabels": {"env": "prod"}}, "podSelector": {"matchLabels": {"app": "c"}}}]}]}),
            )],
            |s, d, _, _| !d.is("x/c") || s.ns == "w" || (s.app == "c" && s.ns != "z"),
        ),
        case(
            "x: the named port web (80, b's 81) from anywhere",
            vec![p(
                "x",
                "named",
                json!({"podSelector": {}, "ingress": [{"ports": [{"port": "web"}]}]}),
            )],
            |_, d, proto, port| d.ns != "x" || (proto == Protocol::Tcp && port == web(&d.app)),
        ),
        case(
            "z/a: TCP 80-81 (endPort) and every SCTP port",
            vec![p(
                "z",
                "range",
                json!({"podSelector": {"matchLabels": {"app": "a"}},
                "ingress": [{"ports": [{"port": 80, "endPort": 81}, {"protocol": "SCTP"}]}]}),
            )],
            |_, d, proto, _| !d.is("z/a") || proto != Protocol::Udp,
        ),
        case(
            "x/a: matchExpressions, pods of any namespace whose app is not a or b",
            vec![p(
                "x",
                "expr",
                json!({"podSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                "ingress": [{"from": [{"namespaceSelector": {}, "podSelector": {"matchExpressions": [
                    {"key": "app", "operator": "NotIn", "values": ["a", "b"]}]}}]}]}),
            )],
            |s, d, _, _| d.ns != "x" || s.app == "c",
        ),
        case(
            "peers that match nothing allow nothing",
            vec![p(
                "y",
                "nobody",
                json!({"podSelector": {"matchLabels": {"app": "c"}},
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "host"}}}]}]}),
            )],
            |_, d, _, _| !d.is("y/c"),
        ),
    ]
}

fn egress_cases() -> Vec<Case> {
    let p = policy;
    let (mut closed, broken) = {
        use crate::model::{read_policy, PolicyRead};
        let v = json!({"metadata": {"namespace": "z", "name": "broken"},
            "spec": {"podSelector": {"matchLabels": {"app": "c"}}, "policyTypes": ["Ingress", "Egress"],
                "egress": [{"ports": [{"port": true}]}]}});
        let PolicyRead::Closed { policy, error } = read_policy(&v) else {
            panic!("not closed");
        };
        (
            case(
                "a fail-closed stand-in on z/c",
                vec![(*policy).clone()],
                |s, d, _, _| !s.is("z/c") && !d.is("z/c"),
            ),
            error,
        )
    };
    closed.closed.insert("z/broken".into(), broken);
    vec![
        case(
            "x: egress deny-all, then DNS to z/c on UDP 53",
            vec![
                p(
                    "x",
                    "deny-egress",
                    json!({"podSelector": {}, "policyTypes": ["Egress"]}),
                ),
                p(
                    "x",
                    "dns",
                    json!({"podSelector": {}, "policyTypes": ["Egress"],
                    "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "z"}},
                                        "podSelector": {"matchLabels": {"app": "c"}}}],
                                "ports": [{"protocol": "UDP", "port": 53}]}]}),
                ),
            ],
            |s, d, proto, port| {
                s.ns != "x" || (d.is("z/c") && proto == Protocol::Udp && port == 53)
            },
        ),
        case(
            "y: egress to any pod on its named port web",
            vec![p(
                "y",
                "named",
                json!({"podSelector": {}, "policyTypes": ["Egress"],
                "egress": [{"to": [{"namespaceSelector": {}}], "ports": [{"port": "web"}]}]}),
            )],
            |s, d, proto, port| s.ns != "y" || (proto == Protocol::Tcp && port == web(&d.app)),
        ),
        case(
            "y/a: policyTypes Egress only, its ingress rules are not in force",
            vec![p(
                "y",
                "egress-only",
                json!({"podSelector": {"matchLabels": {"app": "a"}},
                "policyTypes": ["Egress"], "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "host"}}}]}],
                "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.0.2.0/24"]}}]}]}),
            )],
            |s, d, _, _| !s.is("y/a") || d.ns != "y",
        ),
        case(
            "egress in force by default when spec.egress has rules",
            vec![p(
                "z",
                "default-types",
                json!({"podSelector": {"matchLabels": {"app": "b"}},
                "ingress": [{}], "egress": [{"ports": [{"protocol": "UDP", "port": 53}]}]}),
            )],
            |s, _, proto, port| !s.is("z/b") || (proto == Protocol::Udp && port == 53),
        ),
        case(
            "z/a: egress on the named port dns to an ipBlock",
            vec![p(
                "z",
                "dns-block",
                json!({"podSelector": {"matchLabels": {"app": "a"}}, "policyTypes": ["Egress"],
                "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.0.1.0/24"]}}],
                            "ports": [{"protocol": "UDP", "port": "dns"}]}]}),
            )],
            |s, d, proto, port| {
                !s.is("z/a")
                    || (proto == Protocol::Udp && port == 53 && !in_net(d.ip, "10.0.1.0/24"))
            },
        ),
        closed,
    ]
}

#[test]
fn trace_agrees_with_the_compiled_plans_and_the_tables() {
    let mut cases = ingress_cases();
    cases.extend(peer_and_port_cases());
    cases.extend(egress_cases());
    let per_case: Vec<usize> = cases.iter().map(check).collect();
    // 13 sources × 10 destinations × 4 ports in each case.
    assert!(per_case.iter().all(|&n| n == 13 * 10 * 4), "{per_case:?}");
    assert_eq!(cases.len(), 20);
}

mod cluster;

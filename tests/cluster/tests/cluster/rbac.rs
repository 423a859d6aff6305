//! `rbac`: what tern's service accounts may and may not do, as the real authorizer answers
//! (`kubectl auth can-i --as system:serviceaccount:tern:...`).

use tern_cluster::{fail, Node, Res};

/// `kubectl auth can-i VERB RESOURCE[/NAME] --as tern:AS [-n NS] [--subresource SUB]`: its
/// answer (`yes`/`no`; kubectl exits 1 on `no`, so the answer is read, not the status).
fn can_i(
    node: &Node,
    r#as: &str,
    verb: &str,
    res: &str,
    ns: &str,
    name: &str,
    sub: &str,
) -> String {
    let res = if name.is_empty() {
        res.to_owned()
    } else {
        format!("{res}/{name}")
    };
    let who = format!("system:serviceaccount:tern:{as}");
    let mut args = vec!["auth", "can-i", verb, &res, "--as", &who];
    if !ns.is_empty() {
        args.extend(["-n", ns]);
    }
    if !sub.is_empty() {
        args.extend(["--subresource", sub]);
    }
    let mut cmd = node.kubectl_cmd(&args);
    // Not Node::run: `no` is exit status 1 with the answer on stdout.
    node.note(&format!("$ {cmd:?}"));
    cmd.output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

pub fn rbac(node: &Node) -> Res {
    let n = node.name.as_str();
    #[rustfmt::skip]
    let table: &[(&str, &str, &str, &str, &str, &str, &str)] = &[
        // what tern does
        ("yes", "tern-agent", "create", "serviceaccounts", "tern", "tern-cni", "token"),
        ("yes", "tern-agent", "get", "nodes", "", n, ""),
        ("yes", "tern-cni", "get", "pods", "default", "", ""),
        ("yes", "tern-cni", "get", "nodes", "", n, ""),
        ("yes", "tern-agent", "watch", "pods", "", "", ""),
        ("yes", "tern-agent", "list", "namespaces", "", "", ""),
        ("yes", "tern-agent", "watch", "networkpolicies.networking.k8s.io", "", "", ""),
        // what it must not do
        ("no", "tern-agent", "create", "serviceaccounts", "tern", "tern-agent", "token"),
        ("no", "tern-agent", "create", "serviceaccounts", "kube-system", "default", "token"),
        ("no", "tern-agent", "get", "secrets", "tern", "", ""),
        ("no", "tern-agent", "list", "secrets", "", "", ""),
        ("no", "tern-agent", "update", "nodes", "", n, ""),
        ("no", "tern-agent", "patch", "nodes", "", n, ""),
        ("no", "tern-agent", "delete", "pods", "default", "", ""),
        ("no", "tern-agent", "create", "networkpolicies.networking.k8s.io", "default", "", ""),
        // A Warning Event on a NetworkPolicy it cannot read whole; never one changed.
        ("yes", "tern-agent", "create", "events", "default", "", ""),
        ("no", "tern-agent", "patch", "events", "default", "", ""),
        ("no", "tern-agent", "get", "pods", "default", "", ""),
        ("no", "tern-cni", "create", "serviceaccounts", "tern", "tern-cni", "token"),
        ("no", "tern-cni", "get", "secrets", "tern", "", ""),
        ("no", "tern-cni", "update", "pods", "default", "", ""),
        ("no", "tern-cni", "create", "pods", "default", "", ""),
        ("no", "tern-cni", "list", "pods", "", "", ""),
        ("no", "tern-cni", "list", "nodes", "", "", ""),
        ("no", "tern-cni", "patch", "nodes", "", n, ""),
    ];
    for &(want, r#as, verb, res, ns, name, sub) in table {
        let got = can_i(node, r#as, verb, res, ns, name, sub);
        let what = format!("can-i {as} {verb} {res} ns={ns:?} name={name:?} sub={sub:?}");
        node.note(&format!("{what} = {got}"));
        if got != want {
            return fail(format!("{what} = {got:?}, want {want}"));
        }
    }
    Ok(())
}

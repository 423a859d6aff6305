//! `cross_node_nodeports` (two nodes): a pod on each node reaches the other node's NodePort, TCP
//! and UDP, IPv4 and (dual stack) IPv6, to a backend on either node: what was broken with vxlan
//! (the tier's bridge shared node 1's netns, so br_netfilter ran node 1's conntrack and NAT on
//! its own packets a second time; DESIGN, "The two-node tier"). Each Service selects one server
//! pod, so every path is tried, not the one kube-proxy happens to pick.

use tern_cluster::{fail, Node, Res};

use super::{agnhost_pod, captured, cleaning, exec_within, url_host};

/// Tries per path, a second apart: kube-proxy programs a new Service a moment after its
/// endpoints are ready.
const TRIES: u32 = 10;

/// The check; its pods and Services removed however it ends.
pub fn cross_node_nodeports(node: &Node) -> Res {
    cleaning(
        node,
        || every_path(node),
        &[
            "delete pod np-srv1 np-srv2 np-cl1 np-cl2 --ignore-not-found --wait=false",
            "delete service np-srv1 np-srv2 --ignore-not-found",
        ],
    )
}

/// Server `np-srvN`, client `np-clN` and NodePort Service `np-srvN` on node N, for both nodes.
fn manifests(node: &Node) -> String {
    let policy = if node.var("SERVICE_CIDR6").is_empty() {
        "SingleStack"
    } else {
        "PreferDualStack"
    };
    let mut docs = Vec::new();
    for (n, on) in [(1, node.name.as_str()), (2, node.var("NODE2"))] {
        let srv = format!("np-srv{n}");
        let args = "args: [netexec, --http-port=8080, --udp-port=8081]";
        docs.push(agnhost_pod(&srv, &format!("app: {srv}"), Some(on), args));
        let cl = format!("np-cl{n}");
        docs.push(agnhost_pod(&cl, "", Some(on), "command: [/agnhost, pause]"));
        docs.push(format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {srv}, namespace: default}}\n\
             spec:\n  type: NodePort\n  ipFamilyPolicy: {policy}\n  selector: {{app: {srv}}}\n  ports:\n  \
             - {{name: tcp, protocol: TCP, port: 8080, targetPort: 8080}}\n  \
             - {{name: udp, protocol: UDP, port: 8081, targetPort: 8081}}\n"
        ));
    }
    docs.join("---\n")
}

/// Every client to every server's NodePort at each address of the other node: all answered by
/// that server.
fn every_path(node: &Node) -> Res {
    node.kubectl_in(&["apply", "-f", "-"], &manifests(node))?;
    node.wait_ready(&["np-srv1", "np-srv2", "np-cl1", "np-cl2"], 120)?;
    let addrs = |ip: &str, ip6: &str| {
        let mut a = vec![node.var(ip).to_owned()];
        a.extend(Some(node.var(ip6).to_owned()).filter(|v| !v.is_empty()));
        a
    };
    // client on node N, the other node's addresses
    let other = [
        ("np-cl1", addrs("NODE2_IP", "NODE2_IP6")),
        ("np-cl2", addrs("NODE_IP", "NODE_IP6")),
    ];
    let mut fails = 0;
    for (cl, addrs) in &other {
        for srv in ["np-srv1", "np-srv2"] {
            for proto in ["tcp", "udp"] {
                let path = format!("jsonpath={{.spec.ports[?(@.name==\"{proto}\")].nodePort}}");
                let port = node.kubectl(&["get", "service", srv, "-o", &path])?;
                let port = port.trim();
                for addr in addrs {
                    let (got, tries) = answer(node, cl, addr, port, proto, srv);
                    let what = format!("{cl} -> {addr}:{port}/{proto} (backend {srv})");
                    if got == srv {
                        node.note(&format!("ok: {what} in {tries} tries"));
                    } else {
                        node.note(&format!("FAILED: {what}: got {got:?} after {tries} tries"));
                        fails += 1;
                    }
                }
            }
        }
    }
    if fails > 0 {
        return fail(format!("cross_node_nodeports: {fails} path(s) failed"));
    }
    Ok(())
}

/// What `addr:port/proto` answers client `cl` (the server's hostname, netexec's reply to
/// `/hostname` or UDP `hostname`), tried up to [`TRIES`] times until it is `want`; the last
/// answer (empty when none) and the tries it took.
fn answer(node: &Node, cl: &str, addr: &str, port: &str, proto: &str, want: &str) -> (String, u32) {
    let mut got = String::new();
    for tries in 1..=TRIES {
        let out = if proto == "tcp" {
            let url = format!("http://{}:{port}/hostname", url_host(addr));
            exec_within(node, cl, &["curl", "-sfg", "--max-time", "3", &url])
        } else {
            let probe = format!("echo hostname | nc -u -w 2 {addr} {port}");
            exec_within(node, cl, &["sh", "-c", &probe])
        };
        got = out.map(|o| captured(&o).to_owned()).unwrap_or_default();
        if got == want {
            return (got, tries);
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    (got, TRIES)
}

//! `self_through_service`: what a pod's connection to itself gets (the API leaves it open,
//! kubernetes/kubernetes#95879; docs/decisions/0003). With a deny-all ingress policy on pod
//! self-svc: its own address still answers (the connection never leaves its netns), its
//! ClusterIP Service, whose one endpoint it is, does not (kube-proxy's DNAT sends it through the
//! node's forward hook, judged like any peer); a policy allowing from its own label opens the
//! Service again.

use tern_cluster::{fail, Node, Res};

use super::{agnhost_pod, captured, cleaning, exec_within, url_host};

/// Tries for an answer, a second apart (kube-proxy and the agent catching up).
const TRIES: u32 = 15;
/// Refusals in a row that make "refused".
const REFUSED_IN_A_ROW: u32 = 3;

const SERVICE: &str =
    "apiVersion: v1\nkind: Service\nmetadata: {name: self-svc, namespace: default}\n\
    spec:\n  selector: {app: self-svc}\n  ports: [{port: 8080, targetPort: 8080}]\n";
const DENY: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
    metadata: {name: self-deny, namespace: default}\n\
    spec: {podSelector: {matchLabels: {app: self-svc}}, policyTypes: [Ingress]}\n";
const ALLOW_OWN_LABEL: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
    metadata: {name: self-allow, namespace: default}\n\
    spec: {podSelector: {matchLabels: {app: self-svc}}, ingress: [{from: [{podSelector: {matchLabels: {app: self-svc}}}]}]}\n";

/// The check; the pod, Service and policies removed however it ends.
pub fn self_through_service(node: &Node) -> Res {
    cleaning(
        node,
        || through_service(node),
        &[
            "delete pod self-svc --ignore-not-found --wait=false",
            "delete service self-svc --ignore-not-found",
            "delete networkpolicy self-deny self-allow --ignore-not-found",
        ],
    )
}

fn through_service(node: &Node) -> Res {
    let pod = agnhost_pod(
        "self-svc",
        "app: self-svc",
        None,
        "args: [netexec, --http-port=8080]",
    );
    node.kubectl_in(&["apply", "-f", "-"], &format!("{pod}---\n{SERVICE}"))?;
    node.wait_ready(&["self-svc"], 120)?;
    let own = node.pod_ip("self-svc")?.to_string();
    let svc = node.kubectl(&[
        "get",
        "service",
        "self-svc",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ])?;
    let svc = svc.trim();
    reach(node, &own, true)?;
    reach(node, svc, true)?;
    node.kubectl_in(&["apply", "-f", "-"], DENY)?;
    reach(node, svc, false)?;
    reach(node, &own, true)?;
    node.kubectl_in(&["apply", "-f", "-"], ALLOW_OWN_LABEL)?;
    reach(node, svc, true)
}

/// self-svc to `addr`:8080: answers (`want`: within [`TRIES`] tries a second apart), or is
/// refused [`REFUSED_IN_A_ROW`] tries in a row (not `want`).
fn reach(node: &Node, addr: &str, want: bool) -> Res {
    let url = format!("http://{}:8080/hostname", url_host(addr));
    let mut refused = 0;
    let mut got = String::new();
    for tries in 1..=TRIES {
        let out = exec_within(node, "self-svc", &["curl", "-sfg", "--max-time", "2", &url]);
        got = out.map(|o| captured(&o).to_owned()).unwrap_or_default();
        if want && got == "self-svc" {
            node.note(&format!("ok: self-svc -> {addr} answered (try {tries})"));
            return Ok(());
        }
        if !want {
            refused = if got.is_empty() { refused + 1 } else { 0 };
            if refused >= REFUSED_IN_A_ROW {
                node.note(&format!("ok: self-svc -> {addr} refused (try {tries})"));
                return Ok(());
            }
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    let wanted = if want { "yes" } else { "no" };
    fail(format!(
        "self-svc -> {addr}: wanted {wanted}, got {got:?} after {TRIES} tries"
    ))
}

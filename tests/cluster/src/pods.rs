//! What the cases ask of pods and the node: test pods (busybox, allowed to ping), their IPs, a
//! command in a pod, the node's readiness, the node audit of a pod address, the CNI token.
//!
//! Invariant: every helper either returns what it read or an `Err` saying what it expected.

use std::net::{IpAddr, Ipv4Addr};

use base64::Engine as _;
use ipnetwork::{IpNetwork, Ipv4Network};
use serde_json::Value;
use tern_testkit::node::NodeAudit;

use crate::{fail, Node, Res};

/// The Ready condition's `status` of the node (JSONPath).
const READY_STATUS: &str = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
/// The Ready condition's `message` of the node (JSONPath).
const READY_MESSAGE: &str = "jsonpath={.status.conditions[?(@.type==\"Ready\")].message}";

impl Node {
    /// A busybox pod NAME in `default` that sleeps (the pause image is busybox here), allowed to
    /// ping (NET_RAW), labelled `app: tern-test`.
    pub fn pod_manifest(&self, name: &str) -> String {
        let image = self.var("PAUSE_IMAGE");
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, labels: {{app: tern-test}}}}\n\
             spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: {image}\n    \
             imagePullPolicy: Never\n    securityContext: {{capabilities: {{add: [NET_RAW]}}}}\n"
        )
    }

    /// Applies [`Node::pod_manifest`] for each of `names`.
    ///
    /// # Errors
    /// kubectl's.
    pub fn create_pods(&self, names: &[&str]) -> Res {
        for n in names {
            self.kubectl_in(&["apply", "-f", "-"], &self.pod_manifest(n))?;
        }
        Ok(())
    }

    /// `kubectl wait --for=condition=Ready` for `pods` (names in `default`) up to `secs`.
    ///
    /// # Errors
    /// kubectl's (a timeout included).
    pub fn wait_ready(&self, pods: &[&str], secs: u32) -> Res {
        let names: Vec<String> = pods.iter().map(|p| format!("pod/{p}")).collect();
        let timeout = format!("--timeout={secs}s");
        let mut args = vec!["wait", "--for=condition=Ready"];
        args.extend(names.iter().map(String::as_str));
        args.push(&timeout);
        self.kubectl(&args).map(drop)
    }

    /// Deletes `pods` and waits until they are gone (60 s).
    ///
    /// # Errors
    /// kubectl's.
    pub fn delete_pods(&self, pods: &[&str]) -> Res {
        let mut args = vec!["delete", "pod"];
        args.extend_from_slice(pods);
        args.extend_from_slice(&["--wait=true", "--timeout=60s"]);
        self.kubectl(&args).map(drop)
    }

    /// The pod's `status.podIP`.
    ///
    /// # Errors
    /// kubectl's, or no IP / not an IP address.
    pub fn pod_ip(&self, pod: &str) -> Res<IpAddr> {
        let ip = self.kubectl(&["get", "pod", pod, "-o", "jsonpath={.status.podIP}"])?;
        ip.trim()
            .parse()
            .map_err(|_| format!("pod {pod} has no IP (podIP {ip:?})"))
    }

    /// Runs `cmd` in the pod's container `main` (kubectl exec through the kubelet): its stdout.
    ///
    /// # Errors
    /// kubectl's or the command's exit.
    pub fn in_pod(&self, pod: &str, cmd: &[&str]) -> Res<String> {
        let mut args = vec!["exec", pod, "-c", "main", "--"];
        args.extend_from_slice(cmd);
        self.kubectl(&args)
    }

    /// `ping -c 2 -W 2 TARGET` from the pod.
    ///
    /// # Errors
    /// As [`Node::in_pod`]: no answer is an error.
    pub fn ping_from(&self, pod: &str, target: &str) -> Res {
        self.in_pod(pod, &["ping", "-c", "2", "-W", "2", target])
            .map(drop)
    }

    /// The node's podCIDR (`spec.podCIDR`).
    ///
    /// # Errors
    /// kubectl's, or not an IPv4 CIDR.
    pub fn pod_cidr(&self) -> Res<Ipv4Network> {
        let c = self.kubectl(&["get", "node", &self.name, "-o", "jsonpath={.spec.podCIDR}"])?;
        c.trim()
            .parse()
            .map_err(|e| format!("node podCIDR {c:?}: {e}"))
    }

    /// The node's podCIDRs (`spec.podCIDRs`), in the Node's order (the primary family first).
    ///
    /// # Errors
    /// kubectl's, or an entry that is not a CIDR.
    pub fn pod_cidrs(&self) -> Res<Vec<IpNetwork>> {
        let c = self.kubectl(&[
            "get",
            "node",
            &self.name,
            "-o",
            "jsonpath={.spec.podCIDRs[*]}",
        ])?;
        c.split_whitespace()
            .map(|s| s.parse().map_err(|e| format!("node podCIDR {s:?}: {e}")))
            .collect()
    }

    /// The node's `InternalIP` addresses (`status.addresses`), in the Node's order.
    ///
    /// # Errors
    /// kubectl's, or an entry that is not an IP address.
    pub fn internal_ips(&self) -> Res<Vec<IpAddr>> {
        let a = self.kubectl(&[
            "get",
            "node",
            &self.name,
            "-o",
            "jsonpath={.status.addresses[?(@.type==\"InternalIP\")].address}",
        ])?;
        parse_ips(&a, "node InternalIP")
    }

    /// The pod's `status.podIPs`, in the pod's order (the primary family first).
    ///
    /// # Errors
    /// kubectl's, or an entry that is not an IP address.
    pub fn pod_ips(&self, pod: &str) -> Res<Vec<IpAddr>> {
        let ips = self.kubectl(&["get", "pod", pod, "-o", "jsonpath={.status.podIPs[*].ip}"])?;
        parse_ips(&ips, &format!("pod {pod} podIP"))
    }

    /// The node's Ready condition: (`status`, `message`).
    ///
    /// # Errors
    /// kubectl's.
    pub fn ready(&self) -> Res<(String, String)> {
        let s = self.kubectl(&["get", "node", &self.name, "-o", READY_STATUS])?;
        let m = self.kubectl(&["get", "node", &self.name, "-o", READY_MESSAGE])?;
        Ok((s.trim().to_owned(), m.trim().to_owned()))
    }

    /// The tern-agent pods bound to this node, one entry per pod: `field` (a JSONPath under the
    /// pod, e.g. `{.metadata.name}`) as kubectl prints it. Every lookup is by `spec.nodeName`:
    /// the agent tolerates every taint, so a case's fake Nodes get DaemonSet pods too, which no
    /// kubelet runs (`kubectl logs daemonset/...` may pick one and fail with NotFound).
    ///
    /// # Errors
    /// kubectl's.
    pub fn agent_pods(&self, field: &str) -> Res<Vec<String>> {
        self.agent_pods_on(&self.name, field)
    }

    /// The name of this node's (first) tern-agent pod.
    ///
    /// # Errors
    /// None on this node, or kubectl's.
    pub fn agent_pod(&self) -> Res<String> {
        match self.agent_pods("{.metadata.name}")?.into_iter().next() {
            Some(p) => Ok(p),
            None => fail(format!("no tern-agent pod on {}", self.name)),
        }
    }

    /// True when the node's Ready condition is `True`.
    pub fn node_ready(&self) -> bool {
        self.ready().is_ok_and(|(s, _)| s == "True")
    }

    /// The node audit: nothing of `ip` is left (no host route, lease or tern state).
    ///
    /// # Errors
    /// Everything left, one per line.
    pub fn nothing_left(&self, ip: IpAddr) -> Res {
        let left = NodeAudit::default().leftovers(ip);
        if left.is_empty() {
            return Ok(());
        }
        fail(left.join("\n"))
    }

    /// A running pod's `ip` has its lease and tern state (where [`Node::nothing_left`] looks,
    /// so that check can fail).
    ///
    /// # Errors
    /// What is missing.
    pub fn wired(&self, ip: IpAddr) -> Res {
        let missing = NodeAudit::default().missing(ip);
        if missing.is_empty() {
            return Ok(());
        }
        fail(missing.join("\n"))
    }

    /// The host's own global IPv4 address (first of `ip -4 -o addr show scope global`).
    ///
    /// # Errors
    /// None found.
    pub fn host_ipv4(&self) -> Res<Ipv4Addr> {
        let out = self.run(
            &mut Node::cmd("ip", &["-4", "-o", "addr", "show", "scope", "global"]),
            None,
        )?;
        ipv4_interfaces(&out)
            .first()
            .map(|n| n.ip())
            .ok_or_else(|| "the host has no global IPv4 address".to_owned())
    }

    /// The host's tern links (`tern*`, without `@peer`), sorted.
    ///
    /// # Errors
    /// `ip link` failing.
    pub fn tern_links(&self) -> Res<Vec<String>> {
        let out = self.run(&mut Node::cmd("ip", &["-o", "link", "show"]), None)?;
        let mut links: Vec<String> = out
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .filter(|n| n.starts_with("tern"))
            .map(|n| n.split('@').next().unwrap_or(n).to_owned())
            .collect();
        links.sort();
        Ok(links)
    }

    /// The CNI token in the node's kubeconfig (`<net.d>/tern-kubeconfig`'s `token:`).
    ///
    /// # Errors
    /// The file unreadable or with no token.
    pub fn cni_token(&self) -> Res<String> {
        let path = self.cni_net.join("tern-kubeconfig");
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
        token_of(&text)
            .map(|(_, t)| t.to_owned())
            .ok_or_else(|| format!("no token in {}", path.display()))
    }

    /// Rewrites the node kubeconfig's token so its `exp` is a minute ago (the signature no longer
    /// matches, so the API server refuses it too). A real expiry takes at least 10 minutes
    /// (TokenRequest's minimum lifetime); STATUS reads only `exp`, so this is the same state.
    ///
    /// # Errors
    /// No JWT in the kubeconfig, or I/O.
    pub fn expire_token(&self) -> Res {
        let path = self.cni_net.join("tern-kubeconfig");
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
        let (range, tok) = token_of(&text).ok_or("no JWT in the kubeconfig")?;
        let parts: Vec<&str> = tok.split('.').collect();
        let [head, _, sig] = parts.as_slice() else {
            return fail("the kubeconfig's token is not a JWT");
        };
        let mut claims = jwt_claims(tok)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| e.to_string())?
            .as_secs();
        claims["exp"] = Value::from(now.saturating_sub(60));
        let body = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims.to_string());
        let new = format!(
            "{}token: {head}.{body}.{sig}{}",
            &text[..range.0],
            &text[range.1..]
        );
        std::fs::write(&path, new).map_err(|e| format!("write {}: {e}", path.display()))
    }
}

/// A JWT's claims, unverified (tern-kube's decoder).
///
/// # Errors
/// Not a JWT.
pub fn jwt_claims(token: &str) -> Res<Value> {
    tern_kube::token::jwt_claims(token).map_err(|e| e.to_string())
}

/// A numeric claim of a JWT (`exp`, `iat`).
///
/// # Errors
/// Not a JWT, or the claim absent or not an integer.
pub fn jwt_claim(token: &str, claim: &str) -> Res<i64> {
    jwt_claims(token)?
        .get(claim)
        .and_then(Value::as_i64)
        .ok_or_else(|| format!("the token has no integer {claim} claim"))
}

/// The whitespace-separated IP addresses of `out` (a JSONPath list); `what` names them in the
/// error.
///
/// # Errors
/// An entry that is not an IP address.
pub fn parse_ips(out: &str, what: &str) -> Res<Vec<IpAddr>> {
    out.split_whitespace()
        .map(|s| {
            s.parse()
                .map_err(|_| format!("{what} {s:?} is not an IP address"))
        })
        .collect()
}

/// The IPv4 interface addresses (`a.b.c.d/len`) in `ip -4 -o addr show` output.
pub fn ipv4_interfaces(out: &str) -> Vec<Ipv4Network> {
    out.lines()
        .filter_map(|l| l.split_whitespace().nth(3))
        .filter_map(|a| a.parse().ok())
        .collect()
}

/// The `token:` value of a kubeconfig (quotes stripped) and the byte range of the whole
/// `token: ...` entry.
fn token_of(text: &str) -> Option<((usize, usize), &str)> {
    let mut off = 0;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        let trimmed = body.trim_start();
        if let Some(v) = trimmed.strip_prefix("token:") {
            let tok = v.trim().trim_matches(|c| c == '"' || c == '\'');
            if !tok.is_empty() {
                return Some(((off + body.len() - trimmed.len(), off + body.len()), tok));
            }
        }
        off += line.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_of_finds_the_users_token_quoted_or_not() {
        let kc = "users:\n- name: tern\n  user:\n    token: \"a.b.c\"\ncontexts: []\n";
        let ((s, e), tok) = token_of(kc).unwrap();
        assert_eq!(tok, "a.b.c");
        assert_eq!(&kc[s..e], "token: \"a.b.c\"");
        let ((_, _), tok) = token_of("    token: x.y.z\n").unwrap();
        assert_eq!(tok, "x.y.z");
        assert!(token_of("tokenFile: /x\n").is_none());
        assert!(token_of("user: {}\n").is_none());
    }

    #[test]
    fn parse_ips_reads_both_families_and_refuses_garbage() {
        let ips = parse_ips("10.99.210.5 fd99:210::5\n", "x").unwrap();
        assert_eq!(ips.len(), 2);
        assert!(ips[0].is_ipv4() && ips[1].is_ipv6());
        assert!(parse_ips("", "x").unwrap().is_empty());
        let e = parse_ips("10.99.210.5 nope", "pod p podIP").unwrap_err();
        assert!(e.contains("pod p podIP \"nope\""), "{e}");
    }

    #[test]
    fn ipv4_interfaces_reads_ip_o_addr() {
        let out = "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n\
                   2: eth0    inet 10.0.0.5/24 brd 10.0.0.255 scope global eth0\n";
        let nets = ipv4_interfaces(out);
        assert_eq!(nets.len(), 2);
        assert!(nets[1].contains([10, 0, 0, 9].into()));
        assert!(!nets[1].contains([198, 51, 100, 9].into()));
    }
}

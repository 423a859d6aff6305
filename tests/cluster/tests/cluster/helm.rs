//! `helm`: tern's chart (deploy/helm/tern) through its lifecycle on the tier's cluster, after
//! `uninstall` left the node without tern: `helm install` (the node turns Ready, pods wired),
//! `helm upgrade` to a second image whose binaries report another version, [`UPGRADE_VERSION`]
//! (the running pods keep their addresses and their traffic, the gap measured; the node's plugins
//! and the running agent report the new version, and a new pod starts with those plugins; the
//! kubeconfig's token stays valid), `helm rollback` to the first revision (the first version
//! again). The uninstall (deploy/README.md, "Helm") is the next case's,
//! [`crate::uninstall_idle`]: the DaemonSet deleted first with `--cascade=foreground` so its
//! preStop hook drains the node with valid credentials, then `helm uninstall`
//! ([`after_uninstall`]); nothing of tern's is left on the node
//! ([`crate::lifecycle::nothing_of_tern_left`], the `uninstall` case's check) and nothing of the
//! release in the cluster.

use std::io::Read as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use tern_cluster::{fail, Node, Res};

use crate::cases::{api_endpoint, cluster_ranges, installed, nat_rules};
use crate::day2::next_image;
use crate::lifecycle::nothing_of_tern_left;

/// The version the upgrade's image reports: the same release build as the first image, its
/// version stamp rewritten by `cargo xtask image --version` (crates/node/src/version.rs).
const UPGRADE_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "+upgrade");

/// Interval of the ping that measures the upgrade's gap, in seconds (busybox ping `-i`).
const PING_INTERVAL: f64 = 0.2;

/// `helm ARGS` against the tier's API server, helm's own state under `$KT/helm`.
fn helm_cmd(node: &Node, args: &[&str]) -> Command {
    let mut c = Command::new(format!("{}/helm/helm", node.var("GOBIN_DIR")));
    let home = node.kt.join("helm");
    c.env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .arg("--kubeconfig")
        .arg(node.kt.join("pki/admin.kubeconfig"))
        .args(["--namespace", "tern"])
        .args(args);
    c
}

fn run_helm(node: &Node, args: &[&str]) -> Res<String> {
    node.run(&mut helm_cmd(node, args), None)
}

fn chart(node: &Node) -> String {
    node.root
        .join("deploy/helm/tern")
        .to_string_lossy()
        .into_owned()
}

/// The agent pod's image (one pod: one node).
fn agent_image(node: &Node) -> Res<Vec<String>> {
    node.agent_pods("{.spec.containers[0].image}")
}

/// The HTTP status the API server answers the node kubeconfig's token with (a pod `get`, which
/// tern-cni may do): 200 or 404 when the token is valid.
fn token_answers(node: &Node) -> Res<String> {
    let token = node.cni_token()?;
    let url = format!("{}/api/v1/namespaces/default/pods/pod-h1", node.var("API"));
    let auth = format!("Authorization: Bearer {token}");
    let mut curl = Node::cmd("curl", &["-s", "-o", "/dev/null", "-w", "%{http_code}"]);
    curl.arg("--cacert")
        .arg(node.kt.join("pki/ca.crt"))
        .args(["-H", &auth, &url]);
    node.run(&mut curl, None).map(|c| c.trim().to_owned())
}

/// A ping from `pod` to `ip` every [`PING_INTERVAL`] s, running until [`stop_ping`].
fn start_ping(node: &Node, pod: &str, ip: IpAddr) -> Res<std::process::Child> {
    let interval = PING_INTERVAL.to_string();
    let ip = ip.to_string();
    let mut c = node.kubectl_cmd(&["exec", pod, "--", "ping", "-i", &interval, &ip]);
    node.note(&format!("$ {c:?} &"));
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.spawn().map_err(|e| format!("{c:?}: {e}"))
}

/// Stops the pod's ping (busybox `killall -INT ping`: it prints its summary and exits) and returns
/// (sent, received, the longest run of lost replies in seconds) from its output.
fn stop_ping(node: &Node, pod: &str, mut child: std::process::Child) -> Res<(u64, u64, f64)> {
    node.kubectl(&["exec", pod, "--", "killall", "-INT", "ping"])?;
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        o.read_to_string(&mut out)
            .map_err(|e| format!("read ping: {e}"))?;
    }
    let _ = child.wait();
    for l in out.lines().rev().take(4) {
        node.note(&format!("  | {l}"));
    }
    let seqs: Vec<u64> = out
        .lines()
        .filter_map(|l| l.split("seq=").nth(1))
        .filter_map(|r| r.split_whitespace().next()?.parse().ok())
        .collect();
    let sent = out
        .lines()
        .find_map(|l| {
            l.split(" packets transmitted")
                .next()
                .filter(|_| l.contains("transmitted"))
        })
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| format!("no ping summary in:\n{out}"))?;
    let received = seqs.len() as u64;
    // the longest run of missing sequence numbers, the end counted as received
    let mut prev: Option<u64> = None;
    let mut longest = 0;
    for s in seqs.iter().copied().chain(std::iter::once(sent)) {
        let from = prev.map_or(0, |p| p + 1);
        longest = longest.max(s.saturating_sub(from));
        prev = Some(s);
    }
    Ok((sent, received, longest as f64 * PING_INTERVAL))
}

/// `(device, inode)` of the node's tern plugin: a new install (an atomic rename) changes it.
fn plugin_inode(node: &Node) -> Res<(u64, u64)> {
    let p: PathBuf = node.cni_bin.join("tern");
    std::fs::metadata(&p)
        .map(|m| {
            use std::os::unix::fs::MetadataExt as _;
            (m.dev(), m.ino())
        })
        .map_err(|e| format!("stat {}: {e}", p.display()))
}

/// Checks that the plugins `tern-agent install` put in the node's CNI bin directory and the
/// running agent (its `tern_build_info` on 127.0.0.1:9412, waited for up to 30 s) report `want`.
///
/// # Errors
/// The first binary that reports another version, with what it printed.
fn reports_version(node: &Node, want: &str) -> Res {
    for b in ["tern", "tern-tuning", "tern-ipam", "tern-lookup"] {
        let path = node.cni_bin.join(b);
        let out = node.run(Command::new(&path).arg("--version"), None)?;
        let first = out.lines().next().unwrap_or_default();
        if first != format!("{b} {want}") && !first.starts_with(&format!("{b} {want}: ")) {
            return fail(format!(
                "{} --version printed {first:?}, not version {want}",
                path.display()
            ));
        }
    }
    let info = format!("tern_build_info{{version=\"{want}\"}} 1");
    let build_info = || {
        node.run(
            &mut Node::cmd("curl", &["-sf", "http://127.0.0.1:9412/metrics"]),
            None,
        )
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("tern_build_info"))
                .map(str::to_owned)
        })
    };
    if node
        .wait_for(30, &format!("the agent's {info}"), || {
            build_info().as_deref() == Some(info.as_str())
        })
        .is_err()
    {
        return fail(format!(
            "the running agent reports {:?}, not {info}",
            build_info()
        ));
    }
    Ok(())
}

/// The case (module docs): install, upgrade, rollback, uninstall, with their checks.
pub fn helm(node: &Node) -> Res {
    let t0 = Instant::now();
    // each step's time, in the case's log and on stderr (the tier's output keeps it)
    let lap = |what: &str| {
        let line = format!("{:.1}s: {what}", t0.elapsed().as_secs_f64());
        node.note(&line);
        eprintln!("[cluster] helm: {line}");
    };
    if node.ok(&mut node.kubectl_cmd(&["-n", "tern", "get", "daemonset", "tern-agent"])) {
        return fail("tern-agent is installed already: the helm case runs after `uninstall`");
    }
    if node.cni_net.join("10-tern.conflist").exists() {
        return fail("a tern conflist is on the node: the helm case runs after `uninstall`");
    }
    // -- install: the namespace and the API endpoint ConfigMap first, as with deploy/ (the
    // namespace `uninstall` deleted must be gone first)
    node.wait_for(120, "namespace tern gone", || {
        !node.ok(&mut node.kubectl_cmd(&["get", "namespace", "tern"]))
    })?;
    node.kubectl(&["create", "namespace", "tern"])?;
    api_endpoint(node)?;
    let (pods, services) = cluster_ranges(node);
    let json = |v: &[String]| serde_json::to_string(v).unwrap_or_default();
    let cidrs = format!(
        "egressNat.clusterCidrs={},egressNat.serviceCidrs={}",
        json(&pods),
        json(&services)
    );
    let first = node.var("TERN_IMAGE");
    let (repo, tag) = first.rsplit_once(':').ok_or("TERN_IMAGE has no tag")?;
    let image = format!("image.repository={repo},image.tag={tag}");
    run_helm(
        node,
        &[
            "install",
            "tern",
            &chart(node),
            "--set-json",
            &cidrs,
            "--set",
            &image,
            "--wait",
            "--timeout",
            "120s",
        ],
    )?;
    lap("helm install done");
    installed(node)?;
    nat_rules(node)?;
    node.wait_for(90, "node Ready", || node.node_ready())?;
    lap("node Ready");
    node.create_pods(&["pod-h1", "pod-h2"])?;
    node.wait_ready(&["pod-h1", "pod-h2"], 90)?;
    let (ip1, ip2) = (node.pod_ip("pod-h1")?, node.pod_ip("pod-h2")?);
    node.wired(ip1)?;
    node.wired(ip2)?;
    node.ping_from("pod-h1", &ip2.to_string())?;
    lap("pods wired");

    // -- upgrade to a second image, a ping from pod-h1 to pod-h2 running throughout
    let first_version = env!("CARGO_PKG_VERSION");
    reports_version(node, first_version)?;
    let next = next_image(node, "helm-upgrade", Some(UPGRADE_VERSION))?;
    let next_tag = next.rsplit_once(':').map_or("", |(_, t)| t);
    let token_before = node.cni_token()?;
    let inode_before = plugin_inode(node)?;
    let ping = start_ping(node, "pod-h1", ip2)?;
    let t_up = Instant::now();
    let upgraded = run_helm(
        node,
        &[
            "upgrade",
            "tern",
            &chart(node),
            "--reuse-values",
            "--set",
            &format!("image.tag={next_tag}"),
            "--wait",
            "--timeout",
            "120s",
        ],
    );
    let up_secs = t_up.elapsed().as_secs_f64();
    let (sent, received, gap) = stop_ping(node, "pod-h1", ping)?;
    upgraded?;
    let msg = format!(
        "helm upgrade {up_secs:.1}s; ping pod-h1 -> pod-h2 every {PING_INTERVAL}s: {sent} sent, \
         {received} received, longest gap {gap:.1}s"
    );
    lap(&msg);
    if received == 0 || gap > 2.0 {
        return fail(format!(
            "the running pods' traffic broke in the upgrade: {msg}"
        ));
    }
    if agent_image(node)? != [next.as_str()] {
        return fail(format!(
            "the agent runs {:?}, not {next}",
            agent_image(node)?
        ));
    }
    if (node.pod_ip("pod-h1")?, node.pod_ip("pod-h2")?) != (ip1, ip2) {
        return fail("a running pod's address changed in the upgrade");
    }
    node.wired(ip1)?;
    node.wired(ip2)?;
    // the new agent pod's install put its image's binaries in place (a new file, renamed in)
    if plugin_inode(node)? == inode_before {
        return fail("the upgrade's install left the old /opt/cni/bin/tern in place");
    }
    reports_version(node, UPGRADE_VERSION)?;
    node.create_pods(&["pod-h3"])?;
    node.wait_ready(&["pod-h3"], 90)?;
    let ip3 = node.pod_ip("pod-h3")?;
    node.ping_from("pod-h3", &ip1.to_string())?;
    node.wired(ip3)?;
    // the kubeconfig: a token the API server accepts, minted by the new agent pod's install
    if node.cni_token()? == token_before {
        return fail("the upgrade's install did not mint a fresh token");
    }
    let code = token_answers(node)?;
    if code != "200" {
        return fail(format!(
            "the kubeconfig's token after the upgrade answers {code}"
        ));
    }
    lap("upgrade checked");

    // -- rollback to revision 1: the first image again, the pods untouched
    run_helm(
        node,
        &["rollback", "tern", "1", "--wait", "--timeout", "120s"],
    )?;
    if agent_image(node)? != [first] {
        return fail(format!(
            "after the rollback the agent runs {:?}, not {first}",
            agent_image(node)?
        ));
    }
    reports_version(node, first_version)?;
    let history = run_helm(node, &["history", "tern", "-o", "json"])?;
    let revisions = serde_json::from_str::<serde_json::Value>(&history)
        .ok()
        .and_then(|h| h.as_array().map(Vec::len));
    if revisions != Some(3) {
        return fail(format!("helm history after the rollback: {history}"));
    }
    node.ping_from("pod-h2", &ip3.to_string())?;
    let code = token_answers(node)?;
    if code != "200" {
        return fail(format!(
            "the kubeconfig's token after the rollback answers {code}"
        ));
    }
    lap("rollback checked");

    // the uninstall is the next case's (uninstall_no_pods): it needs pods deleted just before
    lap("done");
    Ok(())
}

/// After the DaemonSet's deletion (its preStop hook drained the node with valid credentials):
/// `helm uninstall`, then nothing of tern's on the node and nothing of the release in the
/// cluster.
pub fn after_uninstall(node: &Node) -> Res {
    run_helm(node, &["uninstall", "tern", "--wait", "--timeout", "120s"])?;
    nothing_of_tern_left(node, "helm uninstall")?;
    let left = node.kubectl(&[
        "-n",
        "tern",
        "get",
        "all,configmap,serviceaccount,role,rolebinding",
        "-o",
        "name",
    ])?;
    let left: Vec<&str> = left
        .lines()
        .filter(|l| {
            !l.ends_with("/kubernetes-services-endpoint")
                && !l.ends_with("/kube-root-ca.crt")
                && !l.ends_with("serviceaccount/default")
        })
        .collect();
    if !left.is_empty() {
        return fail(format!(
            "left in namespace tern after helm uninstall: {left:?}"
        ));
    }
    let roles = node.kubectl(&["get", "clusterrole,clusterrolebinding", "-o", "name"])?;
    let roles: Vec<&str> = roles.lines().filter(|l| l.contains("/tern-")).collect();
    if !roles.is_empty() {
        return fail(format!("cluster RBAC left after helm uninstall: {roles:?}"));
    }
    if !run_helm(node, &["list", "-q"])?.trim().is_empty() {
        return fail("helm still lists a release");
    }
    node.kubectl(&[
        "delete",
        "namespace",
        "tern",
        "--wait=true",
        "--timeout=60s",
    ])?;
    Ok(())
}

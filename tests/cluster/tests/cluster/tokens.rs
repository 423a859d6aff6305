//! The CNI token revoked, capped by the API server, and unverifiable after a signing-key change.

use std::time::Duration;

use tern_cluster::pods::jwt_claim;
use tern_cluster::{fail, Node, Res};

use crate::day2::rollout_status;

/// The kubelet's first sandbox for `pod` succeeded (no FailedCreatePodSandBox event).
fn no_sandbox_failures(node: &Node, pod: &str) -> Res {
    let sel = format!("involvedObject.name={pod},reason=FailedCreatePodSandBox");
    let ev = node.kubectl(&["get", "events", "--field-selector", &sel, "-o", "name"])?;
    if ev.trim().is_empty() {
        return Ok(());
    }
    let all = format!("involvedObject.name={pod}");
    let msgs = node.kubectl(&[
        "get",
        "events",
        "--field-selector",
        &all,
        "-o",
        "jsonpath={.items[*].message}",
    ])?;
    fail(format!("sandbox creation of {pod} failed first: {msgs}"))
}

/// The CNI token revoked (its service account recreated: every token bound to the old one is
/// 401): the plugin's lookup gets 401, asks tern-agent for a refresh over its socket, and the
/// pod's first sandbox succeeds with the new token.
pub fn token_revoked(node: &Node) -> Res {
    let before = node.cni_token()?;
    node.kubectl(&["-n", "tern", "delete", "serviceaccount", "tern-cni"])?;
    let sa = node.root.join("deploy/serviceaccounts.yaml");
    node.kubectl(&["apply", "-f", &sa.to_string_lossy()])?;
    // the API server caches successful token reviews for up to 10 s
    std::thread::sleep(Duration::from_secs(11));
    let ca = node.kt.join("pki/ca.crt");
    let url = format!("{}/api/v1/namespaces/default/pods/x", node.var("API"));
    let auth = format!("Authorization: Bearer {before}");
    let mut curl = Node::cmd("curl", &["-s", "-o", "/dev/null", "-w", "%{http_code}"]);
    curl.arg("--cacert").arg(&ca).args(["-H", &auth, &url]);
    let code = node.run(&mut curl, None)?;
    if code.trim() != "401" {
        return fail(format!("the old CNI token answers {code}, not 401"));
    }
    node.create_pods(&["pod-f"])?;
    node.wait_ready(&["pod-f"], 90)?;
    if node.cni_token()? == before {
        return fail("the kubeconfig's token was not refreshed");
    }
    no_sandbox_failures(node, "pod-f")?;
    node.delete_pods(&["pod-f"])
}

/// One gauge of the agent's metrics (`tern_agent_...`), whole seconds.
fn agent_metric(node: &Node, name: &str) -> Res<i64> {
    let m = node.run(
        &mut Node::cmd("curl", &["-sf", "http://127.0.0.1:9412/metrics"]),
        None,
    )?;
    m.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.trim().parse::<f64>().ok())
        .map(|v| v as i64)
        .ok_or_else(|| format!("agent metrics lack {name}"))
}

/// The lifetime (`exp - iat`, seconds) of the node kubeconfig's token.
fn token_lifetime(node: &Node) -> Res<i64> {
    let t = node.cni_token()?;
    Ok(jwt_claim(&t, "exp")? - jwt_claim(&t, "iat")?)
}

/// --service-account-max-token-expiration at its minimum (1h): the agent's token is the
/// server's (<= 1 h, not the 24 h asked for) and the agent plans its next refresh before it
/// expires.
pub fn max_token_expiration(node: &Node) -> Res {
    node.sh(&["stop_apiserver"], &[])?;
    node.start_apiserver(&["--service-account-max-token-expiration", "1h"], &[])?;
    node.kubectl(&["-n", "tern", "rollout", "restart", "daemonset/tern-agent"])?;
    rollout_status(node)?;
    node.wait_for(60, "a token minted under the 1 h cap", || {
        token_lifetime(node).is_ok_and(|l| l <= 3600)
    })?;
    let tok = node.cni_token()?;
    let iat = jwt_claim(&tok, "iat")?;
    let lifetime = jwt_claim(&tok, "exp")? - iat;
    node.note(&format!("CNI token lifetime {lifetime}s"));
    let exp = agent_metric(node, "tern_agent_token_expiry_timestamp_seconds")?;
    let next = agent_metric(node, "tern_agent_next_attempt_timestamp_seconds")?;
    node.note(&format!(
        "agent: token expires at {exp}, next attempt at {next}"
    ));
    if next >= exp {
        return fail(format!("next refresh {next} is not before expiry {exp}"));
    }
    // the agent refreshes at 70-80 % of the granted lifetime, at least 10 minutes before expiry
    if next - iat > lifetime * 4 / 5 + 5 || exp - next < 600 - 5 {
        return fail(format!(
            "next refresh {next} later than 80 % of the lifetime ({lifetime}s from {iat}) or less than 10 min before expiry {exp}"
        ));
    }
    if next - iat < lifetime * 7 / 10 - 5 {
        return fail(format!(
            "next refresh {next} earlier than 70 % of the lifetime ({lifetime}s from {iat})"
        ));
    }
    node.sh(&["stop_apiserver"], &[])?;
    node.start_apiserver(&[], &[])
}

/// The signing key replaced with no overlap (every token, the agent's own included, is 401): a
/// pod start fails with an error that says so; rolling the DaemonSet (the kubelet mints the new
/// agent pod a token under the new key) brings the node back, and the waiting pod starts.
pub fn signing_key_rotated(node: &Node) -> Res {
    if !node.kt.join("pki/sa2.key").exists() {
        node.sh(&["sa_key", "sa2"], &[])?;
    }
    node.sh(&["stop_apiserver"], &[])?;
    node.sh(&["stop", "controller-manager"], &[])?;
    node.start_apiserver(&[], &[("SA_KEY", "sa2")])?;
    node.sh(&["start_controller_manager"], &[("SA_KEY", "sa2")])?;
    std::thread::sleep(Duration::from_secs(11));
    node.create_pods(&["pod-k"])?;
    let sel = "involvedObject.name=pod-k,reason=FailedCreatePodSandBox";
    node.wait_for(90, "pod-k's sandbox failure event", || {
        node.kubectl(&["get", "events", "--field-selector", sel, "-o", "name"])
            .is_ok_and(|o| !o.trim().is_empty())
    })?;
    let msg = node.kubectl(&[
        "get",
        "events",
        "--field-selector",
        sel,
        "-o",
        "jsonpath={.items[0].message}",
    ])?;
    node.note(&format!("pod-k: {msg}"));
    let lower = msg.to_lowercase();
    if !lower.contains("unauthorized") && !lower.contains("401") {
        return fail(format!(
            "the error does not say the token was refused: {msg}"
        ));
    }
    node.kubectl(&["-n", "tern", "rollout", "restart", "daemonset/tern-agent"])?;
    rollout_status(node)?;
    node.wait_ready(&["pod-k"], 180)?;
    node.delete_pods(&["pod-k"])
}

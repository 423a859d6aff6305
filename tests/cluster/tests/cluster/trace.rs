//! `tern-agent trace` in the agent's pod, as deploy/README.md has an operator run it (`kubectl -n
//! tern exec <agent pod> -c agent -- tern-agent trace ...`): its exit status and what it printed,
//! and the check every case that traces makes — the verdict the probe saw, and "kernel agrees"
//! (the node's table holds what the model compiles for that connection).

use tern_cluster::{fail, Node, Res};

/// What one trace printed, and its exit status (0 allowed, 1 denied, 2 no answer, 3 the
/// kernel's table differs).
pub struct Traced {
    /// The exit status.
    pub code: Option<i32>,
    /// Its standard output.
    pub out: String,
}

/// Traces `from` → `to` on TCP `port` in the agent's pod.
pub fn trace(node: &Node, from: &str, to: &str, port: u16) -> Res<Traced> {
    let agent = node.agent_pod()?;
    let port = port.to_string();
    let args = [
        "-n",
        "tern",
        "exec",
        &agent,
        "-c",
        "agent",
        "--",
        "tern-agent",
        "trace",
        "--from",
        from,
        "--to",
        to,
        "--port",
        &port,
    ];
    let mut cmd = node.kubectl_cmd(&args);
    node.note(&format!("$ {cmd:?}"));
    let out = cmd
        .output()
        .map_err(|e| format!("kubectl exec tern-agent trace: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    for l in stdout
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
    {
        node.note(&format!("  | {l}"));
    }
    Ok(Traced {
        code: out.status.code(),
        out: stdout,
    })
}

/// Traces `from` → `to`:`port` and requires the verdict `allowed` and the node's table to agree;
/// returns what the trace printed.
pub fn agreed(node: &Node, from: &str, to: &str, port: u16, allowed: bool) -> Res<String> {
    let t = trace(node, from, to, port)?;
    let want = if allowed { 0 } else { 1 };
    if t.code != Some(want) {
        return fail(format!(
            "tern-agent trace {from} -> {to}:{port} exited {:?}, not {want} ({}): {}",
            t.code,
            if allowed { "allowed" } else { "denied" },
            t.out
        ));
    }
    if !t.out.lines().any(|l| l.starts_with("kernel agrees (node ")) {
        return fail(format!(
            "tern-agent trace {from} -> {to}:{port} did not compare with the node's table: {}",
            t.out
        ));
    }
    // On stdout too, as the cases print their figures: what an operator sees.
    println!(
        "tern-agent trace --from {from} --to {to} --port {port} (exit {want}):\n{}",
        t.out
    );
    Ok(t.out)
}

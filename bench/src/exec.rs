//! The direct tier: one plugin exec'd as a runtime execs it (clean `CNI_*` environment, netconf
//! on stdin), timed from spawn to reaped exit.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::Res;

/// Phase tracing of the plugins under test (`--breakdown`): while set, every invocation gets
/// `TERN_TRACE_PHASES=<file>` and its pid, spawn and reaped-exit times are kept in [`SPAWNS`].
pub(crate) static TRACE: Mutex<Option<PathBuf>> = Mutex::new(None);

/// One traced invocation: pid, `CLOCK_MONOTONIC` ns at spawn and at reaped exit.
pub(crate) static SPAWNS: Mutex<Vec<(u32, u64, u64)>> = Mutex::new(Vec::new());

/// `CLOCK_MONOTONIC` in ns (the clock the plugins' phase marks read).
pub(crate) fn mono_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// The command a runtime would run: a clean environment with the `CNI_*` variables.
/// `args` is `CNI_ARGS`, not set when empty.
pub(crate) fn plugin_cmd(
    bin: &Path,
    verb: &str,
    cid: &str,
    netns: &str,
    cni_path: &str,
    args: &str,
) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("CNI_COMMAND", verb)
        .env("CNI_CONTAINERID", cid)
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", cni_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if !args.is_empty() {
        cmd.env("CNI_ARGS", args);
    }
    if let Some(trace) = TRACE.lock().ok().and_then(|t| t.clone()) {
        cmd.env("TERN_TRACE_PHASES", trace);
    }
    cmd
}

pub(crate) fn feed(child: &mut Child, stdin: &[u8]) -> Res<()> {
    if let Some(mut pipe) = child.stdin.take() {
        // A plugin may exit without reading stdin (host-local's VERSION): EPIPE is not an error.
        match pipe.write_all(stdin) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                return Err(format!("write plugin stdin: {e}"))
            }
            _ => {}
        }
    }
    Ok(())
}

pub(crate) fn drain(child: &mut Child) -> String {
    let mut out = String::new();
    if let Some(mut pipe) = child.stdout.take() {
        let _ = pipe.read_to_string(&mut out);
    }
    out
}

/// Execs one plugin invocation and returns its wall time; an exit other than 0 is an error
/// carrying the plugin's stdout (the CNI error JSON).
pub(crate) fn invoke(
    bin: &Path,
    verb: &str,
    cid: &str,
    netns: &str,
    cni_path: &str,
    args: &str,
    stdin: &[u8],
) -> Res<Duration> {
    invoke_out(bin, verb, cid, netns, cni_path, args, stdin).map(|(d, _)| d)
}

/// [`invoke`], also returning the plugin's stdout.
pub(crate) fn invoke_out(
    bin: &Path,
    verb: &str,
    cid: &str,
    netns: &str,
    cni_path: &str,
    args: &str,
    stdin: &[u8],
) -> Res<(Duration, String)> {
    let mut cmd = plugin_cmd(bin, verb, cid, netns, cni_path, args);
    let t0 = Instant::now();
    let spawn_ns = mono_ns();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
    feed(&mut child, stdin)?;
    let out = drain(&mut child);
    let status = child.wait().map_err(|e| format!("wait: {e}"))?;
    let took = t0.elapsed();
    if TRACE.lock().is_ok_and(|t| t.is_some()) {
        if let Ok(mut s) = SPAWNS.lock() {
            s.push((child.id(), spawn_ns, mono_ns()));
        }
    }
    if status.success() {
        Ok((took, out))
    } else {
        Err(format!(
            "{} {verb} {cid}: {status}: {}",
            bin.display(),
            out.trim()
        ))
    }
}

/// The netconf of chain step `conf` with `prev` as `prevResult`.
pub(crate) fn with_prev(conf: &Value, prev: Option<&Value>) -> Res<Vec<u8>> {
    let mut c = conf.clone();
    if let Some(p) = prev {
        c["prevResult"] = p.clone();
    }
    serde_json::to_vec(&c).map_err(|e| e.to_string())
}

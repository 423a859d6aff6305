//! Running built plugin binaries and the libcni driver as a runtime does.
//!
//! Two ways in, matching the two ways a runtime reaches a plugin:
//! - [`PluginCall`] execs one plugin binary directly, as CNI spec section 3 describes: `CNI_*`
//!   variables in the environment, the netconf on stdin, the result or error JSON on stdout. Used for
//!   what Debian's libcni (1.1.x) cannot drive: cniVersion 1.1.0, STATUS, GC and malformed input.
//! - [`Cnitool`] runs `tests/cnitool` (our cnitool built against Debian's libcni) with a private conf
//!   dir and result cache, so each test is isolated from `/etc/cni/net.d` and `/var/lib/cni/results`.
//!
//! Invariants: a child never inherits the test's environment except `PATH`; every run has a
//! deadline ([`DEFAULT_TIMEOUT`]) after which the child is killed and [`ExecError::Timeout`] returned.

mod cnitool;
mod paths;
mod plugin;

pub use cnitool::*;
pub use paths::*;
pub use plugin::*;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long a plugin or cnitool run may take before it is killed.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Errors from running a child process in a test.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The program could not be started (missing binary, not executable).
    #[error("spawn {program}: {source} (run scripts/setup to build binaries?)")]
    Spawn {
        /// The program that failed to start.
        program: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Reading from or writing to the child, or preparing a temp dir, failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The child outlived its deadline and was killed.
    #[error("{program} did not finish within {timeout:?}; killed")]
    Timeout {
        /// The program that hung.
        program: PathBuf,
        /// The deadline it exceeded.
        timeout: Duration,
    },
    /// A value could not be serialized to JSON.
    #[error("serialize json: {0}")]
    Json(#[from] serde_json::Error),
}

/// What a finished child left behind.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// The child's exit status.
    pub status: ExitStatus,
    /// Raw stdout bytes.
    pub stdout: Vec<u8>,
    /// stdout parsed as JSON, when it is non-empty valid JSON.
    pub json: Option<Value>,
    /// stderr, lossily decoded.
    pub stderr: String,
}

impl RunOutput {
    /// Whether the child exited 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// stdout, lossily decoded.
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// The `code` field of an error JSON on stdout, if there is one.
    pub fn error_code(&self) -> Option<u64> {
        self.json.as_ref()?.get("code")?.as_u64()
    }

    /// The `msg` field of an error JSON on stdout, if there is one.
    pub fn error_msg(&self) -> Option<&str> {
        self.json.as_ref()?.get("msg")?.as_str()
    }

    /// A multi-line description for assertion messages: status, stdout, stderr.
    pub fn describe(&self) -> String {
        format!(
            "status: {}\nstdout: {}\nstderr: {}",
            self.status,
            self.stdout_str(),
            self.stderr
        )
    }
}

/// `program`, or `ip netns exec <netns> program` when a netns is given. `ip netns exec` execs the
/// program in place, so the child's pid (and process group) is the program's.
///
/// With `binds` (directory, mount point), the whole thing runs in a private mount namespace
/// (`unshare --mount --propagation private`) where each directory is bind-mounted over its mount
/// point (`/etc/cni`, `/run/tern`), so fixed paths such as tern-tuning's
/// `/etc/cni/tuning/allowlist.conf` or the plugins' `/run/tern/metrics.sock` are per test: the
/// machine's are never used and tests cannot race on them (a missing mount point is made, empty).
/// `sh` execs the rest in place, so the pid is still the program's.
fn command_in(netns: Option<&str>, program: &Path, binds: &[(&Path, &str)]) -> Command {
    if binds.is_empty() {
        return command_in_netns(netns, program);
    }
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "while [ \"$1\" != -- ]; do mkdir -p \"$2\" && mount --bind \"$1\" \"$2\" || exit 125; \
             shift 2; done; shift; exec \"$@\"",
        )
        .arg("sh");
    for (dir, at) in binds {
        cmd.arg(dir).arg(at);
    }
    cmd.arg("--");
    if let Some(ns) = netns {
        cmd.args(["ip", "netns", "exec", ns]);
    }
    cmd.arg(program);
    cmd
}

fn command_in_netns(netns: Option<&str>, program: &Path) -> Command {
    match netns {
        None => Command::new(program),
        Some(ns) => {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", ns]).arg(program);
            cmd
        }
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ExecError {
    let what = what.into();
    move |source| ExecError::Io { what, source }
}

/// Spawns `cmd` with `stdin` piped in, collects stdout and stderr, and kills it after `timeout`.
fn run_with_timeout(
    mut cmd: Command,
    stdin: &[u8],
    timeout: Duration,
) -> Result<RunOutput, ExecError> {
    let program = PathBuf::from(cmd.get_program());
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child: Child = cmd.spawn().map_err(|source| ExecError::Spawn {
        program: program.clone(),
        source,
    })?;

    // Feed stdin and drain stdout/stderr on their own threads so a large payload or output never
    // deadlocks against a full pipe. A child that exits without reading stdin gives EPIPE: ignored.
    let mut child_stdin = child.stdin.take();
    let input = stdin.to_vec();
    let writer = thread::spawn(move || {
        if let Some(pipe) = child_stdin.as_mut() {
            let _ = pipe.write_all(&input);
        }
        drop(child_stdin);
    });
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out_t = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err_t = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );

    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child
            .try_wait()
            .map_err(io_err(format!("wait {}", program.display())))?
        {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ExecError::Timeout { program, timeout });
        }
        thread::sleep(Duration::from_millis(5));
    };
    let _ = writer.join();
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    let json = if stdout.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        serde_json::from_slice(&stdout).ok()
    };
    Ok(RunOutput {
        status,
        stdout,
        json,
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

/// A finished command's status, stdout and stderr as text, for a failure message.
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "status {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `cmd` and returns its output whatever the status.
///
/// # Panics
/// When it cannot be started (a missing program: run scripts/setup).
pub fn run_output(cmd: &mut Command) -> std::process::Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (run scripts/setup?)"))
}

/// libcni's result cache entries (file names under `/var/lib/cni/results`) that name any of the
/// container IDs `ids`: what a runtime's DEL must have removed.
pub fn cni_cache_entries_of(ids: &[String]) -> Vec<String> {
    std::fs::read_dir("/var/lib/cni/results")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| ids.iter().any(|id| n.contains(id.as_str())))
        .collect()
}

#[cfg(test)]
mod tests;

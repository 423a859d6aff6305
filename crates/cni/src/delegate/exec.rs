//! Running an exec'd delegate process.
//!
//! Running an exec'd delegate: spawn with the call's `CNI_*` variables, feed stdin and drain
//! stdout/stderr without deadlock, bound what is kept, and enforce the optional deadline.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use super::{Delegate, Outcome};
use crate::env::Verb;
use crate::error::Error;

/// How often a delegate that is being replaced (`ETXTBSY`) is retried, one second apart, as the
/// reference `pkg/invoke` does.
const TEXT_BUSY_RETRIES: u32 = 5;

/// The most of a delegate's stdout read: a result is a few KiB; the netconf limit is 1 MiB.
const MAX_STDOUT: usize = 1 << 20;
/// The most of a delegate's stderr kept (and forwarded); the rest is read and dropped.
const MAX_STDERR: usize = 64 << 10;

/// Reads `r` to its end, keeping at most `cap` bytes in `buf` (the rest is read and dropped, so
/// the writer never blocks).
fn read_capped(r: &mut impl Read, buf: &mut Vec<u8>, cap: usize) {
    let cap64 = u64::try_from(cap).unwrap_or(u64::MAX);
    let _ = r.by_ref().take(cap64).read_to_end(buf);
    let _ = std::io::copy(r, &mut std::io::sink());
}

/// Writes what `pipe` takes without blocking and returns the rest of `data`, with `pipe` back in
/// blocking mode; nothing is left when the reader is gone (EPIPE) or the pipe fails.
fn write_without_blocking<'d>(pipe: &mut std::process::ChildStdin, data: &'d [u8]) -> &'d [u8] {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let Ok(flags) = fcntl(&*pipe, FcntlArg::F_GETFL).map(OFlag::from_bits_truncate) else {
        return data;
    };
    if fcntl(&*pipe, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)).is_err() {
        return data;
    }
    let mut rest = data;
    while !rest.is_empty() {
        match pipe.write(rest) {
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(_) => return &[],
        }
    }
    if fcntl(&*pipe, FcntlArg::F_SETFL(flags)).is_err() {
        // A non-blocking pipe would make the writer thread give up early: write nothing more.
        return &[];
    }
    rest
}

/// SIGKILL to process `pid`.
fn kill_pid(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
    }
}

/// SIGKILL to the process group `pid` leads (a delegate started with a deadline); nothing when
/// `pid` leads no group.
fn kill_group(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ =
            nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
    }
}

impl Delegate<'_> {
    /// Execs the delegate found at `exe`; its stderr is captured and forwarded to ours.
    pub(super) fn run_exec(
        &self,
        exe: &Path,
        command: Verb,
        stdin: &[u8],
    ) -> Result<Outcome, Error> {
        let mut child = self.spawn(exe, command)?;
        let timed_out = AtomicBool::new(false);
        let io = self.feed_and_drain(&mut child, stdin, &timed_out);
        if timed_out.load(Ordering::SeqCst) {
            let _ = child.wait();
            return Err(Error::try_again_later(format!(
                "{} did not answer within {:?}: killed",
                self.plugin_type,
                self.deadline.unwrap_or_default()
            )));
        }
        let (out, err) = match io {
            Ok(v) => v,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::decode(format!(
                    "{} {command}: {e}",
                    self.plugin_type
                )));
            }
            Err(e) => {
                // No thread to feed or drain the delegate (the node is out of processes): stop it.
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::try_again_later(format!(
                    "run {} {command}: cannot start a thread: {e}",
                    self.plugin_type
                )));
            }
        };
        if !err.is_empty() {
            // Forward the delegate's logs (CNI spec section 4).
            let _ = std::io::stderr().write_all(&err);
        }
        let status: ExitStatus = child
            .wait()
            .map_err(|e| Error::io(format!("wait for {}: {e}", self.plugin_type)))?;
        Ok(Outcome {
            stdout: out,
            stderr: err,
            failure: (!status.success()).then(|| status.to_string()),
        })
    }

    /// Starts the delegate with the call's `CNI_*` variables and piped stdio (in its own process
    /// group when there is a deadline), retrying a text-busy executable as `pkg/invoke` does.
    fn spawn(&self, exe: &Path, command: Verb) -> Result<Child, Error> {
        let mut attempt = 0;
        loop {
            let mut p = Command::new(exe);
            p.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in self.cni_env(command) {
                match v {
                    Some(v) => p.env(k, v),
                    None => p.env_remove(k),
                };
            }
            if self.deadline.is_some() {
                // Its own process group, so the deadline can end its children too.
                p.process_group(0);
            }
            match p.spawn() {
                Ok(c) => return Ok(c),
                Err(e)
                    if e.kind() == std::io::ErrorKind::ExecutableFileBusy
                        && attempt < TEXT_BUSY_RETRIES =>
                {
                    attempt += 1;
                    std::thread::sleep(Duration::from_secs(1));
                }
                Err(e) => {
                    return Err(Error::io(format!(
                        "run {} {}: {e}",
                        self.plugin_type, command
                    )))
                }
            }
        }
    }

    /// Feeds `stdin` to the running delegate and drains its stdout and stderr (bounded) without
    /// deadlock, killing its process group when the deadline passes first (then `timed_out`).
    ///
    /// # Errors
    /// `InvalidData` when stdout is over [`MAX_STDOUT`] (the delegate is killed); the error of
    /// starting a thread.
    fn feed_and_drain(
        &self,
        child: &mut Child,
        stdin: &[u8],
        timed_out: &AtomicBool,
    ) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
        let pid = child.id();
        let (done, finished) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| -> std::io::Result<(Vec<u8>, Vec<u8>)> {
            if let Some(deadline) = self.deadline {
                std::thread::Builder::new().spawn_scoped(s, move || {
                    if let Err(RecvTimeoutError::Timeout) = finished.recv_timeout(deadline) {
                        timed_out.store(true, Ordering::SeqCst);
                        kill_group(pid);
                    }
                })?;
            }
            // What the empty pipe takes at once is written here (a netconf, nearly always: no
            // thread to start while the delegate starts); any rest from another thread, so a
            // delegate that prints before reading cannot block us.
            let mut pipe = child.stdin.take();
            let rest = match pipe.as_mut() {
                Some(p) => write_without_blocking(p, stdin),
                None => &[],
            };
            if rest.is_empty() {
                drop(pipe); // EOF: the delegate has its whole stdin
            } else {
                std::thread::Builder::new().spawn_scoped(s, move || {
                    if let Some(p) = pipe.as_mut() {
                        let _ = p.write_all(rest);
                    }
                })?;
            }
            let mut err = Vec::new();
            let mut stderr = child.stderr.take();
            let err_reader = std::thread::Builder::new().spawn_scoped(s, move || {
                if let Some(e) = stderr.as_mut() {
                    read_capped(e, &mut err, MAX_STDERR);
                }
                err
            })?;
            let out = read_stdout(child.stdout.take(), pid);
            let err = err_reader.join().unwrap_or_default();
            drop(done);
            Ok((out?, err))
        })
    }
}

/// Reads the delegate's stdout to its end; over [`MAX_STDOUT`] it stops reading and kills the
/// delegate and its group (nothing valid is that long).
///
/// # Errors
/// `InvalidData` for stdout over [`MAX_STDOUT`].
fn read_stdout(mut stdout: Option<ChildStdout>, pid: u32) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let Some(o) = stdout.as_mut() else {
        return Ok(out);
    };
    let limit = u64::try_from(MAX_STDOUT)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    let _ = o.take(limit).read_to_end(&mut out);
    if out.len() <= MAX_STDOUT {
        return Ok(out);
    }
    // Stop it rather than buffer it. Closing our end also ends whatever of its children still
    // writes there (EPIPE).
    drop(stdout);
    kill_pid(pid);
    kill_group(pid);
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("printed more than {MAX_STDOUT} bytes"),
    ))
}

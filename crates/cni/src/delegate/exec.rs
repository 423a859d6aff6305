//! Running an exec'd delegate process.
//!
//! Running an exec'd delegate: spawn with the call's `CNI_*` variables, feed stdin and drain
//! stdout/stderr without deadlock, bound what is kept, and enforce the optional deadline.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
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
        let mut attempt = 0;
        let mut child = loop {
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
                Ok(c) => break c,
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
        };
        let pid = child.id();
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let timed_out = std::sync::atomic::AtomicBool::new(false);
        let io = std::thread::scope(|s| -> std::io::Result<(Vec<u8>, Vec<u8>)> {
            if let Some(deadline) = self.deadline {
                let timed_out = &timed_out;
                std::thread::Builder::new().spawn_scoped(s, move || {
                    if let Err(RecvTimeoutError::Timeout) = finished.recv_timeout(deadline) {
                        timed_out.store(true, std::sync::atomic::Ordering::SeqCst);
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
            let mut out = Vec::new();
            let mut err = Vec::new();
            let mut stdout = child.stdout.take();
            let mut stderr = child.stderr.take();
            let err_reader = std::thread::Builder::new().spawn_scoped(s, move || {
                if let Some(e) = stderr.as_mut() {
                    read_capped(e, &mut err, MAX_STDERR);
                }
                err
            })?;
            let mut too_long = false;
            if let Some(o) = stdout.as_mut() {
                let limit = u64::try_from(MAX_STDOUT)
                    .unwrap_or(u64::MAX)
                    .saturating_add(1);
                let _ = o.take(limit).read_to_end(&mut out);
                too_long = out.len() > MAX_STDOUT;
            }
            if too_long {
                // Nothing valid is that long: stop it rather than buffer it. Closing our end
                // also ends whatever of its children still writes there (EPIPE).
                drop(stdout.take());
                kill_pid(pid);
                kill_group(pid);
            }
            let err = err_reader.join().unwrap_or_default();
            drop(done);
            if too_long {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("printed more than {MAX_STDOUT} bytes"),
                ));
            }
            Ok((out, err))
        });
        if timed_out.load(std::sync::atomic::Ordering::SeqCst) {
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
}

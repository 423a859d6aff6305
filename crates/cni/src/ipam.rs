//! Delegation to another plugin, IPAM above all (SPEC.md section 4, "Plugin Delegation").
//!
//! The delegate is looked up in `CNI_PATH`, run with this invocation's environment (only
//! `CNI_COMMAND` changed) and the complete netconf on stdin. Its stderr is captured and forwarded
//! to ours, and quoted in the error when it fails without an error result (as the reference
//! `pkg/invoke` does); its error result keeps its code. Runs in the calling thread's netns: call it
//! from the host netns.
//!
//! A delegate may be *built in* ([`Delegate::builtin`]): a plugin linked into the caller, e.g.
//! tern-ipam inside tern. It is still looked up in `CNI_PATH` first (a node without the plugin
//! fails exactly as with exec), then run in this process through the very dispatcher its binary
//! uses ([`crate::dispatch`]) with the same environment and stdin, and its stdout is parsed the
//! same way: same code, same effects, no exec.

use std::collections::HashMap;
use std::fmt;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, ExitStatus, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use serde_json::Value;

use crate::env::{split_cni_path, Command};
use crate::error::{code, Error};
use crate::result::CniResult;
use crate::skel::{dispatch, Plugin};

/// How often a delegate that is being replaced (`ETXTBSY`) is retried, one second apart, as the
/// reference `pkg/invoke` does.
const TEXT_BUSY_RETRIES: u32 = 5;

/// A plugin linked into this binary that stands in for the delegate of the same type.
#[derive(Clone, Copy)]
pub struct Builtin<'a>(pub &'a (dyn Plugin + Sync));

impl fmt::Debug for Builtin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Builtin").field(&self.0.about()).finish()
    }
}

/// A delegated plugin and the environment it runs with.
#[derive(Clone, Debug)]
pub struct Delegate<'a> {
    /// The plugin's binary name, e.g. `host-local` (from `ipam.type`).
    pub plugin_type: &'a str,
    /// `CNI_PATH`, `:`-separated.
    pub cni_path: &'a str,
    /// `CNI_CONTAINERID`; `None` for STATUS and GC.
    pub container_id: Option<&'a str>,
    /// `CNI_NETNS`; `None` when there is none.
    pub netns: Option<&'a Path>,
    /// `CNI_IFNAME`; `None` for STATUS and GC.
    pub ifname: Option<&'a str>,
    /// `CNI_ARGS`.
    pub cni_args: Option<&'a str>,
    /// When set, the plugin runs in this process instead of being exec'd (see the module doc).
    pub builtin: Option<Builtin<'a>>,
    /// When set, an exec'd delegate still running this long after its start is killed with its
    /// whole process group (children that kept its pipes open included) and the call fails with
    /// code 11. `None`: no limit (IPAM, as the reference `pkg/invoke`; the runtime's own timeout
    /// applies).
    pub deadline: Option<Duration>,
}

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

/// What one run of the delegate left: its stdout, its stderr (exec only) and whether it succeeded.
struct Outcome {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// `None` on success; otherwise how it failed (an exit status, or "exit status 1" in-process).
    failure: Option<String>,
}

impl<'a> Delegate<'a> {
    /// A delegate for verbs without an attachment (STATUS, GC).
    pub fn without_attachment(plugin_type: &'a str, cni_path: &'a str) -> Self {
        Delegate {
            plugin_type,
            cni_path,
            container_id: None,
            netns: None,
            ifname: None,
            cni_args: None,
            builtin: None,
            deadline: None,
        }
    }

    /// The same delegate, killed when it has not ended `deadline` after its start.
    pub fn with_deadline(self, deadline: Duration) -> Self {
        Delegate {
            deadline: Some(deadline),
            ..self
        }
    }

    /// The same delegate, run in-process by `plugin` (which must be the plugin `plugin_type`
    /// names: same code as its binary) once `CNI_PATH` is found to hold it.
    pub fn builtin(self, plugin: &'a (dyn Plugin + Sync)) -> Self {
        Delegate {
            builtin: Some(Builtin(plugin)),
            ..self
        }
    }

    /// Finds the delegate's executable in `CNI_PATH`.
    ///
    /// # Errors
    /// Code 7 when the type is empty or names a path; code 7 `failed to find plugin "x" in path
    /// [...]` when no directory holds it.
    pub fn find(&self) -> Result<PathBuf, Error> {
        let t = self.plugin_type;
        if t.is_empty() || t.contains('/') || t.contains('\\') || t == "." || t == ".." {
            return Err(Error::invalid_config(format!("invalid plugin type {t:?}")));
        }
        let dirs = split_cni_path(self.cni_path);
        for dir in &dirs {
            let candidate = dir.join(t);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
        Err(Error::invalid_config(format!(
            "failed to find plugin {t:?} in path {:?}",
            dirs
        )))
    }

    /// The environment the delegate gets: ours with the `CNI_*` variables of this call.
    fn cni_env(&self, command: Command) -> [(&'static str, Option<&str>); 6] {
        [
            ("CNI_COMMAND", Some(command.as_str())),
            ("CNI_PATH", Some(self.cni_path)),
            ("CNI_CONTAINERID", self.container_id),
            ("CNI_NETNS", self.netns.and_then(Path::to_str)),
            ("CNI_IFNAME", self.ifname),
            ("CNI_ARGS", self.cni_args),
        ]
    }

    /// Runs the built-in plugin through the dispatcher, as its binary would run.
    fn run_builtin(&self, plugin: &(dyn Plugin + Sync), command: Command, stdin: &[u8]) -> Outcome {
        let mut env: HashMap<String, String> = self
            .cni_env(command)
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v.to_owned())))
            .collect();
        // The only other variable the dispatcher reads; an exec'd delegate inherits it.
        if let Ok(v) = std::env::var("CNI_NETNS_OVERRIDE") {
            env.insert("CNI_NETNS_OVERRIDE".into(), v);
        }
        let mut stdout = Vec::new();
        let status = dispatch(
            plugin,
            &env,
            &mut &stdin[..],
            &mut stdout,
            &mut std::io::stderr(),
        );
        Outcome {
            stdout,
            stderr: Vec::new(),
            failure: (status != 0).then(|| format!("exit status: {status}")),
        }
    }

    /// Execs the delegate found at `exe`; its stderr is captured and forwarded to ours.
    fn run_exec(&self, exe: &Path, command: Command, stdin: &[u8]) -> Result<Outcome, Error> {
        let mut attempt = 0;
        let mut child = loop {
            let mut p = Process::new(exe);
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
            // Forward the delegate's logs (SPEC.md section 4).
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

    /// Runs the delegate for `command` with `stdin` and returns its stdout parsed as JSON (`None`
    /// when it printed nothing).
    ///
    /// # Errors
    /// Code 7 when it is not in `CNI_PATH`; the delegate's own error result, code kept; code 5
    /// when it cannot be started or exits non-zero without an error result (message: `netplugin
    /// failed: "<stderr>": <status>`, or `netplugin failed with no error message: <status>`);
    /// code 6 when its stdout is not JSON.
    pub fn run(&self, command: Command, stdin: &[u8]) -> Result<Option<Value>, Error> {
        let exe = self.find()?;
        let outcome = match self.builtin {
            Some(Builtin(plugin)) => self.run_builtin(plugin, command, stdin),
            None => self.run_exec(&exe, command, stdin)?,
        };
        let text = String::from_utf8_lossy(&outcome.stdout);
        let parsed: Option<Value> = if text.trim().is_empty() {
            None
        } else {
            serde_json::from_str(&text).ok()
        };
        if let Some(status) = outcome.failure {
            if let Some(e) = parsed.as_ref().and_then(Error::from_json) {
                return Err(e);
            }
            let stderr_text = String::from_utf8_lossy(&outcome.stderr);
            let msg = if stderr_text.trim().is_empty() {
                format!("netplugin failed with no error message: {status}")
            } else {
                format!("netplugin failed: {:?}: {status}", stderr_text.trim())
            };
            return Err(Error::io(msg).context(self.plugin_type));
        }
        match parsed {
            Some(v) => Ok(Some(v)),
            None if text.trim().is_empty() => Ok(None),
            None => Err(Error::decode(format!(
                "{}: {command} printed something that is not JSON",
                self.plugin_type
            ))),
        }
    }

    /// ADD: runs the delegate and parses its (abbreviated) result.
    ///
    /// # Errors
    /// As [`Self::run`]; code 6 when it printed no result or an invalid one.
    pub fn add(&self, stdin: &[u8]) -> Result<CniResult, Error> {
        let v = self
            .run(Command::Add, stdin)?
            .ok_or_else(|| Error::decode(format!("{}: ADD printed no result", self.plugin_type)))?;
        CniResult::from_json(&v)
            .map(|(r, _)| r)
            .map_err(|e| e.context(self.plugin_type))
    }

    /// Runs a verb that prints nothing on success (DEL, CHECK, STATUS, GC).
    ///
    /// # Errors
    /// As [`Self::run`].
    pub fn exec(&self, command: Command, stdin: &[u8]) -> Result<(), Error> {
        self.run(command, stdin).map(|_| ())
    }

    /// STATUS, with a missing delegate reported as code 50 (SPEC.md "STATUS": a plugin whose
    /// delegate is unavailable is not available itself).
    ///
    /// # Errors
    /// Code 50 when the delegate is missing; otherwise the delegate's error.
    pub fn status(&self, stdin: &[u8]) -> Result<(), Error> {
        if let Err(e) = self.find() {
            return Err(Error::new(code::NOT_AVAILABLE, e.msg));
        }
        self.exec(Command::Status, stdin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A directory holding executable scripts standing in for delegates, removed on drop.
    struct PluginDir(PathBuf);

    impl PluginDir {
        fn new(tag: &str) -> PluginDir {
            let d =
                std::env::temp_dir().join(format!("tern-cni-ipam-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            PluginDir(d)
        }
        fn script(&self, name: &str, body: &str) {
            let p = self.0.join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        fn path(&self) -> String {
            format!("/nonexistent:{}", self.0.display())
        }
    }

    impl Drop for PluginDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn runs_the_delegate_with_the_environment_and_stdin() {
        let dir = PluginDir::new("env");
        // Echo the environment and stdin back inside a result so the test can see them.
        dir.script(
            "fake",
            r#"in=$(cat); printf '{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.7/24"}],"dns":{"domain":"%s|%s|%s|%s|%s"}}' "$CNI_COMMAND" "$CNI_CONTAINERID" "$CNI_IFNAME" "${CNI_NETNS-unset}" "$in""#,
        );
        let path = dir.path();
        let d = Delegate {
            plugin_type: "fake",
            cni_path: &path,
            container_id: Some("c1"),
            netns: None,
            ifname: Some("eth0"),
            cni_args: Some(""),
            builtin: None,
            deadline: None,
        };
        let r = d.add(b"{stdin}").unwrap();
        assert_eq!(r.ips[0].address.to_string(), "10.0.0.7/24");
        assert_eq!(r.dns.domain.as_deref(), Some("ADD|c1|eth0|unset|{stdin}"));
    }

    #[test]
    fn keeps_the_delegates_error_code_or_explains_its_failure() {
        let dir = PluginDir::new("err");
        dir.script("coded", r#"echo '{"code": 11, "msg": "busy"}'; exit 1"#);
        dir.script("crash", "echo 'it broke' >&2; exit 3");
        dir.script("garbage", "echo 'not json'");
        let path = dir.path();
        let e = Delegate::without_attachment("coded", &path)
            .exec(Command::Del, b"")
            .unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (11, "busy"));
        let e = Delegate::without_attachment("crash", &path)
            .exec(Command::Del, b"")
            .unwrap_err();
        // Its stderr was captured (and forwarded): the error quotes it, as the reference does.
        assert_eq!(e.code, 5);
        assert_eq!(
            e.msg,
            r#"crash: netplugin failed: "it broke": exit status: 3"#
        );
        let e = Delegate::without_attachment("garbage", &path)
            .exec(Command::Del, b"")
            .unwrap_err();
        assert_eq!(e.code, 6);
        let e = Delegate::without_attachment("absent", &path)
            .exec(Command::Del, b"")
            .unwrap_err();
        assert_eq!(e.code, 7);
        assert!(
            e.msg.contains("failed to find plugin \"absent\""),
            "{}",
            e.msg
        );
        let e = Delegate::without_attachment("absent", &path)
            .status(b"")
            .unwrap_err();
        assert_eq!(e.code, 50);
        let e = Delegate::without_attachment("../bin/sh", &path)
            .find()
            .unwrap_err();
        assert_eq!(e.code, 7);
    }

    #[test]
    fn a_deadline_kills_the_delegate_and_its_children() {
        let dir = PluginDir::new("deadline");
        let marker = dir.0.join("child-lived");
        // A child that keeps the pipes open and would leave a marker if it outlived the kill.
        dir.script(
            "stuck",
            &format!("(sleep 3; touch {}) & sleep 30", marker.display()),
        );
        let path = dir.path();
        let t0 = std::time::Instant::now();
        let e = Delegate::without_attachment("stuck", &path)
            .with_deadline(Duration::from_millis(300))
            .exec(Command::Add, b"{}")
            .unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        assert_eq!(e.code, 11, "{e}");
        assert!(e.msg.contains("did not answer within"), "{}", e.msg);
        std::thread::sleep(Duration::from_millis(3500));
        assert!(!marker.exists(), "the delegate's child was killed with it");
    }

    #[test]
    fn oversized_output_is_refused_and_code_0_is_no_error() {
        let dir = PluginDir::new("big-out");
        dir.script(
            "flood",
            "head -c 3000000 /dev/zero | tr '\\0' ' '; echo '{}'",
        );
        dir.script(
            "code0",
            r#"echo '{"code": 0, "msg": "weird"}'; echo 'it said 0' >&2; exit 1"#,
        );
        dir.script(
            "loud",
            "head -c 1000000 /dev/zero | tr '\\0' x >&2; echo '{}'",
        );
        let path = dir.path();
        let e = Delegate::without_attachment("flood", &path)
            .exec(Command::Add, b"{}")
            .unwrap_err();
        assert_eq!(e.code, 6, "{e}");
        assert!(e.msg.contains("more than"), "{}", e.msg);
        let e = Delegate::without_attachment("code0", &path)
            .exec(Command::Del, b"")
            .unwrap_err();
        assert_eq!(
            e.code, 5,
            "an error object with code 0 is not an error result: {e}"
        );
        // A delegate that floods stderr is drained (never blocked) and still succeeds.
        Delegate::without_attachment("loud", &path)
            .exec(Command::Del, b"")
            .unwrap();
    }

    #[test]
    fn a_large_stdin_is_written_while_stdout_is_read() {
        let dir = PluginDir::new("big");
        // Prints before reading: with a stdin larger than the pipe (64 KiB) this would deadlock a
        // synchronous writer; what the pipe takes at once is written before the rest.
        dir.script(
            "chatty",
            r#"head -c 70000 /dev/zero | tr '\0' ' '; n=$(wc -c); printf '{"cniVersion":"1.0.0","ips":[],"dns":{"domain":"%s"}}' "$n""#,
        );
        let path = dir.path();
        let d = Delegate::without_attachment("chatty", &path);
        let big = vec![b'x'; 200_000];
        assert_eq!(d.add(&big).unwrap().dns.domain.as_deref(), Some("200000"));
    }

    /// A built-in plugin that answers from what the dispatcher gave it.
    struct Echo;

    impl Plugin for Echo {
        fn about(&self) -> &str {
            "echo"
        }
        fn add(&self, input: &crate::AddInput) -> Result<CniResult, Error> {
            let mut r = CniResult::default();
            r.dns.domain = Some(format!(
                "{}|{}|{}|{}|{}",
                input.container_id,
                input.ifname,
                input.netns.display(),
                input.args_raw,
                input.config.name
            ));
            Ok(r)
        }
        fn del(&self, input: &crate::DelInput) -> Result<(), Error> {
            Err(Error::new(11, format!("busy {}", input.container_id)))
        }
        fn check(&self, _: &crate::CheckInput) -> Result<(), Error> {
            Ok(())
        }
        fn gc(&self, input: &crate::GcInput) -> Result<(), Error> {
            match &input.valid_attachments {
                Some(v) if v.len() == 1 => Ok(()),
                other => Err(Error::new(5, format!("{other:?}"))),
            }
        }
    }

    #[test]
    fn a_builtin_runs_in_process_through_the_dispatcher_once_found_in_cni_path() {
        let dir = PluginDir::new("builtin");
        // The binary is never run: it would fail every verb.
        dir.script("echo-ipam", "exit 9");
        let path = dir.path();
        let ns = Path::new("/run/netns/x");
        let d = Delegate {
            plugin_type: "echo-ipam",
            cni_path: &path,
            container_id: Some("c1"),
            netns: Some(ns),
            ifname: Some("eth0"),
            cni_args: Some("K8S_POD_NAME=p"),
            builtin: None,
            deadline: None,
        }
        .builtin(&Echo);
        let conf = br#"{"cniVersion":"1.0.0","name":"n1","type":"echo-ipam"}"#;
        let r = d.add(conf).unwrap();
        assert_eq!(
            r.dns.domain.as_deref(),
            Some("c1|eth0|/run/netns/x|K8S_POD_NAME=p|n1")
        );
        let e = d.exec(Command::Del, conf).unwrap_err();
        assert_eq!((e.code, e.msg.as_str()), (11, "busy c1"));
        d.exec(Command::Check, conf).unwrap();
        // The dispatcher's own checks apply, as in the binary: no CHECK before 0.4.0.
        let old = br#"{"cniVersion":"0.3.1","name":"n1","type":"echo-ipam"}"#;
        assert_eq!(d.exec(Command::Check, old).unwrap_err().code, 1);
        let gc = br#"{"cniVersion":"1.1.0","name":"n1","type":"echo-ipam","cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}"#;
        Delegate::without_attachment("echo-ipam", &path)
            .builtin(&Echo)
            .exec(Command::Gc, gc)
            .unwrap();
        // Not in CNI_PATH: the same errors as with exec.
        let missing = Delegate::without_attachment("absent", &path).builtin(&Echo);
        assert_eq!(missing.exec(Command::Gc, gc).unwrap_err().code, 7);
        assert_eq!(missing.status(gc).unwrap_err().code, 50);
    }
}

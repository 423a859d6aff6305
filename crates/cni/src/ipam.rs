//! Delegation to another plugin, IPAM above all (SPEC.md section 4, "Plugin Delegation").
//!
//! The delegate is looked up in `CNI_PATH`, run with this invocation's environment (only
//! `CNI_COMMAND` changed) and the complete netconf on stdin. Its stderr is forwarded to ours; its
//! error result keeps its code. Runs in the calling thread's netns: call it from the host netns.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::env::{split_cni_path, Command};
use crate::error::{code, Error};
use crate::result::CniResult;

/// How often a delegate that is being replaced (`ETXTBSY`) is retried, one second apart, as the
/// reference `pkg/invoke` does.
const TEXT_BUSY_RETRIES: u32 = 5;

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

    /// Runs the delegate for `command` with `stdin` and returns its stdout parsed as JSON (`None`
    /// when it printed nothing).
    ///
    /// # Errors
    /// The delegate's own error result, code kept; code 5 when it cannot be started or exits
    /// non-zero without an error result (message: `netplugin failed: "<stderr>": <status>`); code 6
    /// when its stdout is not JSON.
    pub fn run(&self, command: Command, stdin: &[u8]) -> Result<Option<Value>, Error> {
        let exe = self.find()?;
        let mut attempt = 0;
        let mut child = loop {
            let mut p = Process::new(&exe);
            p.env("CNI_COMMAND", command.as_str())
                .env("CNI_PATH", self.cni_path)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            set_or_remove(&mut p, "CNI_CONTAINERID", self.container_id);
            set_or_remove(&mut p, "CNI_NETNS", self.netns.and_then(Path::to_str));
            set_or_remove(&mut p, "CNI_IFNAME", self.ifname);
            set_or_remove(&mut p, "CNI_ARGS", self.cni_args);
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
        let output = std::thread::scope(|s| {
            let mut pipe = child.stdin.take();
            // Written from another thread so a delegate that prints before reading cannot block us.
            s.spawn(move || {
                if let Some(p) = pipe.as_mut() {
                    let _ = p.write_all(stdin);
                }
            });
            let mut out = Vec::new();
            let mut err = Vec::new();
            let mut stdout = child.stdout.take();
            let mut stderr = child.stderr.take();
            let err_reader = s.spawn(move || {
                if let Some(e) = stderr.as_mut() {
                    let _ = e.read_to_end(&mut err);
                }
                err
            });
            if let Some(o) = stdout.as_mut() {
                let _ = o.read_to_end(&mut out);
            }
            let err = err_reader.join().unwrap_or_default();
            (out, err, child.wait())
        });
        let (out, err, status) = output;
        let status =
            status.map_err(|e| Error::io(format!("wait for {}: {e}", self.plugin_type)))?;
        if !err.is_empty() {
            // Forward the delegate's logs (SPEC.md section 4).
            let _ = std::io::stderr().write_all(&err);
        }
        let text = String::from_utf8_lossy(&out);
        let parsed: Option<Value> = if text.trim().is_empty() {
            None
        } else {
            serde_json::from_str(&text).ok()
        };
        if !status.success() {
            if let Some(e) = parsed.as_ref().and_then(Error::from_json) {
                return Err(e);
            }
            let stderr_text = String::from_utf8_lossy(&err);
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

fn set_or_remove(p: &mut Process, key: &str, value: Option<&str>) {
    match value {
        Some(v) => {
            p.env(key, v);
        }
        None => {
            p.env_remove(key);
        }
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
        assert_eq!(e.code, 5);
        assert!(
            e.msg.contains("it broke") && e.msg.contains("exit status: 3"),
            "{}",
            e.msg
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
}

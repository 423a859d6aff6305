//! Delegation to another plugin, IPAM above all (CNI spec section 4, "Plugin Delegation").
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
//! same way: same code, same effects, no exec. [`Delegate::add_for`] goes one step further for an
//! ADD with the caller's own netconf: the caller's parsed input in, the result as a value.

mod exec;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::env::{split_cni_path, Verb};
use crate::error::{code, Error};
use crate::plugin::{AddInput, AttachmentInput, GcInput, NetnsPath, Plugin, StatusInput};
use crate::result::CniResult;
use crate::skel::dispatch;

impl<N: NetnsPath> AttachmentInput<N> {
    /// A delegate (CNI spec section 4) for `plugin_type`, with this invocation's environment.
    pub fn delegate<'a>(&'a self, plugin_type: &'a str) -> Delegate<'a> {
        Delegate {
            plugin_type,
            cni_path: &self.cni_path,
            container_id: Some(self.container_id.as_str()),
            netns: self.netns.path(),
            ifname: Some(self.ifname.as_str()),
            cni_args: Some(&self.args_raw),
            builtin: None,
            deadline: None,
        }
    }
}

impl StatusInput {
    /// A delegate for `plugin_type` with only `CNI_PATH` set.
    pub fn delegate<'a>(&'a self, plugin_type: &'a str) -> Delegate<'a> {
        Delegate::without_attachment(plugin_type, &self.cni_path)
    }
}

impl GcInput {
    /// A delegate for `plugin_type` with only `CNI_PATH` set.
    pub fn delegate<'a>(&'a self, plugin_type: &'a str) -> Delegate<'a> {
        Delegate::without_attachment(plugin_type, &self.cni_path)
    }
}

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
    fn cni_env(&self, command: Verb) -> [(&'static str, Option<&str>); 6] {
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
    fn run_builtin(&self, plugin: &(dyn Plugin + Sync), command: Verb, stdin: &[u8]) -> Outcome {
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

    /// Runs the delegate for `command` with `stdin` and returns its stdout parsed as JSON (`None`
    /// when it printed nothing).
    ///
    /// # Errors
    /// Code 7 when it is not in `CNI_PATH`; the delegate's own error result, code kept; code 5
    /// when it cannot be started or exits non-zero without an error result (message: `netplugin
    /// failed: "<stderr>": <status>`, or `netplugin failed with no error message: <status>`);
    /// code 6 when its stdout is not JSON.
    pub fn run(&self, command: Verb, stdin: &[u8]) -> Result<Option<Value>, Error> {
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
            .run(Verb::Add, stdin)?
            .ok_or_else(|| Error::decode(format!("{}: ADD printed no result", self.plugin_type)))?;
        CniResult::from_json(&v)
            .map(|(r, _)| r)
            .map_err(|e| e.context(self.plugin_type))
    }

    /// ADD for the caller's own `input` (the delegate made by `input.delegate(…)`), with `stdin`
    /// the netconf the delegate gets. A built-in delegate whose `stdin` is `input`'s netconf
    /// byte for byte gets `input` itself, already parsed and checked by the caller's dispatcher
    /// from the same environment and bytes, and its result as the caller would read it back from
    /// its stdout ([`CniResult::printed_in`]): the dispatcher's second parse, its checks and the
    /// result's printing and parsing are skipped, with the same result, error and effects.
    /// Otherwise (other bytes, e.g. the pod lookup's `ips`; an exec'd delegate) as [`Self::add`].
    ///
    /// # Errors
    /// As [`Self::add`].
    pub fn add_for(&self, input: &AddInput, stdin: &[u8]) -> Result<CniResult, Error> {
        let Some(Builtin(plugin)) = self.builtin else {
            return self.add(stdin);
        };
        let same_call = stdin == input.config.bytes.as_slice()
            && self.container_id == Some(input.container_id.as_str())
            && self.netns == Some(input.netns.as_path())
            && self.ifname == Some(input.ifname.as_str())
            && self.cni_args == Some(input.args_raw.as_str())
            && self.cni_path == input.cni_path;
        if !same_call {
            return self.add(stdin);
        }
        self.find()?;
        let version = input.config.cni_version;
        match plugin.add(input) {
            Ok(r) if r.interfaces_indexed() => Ok(r.printed_in(version)),
            // Printed, it would not parse: the error the caller gets from reading it back.
            Ok(r) => CniResult::from_json(&r.to_json(version))
                .map(|(r, _)| r)
                .map_err(|e| e.context(self.plugin_type)),
            Err(e) => {
                tracing::error!(
                    command = "ADD",
                    container_id = input.container_id.as_str(),
                    code = e.code,
                    details = ?e.details,
                    "verb failed: {}",
                    e.msg
                );
                // An error with code 0 prints as no error at all (Error::from_json).
                if e.code == 0 {
                    return Err(Error::io(
                        "netplugin failed with no error message: exit status: 1",
                    )
                    .context(self.plugin_type));
                }
                Err(e)
            }
        }
    }

    /// Runs a verb that prints nothing on success (DEL, CHECK, STATUS, GC).
    ///
    /// # Errors
    /// As [`Self::run`].
    pub fn exec(&self, command: Verb, stdin: &[u8]) -> Result<(), Error> {
        self.run(command, stdin).map(|_| ())
    }

    /// STATUS, with a missing delegate reported as code 50 (CNI spec "STATUS": a plugin whose
    /// delegate is unavailable is not available itself).
    ///
    /// # Errors
    /// Code 50 when the delegate is missing; otherwise the delegate's error.
    pub fn status(&self, stdin: &[u8]) -> Result<(), Error> {
        if let Err(e) = self.find() {
            return Err(Error::new(code::NOT_AVAILABLE, e.msg));
        }
        self.exec(Verb::Status, stdin)
    }
}

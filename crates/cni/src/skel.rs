//! The plugin side of the protocol: one typed input per verb, the [`Plugin`] trait, and the
//! dispatcher that turns an environment plus stdin into exactly one result or error on stdout.
//!
//! Invariant: only [`dispatch`] writes to stdout, and it writes one JSON document (a result, an
//! error, or the VERSION answer) or nothing (DEL, CHECK, STATUS, GC success).

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::env::{split_cni_path, CniArgs, Command, ContainerId, EnvSource, IfName, ProcessEnv};
use crate::error::{code, Error};
use crate::ipam::Delegate;
use crate::netconf::{read_bounded, NetConf};
use crate::result::CniResult;
use crate::version::Version;

/// The input of a verb that names one attachment (container ID + ifname).
///
/// `N` is the netns: a path for ADD and CHECK, optional for DEL (SPEC.md section 2: `CNI_NETNS`
/// may be empty on DEL when the runtime no longer has it).
#[derive(Clone, Debug)]
pub struct AttachmentInput<N> {
    /// `CNI_CONTAINERID`.
    pub container_id: ContainerId,
    /// `CNI_NETNS`.
    pub netns: N,
    /// `CNI_IFNAME`.
    pub ifname: IfName,
    /// `CNI_ARGS`, parsed.
    pub args: CniArgs,
    /// `CNI_ARGS` as received, for delegates.
    pub args_raw: String,
    /// `CNI_PATH` as received.
    pub cni_path: String,
    /// The netconf from stdin.
    pub config: NetConf,
}

/// ADD input: the netns is required.
pub type AddInput = AttachmentInput<PathBuf>;
/// CHECK input: the netns is required.
pub type CheckInput = AttachmentInput<PathBuf>;
/// DEL input: the netns may be absent.
pub type DelInput = AttachmentInput<Option<PathBuf>>;

impl<N: NetnsPath> AttachmentInput<N> {
    /// A delegate (SPEC.md section 4) for `plugin_type`, with this invocation's environment.
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

/// A netns as carried by an input: a path, or an optional one.
pub trait NetnsPath {
    /// The path, when there is one.
    fn path(&self) -> Option<&Path>;
}

impl NetnsPath for PathBuf {
    fn path(&self) -> Option<&Path> {
        Some(self)
    }
}

impl NetnsPath for Option<PathBuf> {
    fn path(&self) -> Option<&Path> {
        self.as_deref()
    }
}

/// STATUS input (1.1.0): only the config and `CNI_PATH`.
#[derive(Clone, Debug)]
pub struct StatusInput {
    /// `CNI_PATH` as received.
    pub cni_path: String,
    /// The netconf from stdin.
    pub config: NetConf,
}

/// One entry of `cni.dev/valid-attachments`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Deserialize)]
pub struct ValidAttachment {
    /// The container ID.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// The interface name.
    pub ifname: String,
}

/// GC input (1.1.0): the config, `CNI_PATH`, and the attachments that are still valid.
#[derive(Clone, Debug)]
pub struct GcInput {
    /// `CNI_PATH` as received.
    pub cni_path: String,
    /// The netconf from stdin.
    pub config: NetConf,
    /// `cni.dev/valid-attachments`: `Some(empty)` means nothing is valid; `None` (the key is
    /// absent) means the runtime sent no list, and a plugin must then remove nothing.
    pub valid_attachments: Option<Vec<ValidAttachment>>,
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

/// A CNI plugin: one handler per verb. VERSION is answered by the dispatcher.
pub trait Plugin {
    /// One line about the plugin, printed to stderr when run without `CNI_COMMAND`.
    fn about(&self) -> &str;

    /// ADD: create or adjust the attachment and return the result (SPEC.md "ADD").
    ///
    /// # Errors
    /// Any CNI error; it must have undone what it did.
    fn add(&self, input: &AddInput) -> Result<CniResult, Error>;

    /// DEL: undo ADD; must succeed when things are already gone (SPEC.md "DEL").
    ///
    /// # Errors
    /// Only when something that exists could not be removed.
    fn del(&self, input: &DelInput) -> Result<(), Error>;

    /// CHECK: verify the attachment against `prevResult` (SPEC.md "CHECK").
    ///
    /// # Errors
    /// A CNI error naming what is missing or different.
    fn check(&self, input: &CheckInput) -> Result<(), Error>;

    /// STATUS: whether the plugin can serve ADD (SPEC.md "STATUS"); default: ready.
    ///
    /// # Errors
    /// Code 50 or 51 when not ready.
    fn status(&self, _input: &StatusInput) -> Result<(), Error> {
        Ok(())
    }

    /// GC: remove resources of attachments not listed as valid (SPEC.md "GC"); default: nothing.
    ///
    /// # Errors
    /// The joined errors of what could not be cleaned up.
    fn gc(&self, _input: &GcInput) -> Result<(), Error> {
        Ok(())
    }
}

/// Runs `plugin` in this process: reads the real environment and stdin, writes stdout, and exits.
pub fn plugin_main<P: Plugin>(plugin: &P) -> ! {
    // Unlocked handles: a handler's helper threads (tern's IPAM thread forwards its delegate's
    // stderr) write to the same streams; each write takes the lock for itself only.
    let status = dispatch(
        plugin,
        &ProcessEnv,
        &mut std::io::stdin(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    );
    std::process::exit(status)
}

/// Dispatches one invocation; returns the process exit status (0 on success, 1 on error).
///
/// Order of checks follows the reference dispatcher: command, required variables (code 4),
/// container ID and ifname (codes 3/4), stdin (codes 5/6/7), `cniVersion` (code 1), verb allowed
/// by the version (code 1), `CNI_NETNS` not the plugin's own (code 8), `CNI_ARGS` (code 4). Unlike
/// the reference, the netns check happens before the handler runs, so nothing is touched.
pub fn dispatch<P: Plugin + ?Sized>(
    plugin: &P,
    env: &dyn EnvSource,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    let mut version_for_errors = Version::LATEST;
    match run(plugin, env, stdin, stdout, stderr, &mut version_for_errors) {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(stdout, "{}", e.to_json(version_for_errors.as_str()));
            let _ = stdout.flush();
            1
        }
    }
}

fn supported_versions_json() -> Value {
    Value::from(Version::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>())
}

fn non_empty(env: &dyn EnvSource, key: &str) -> Option<String> {
    env.var(key).filter(|v| !v.is_empty())
}

fn run<P: Plugin + ?Sized>(
    plugin: &P,
    env: &dyn EnvSource,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    version_for_errors: &mut Version,
) -> Result<(), Error> {
    let Some(cmd) = non_empty(env, "CNI_COMMAND") else {
        let _ = writeln!(stderr, "{}", plugin.about());
        let _ = writeln!(
            stderr,
            "CNI protocol versions supported: {}",
            Version::ALL.map(|v| v.as_str()).join(", ")
        );
        return Err(Error::invalid_env(
            "required env variables [CNI_COMMAND] missing",
        ));
    };
    let command = Command::parse(&cmd)?;
    if command == Command::Version {
        return answer_version(stdin, stdout);
    }
    let missing: Vec<&str> = command
        .required_vars()
        .iter()
        .copied()
        .filter(|k| non_empty(env, k).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(Error::invalid_env(format!(
            "required env variables [{}] missing",
            missing.join(",")
        )));
    }
    let attachment = matches!(command, Command::Add | Command::Check | Command::Del);
    let ids = if attachment {
        let container_id = ContainerId::parse(&env.var("CNI_CONTAINERID").unwrap_or_default())?;
        let ifname = IfName::parse(&env.var("CNI_IFNAME").unwrap_or_default())?;
        Some((container_id, ifname))
    } else {
        None
    };

    let bytes = read_bounded(stdin)?;
    let config = NetConf::parse(bytes)?;
    *version_for_errors = config.cni_version;
    crate::logging::init(config.log_level.as_deref(), config.log_file.as_deref());
    let v = config.cni_version;
    match command {
        Command::Check if !v.allows_check() => {
            return Err(Error::new(
                code::INCOMPATIBLE_VERSION,
                "config version does not allow CHECK",
            )
            .with_details(format!(
                "CHECK needs cniVersion 0.4.0 or later, the config is {v}"
            )));
        }
        Command::Status | Command::Gc if !v.allows_status_and_gc() => {
            return Err(Error::new(
                code::INCOMPATIBLE_VERSION,
                format!("config version does not allow {command}"),
            )
            .with_details(format!(
                "{command} needs cniVersion 1.1.0 or later, the config is {v}"
            )));
        }
        _ => {}
    }
    let cni_path = env.var("CNI_PATH").unwrap_or_default();

    let Some((container_id, ifname)) = ids else {
        let span = tracing::info_span!("cni", command = command.as_str(), network = %config.name);
        let _guard = span.enter();
        return match command {
            Command::Status => plugin.status(&StatusInput { cni_path, config }),
            _ => {
                let valid_attachments = parse_valid_attachments(&config)?;
                plugin.gc(&GcInput {
                    cni_path,
                    config,
                    valid_attachments,
                })
            }
        };
    };

    let netns = non_empty(env, "CNI_NETNS").map(PathBuf::from);
    if let Some(ns) = &netns {
        if non_empty(env, "CNI_NETNS_OVERRIDE").is_none() && is_own_netns(ns) {
            return Err(Error::new(
                code::INVALID_NETNS,
                "plugin's netns and netns from CNI_NETNS should not be the same",
            )
            .with_details(format!(
                "CNI_NETNS={} is the network namespace the plugin runs in; refusing to touch it \
                 (set CNI_NETNS_OVERRIDE=1 if that is really intended)",
                ns.display()
            )));
        }
    }
    let args_raw = env.var("CNI_ARGS").unwrap_or_default();
    let args = CniArgs::parse(&args_raw)?;
    let span = tracing::info_span!(
        "cni",
        command = command.as_str(),
        container_id = container_id.as_str(),
        ifname = ifname.as_str()
    );
    let _guard = span.enter();
    tracing::debug!(network = %config.name, cni_version = %v, "invoked");

    let input = AttachmentInput {
        container_id,
        netns,
        ifname,
        args,
        args_raw,
        cni_path,
        config,
    };
    match command {
        Command::Del => plugin.del(&input),
        Command::Add | Command::Check => {
            let AttachmentInput {
                container_id,
                netns,
                ifname,
                args,
                args_raw,
                cni_path,
                config,
            } = input;
            // Required variables were checked above, so the netns is present.
            let netns = netns.unwrap_or_default();
            let input = AttachmentInput {
                container_id,
                netns,
                ifname,
                args,
                args_raw,
                cni_path,
                config,
            };
            if command == Command::Add {
                let result = plugin.add(&input)?;
                let out = result.to_json(input.config.cni_version);
                writeln!(stdout, "{out}")
                    .and_then(|()| stdout.flush())
                    .map_err(|e| Error::io(format!("write result to stdout: {e}")))
            } else {
                plugin.check(&input)
            }
        }
        _ => Ok(()),
    }
}

/// VERSION: `{cniVersion, supportedVersions}`. `cniVersion` echoes the config's when stdin holds a
/// supported one (SPEC.md "VERSION"), else the newest; stdin is otherwise ignored.
fn answer_version(stdin: &mut dyn Read, stdout: &mut dyn Write) -> Result<(), Error> {
    let echoed = read_bounded(stdin)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| {
            v.get("cniVersion")
                .and_then(Value::as_str)
                .and_then(Version::parse)
        })
        .unwrap_or(Version::LATEST);
    let out =
        json!({"cniVersion": echoed.as_str(), "supportedVersions": supported_versions_json()});
    writeln!(stdout, "{out}").map_err(|e| Error::io(format!("write result to stdout: {e}")))
}

fn parse_valid_attachments(config: &NetConf) -> Result<Option<Vec<ValidAttachment>>, Error> {
    let v = config
        .raw
        .get("cni.dev/valid-attachments")
        .or_else(|| config.raw.get("cni.dev/attachments"));
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(|e| {
            Error::decode(format!(
                "error unmarshall network config: cni.dev/valid-attachments: {e}"
            ))
        }),
    }
}

/// Whether `path` is the network namespace this thread is in (same device and inode).
/// A path that cannot be read is not "own": the handler reports it (DEL treats it as gone).
fn is_own_netns(path: &Path) -> bool {
    let (Ok(target), Ok(own)) = (
        std::fs::metadata(path),
        std::fs::metadata("/proc/thread-self/ns/net"),
    ) else {
        return false;
    };
    target.dev() == own.dev() && target.ino() == own.ino()
}

/// Splits an input's `CNI_PATH` into directories.
pub fn cni_path_dirs(cni_path: &str) -> Vec<PathBuf> {
    split_cni_path(cni_path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    /// Records what reached the handlers; ADD returns a fixed result.
    #[derive(Default)]
    struct Recorder {
        calls: RefCell<Vec<String>>,
    }

    impl Plugin for Recorder {
        fn about(&self) -> &str {
            "recorder: a test plugin"
        }
        fn add(&self, input: &AddInput) -> Result<CniResult, Error> {
            self.calls
                .borrow_mut()
                .push(format!("ADD {}", input.netns.display()));
            let v = json!({"ips": [{"address": "10.0.0.2/24"}]});
            Ok(CniResult::from_json(&v)?.0)
        }
        fn del(&self, input: &DelInput) -> Result<(), Error> {
            self.calls
                .borrow_mut()
                .push(format!("DEL {:?}", input.netns));
            Ok(())
        }
        fn check(&self, _input: &CheckInput) -> Result<(), Error> {
            self.calls.borrow_mut().push("CHECK".into());
            Ok(())
        }
        fn gc(&self, input: &GcInput) -> Result<(), Error> {
            self.calls
                .borrow_mut()
                .push(format!("GC {:?}", input.valid_attachments));
            Ok(())
        }
    }

    struct Outcome {
        status: i32,
        stdout: String,
        stderr: String,
        calls: Vec<String>,
    }

    impl Outcome {
        fn json(&self) -> Value {
            serde_json::from_str(&self.stdout).unwrap_or(Value::Null)
        }
        fn code(&self) -> u64 {
            self.json()["code"].as_u64().unwrap_or(0)
        }
    }

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        let mut m: HashMap<String, String> = [
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", "/run/netns/does-not-matter"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/opt/cni/bin"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, v) in pairs {
            if v.is_empty() && k.starts_with('-') {
                m.remove(&k[1..]);
            } else {
                m.insert(k.to_string(), v.to_string());
            }
        }
        m
    }

    fn conf(version: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({"cniVersion": version, "name": "n", "type": "recorder"}))
            .unwrap()
    }

    fn run_with(env: HashMap<String, String>, stdin: &[u8]) -> Outcome {
        let plugin = Recorder::default();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let status = dispatch(&plugin, &env, &mut &stdin[..], &mut out, &mut err);
        Outcome {
            status,
            stdout: String::from_utf8(out).unwrap(),
            stderr: String::from_utf8(err).unwrap(),
            calls: plugin.calls.take(),
        }
    }

    #[test]
    fn bad_input_gets_the_right_code_and_reaches_no_handler() {
        let two_mib = vec![b' '; 2 << 20];
        let prev_other_family = serde_json::to_vec(&json!({
            "cniVersion": "1.0.0", "name": "n", "type": "recorder",
            "prevResult": {"cniVersion": "0.4.0", "ips": []}
        }))
        .unwrap();
        type Case = (
            &'static str,
            HashMap<String, String>,
            Vec<u8>,
            u64,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (
                "missing CNI_COMMAND",
                env(&[("-CNI_COMMAND", "")]),
                conf("1.0.0"),
                4,
                "required env variables [CNI_COMMAND] missing",
            ),
            (
                "unknown command",
                env(&[("CNI_COMMAND", "FROB")]),
                conf("1.0.0"),
                4,
                "unknown CNI_COMMAND: FROB",
            ),
            (
                "missing netns on ADD",
                env(&[("-CNI_NETNS", "")]),
                conf("1.0.0"),
                4,
                "required env variables [CNI_NETNS] missing",
            ),
            (
                "empty netns on CHECK",
                env(&[("CNI_COMMAND", "CHECK"), ("CNI_NETNS", "")]),
                conf("1.0.0"),
                4,
                "required env variables [CNI_NETNS] missing",
            ),
            (
                "container id a/b",
                env(&[("CNI_CONTAINERID", "a/b")]),
                conf("1.0.0"),
                4,
                "invalid characters in containerID",
            ),
            (
                "ifname 16 bytes",
                env(&[("CNI_IFNAME", "sixteen-bytes-xx")]),
                conf("1.0.0"),
                4,
                "interface name is too long",
            ),
            (
                "ifname ..",
                env(&[("CNI_IFNAME", "..")]),
                conf("1.0.0"),
                4,
                "interface name is . or ..",
            ),
            (
                "stdin not json",
                env(&[]),
                b"{not json".to_vec(),
                6,
                "error unmarshall network config",
            ),
            (
                "stdin 2 MiB",
                env(&[]),
                two_mib,
                7,
                "network configuration is larger than 1 MiB",
            ),
            (
                "version 9.9.9",
                env(&[]),
                conf("9.9.9"),
                1,
                "incompatible CNI versions",
            ),
            (
                "CHECK at 0.3.1",
                env(&[("CNI_COMMAND", "CHECK")]),
                conf("0.3.1"),
                1,
                "config version does not allow CHECK",
            ),
            (
                "GC at 1.0.0",
                env(&[("CNI_COMMAND", "GC")]),
                conf("1.0.0"),
                1,
                "config version does not allow GC",
            ),
            (
                "STATUS at 0.4.0",
                env(&[("CNI_COMMAND", "STATUS")]),
                conf("0.4.0"),
                1,
                "config version does not allow STATUS",
            ),
            (
                "prevResult of the other family",
                env(&[]),
                prev_other_family,
                1,
                "could not parse prevResult",
            ),
            (
                "own netns",
                env(&[("CNI_NETNS", "/proc/self/ns/net")]),
                conf("1.0.0"),
                8,
                "plugin's netns and netns from CNI_NETNS should not be the same",
            ),
            (
                "own netns on DEL",
                env(&[
                    ("CNI_COMMAND", "DEL"),
                    ("CNI_NETNS", "/proc/thread-self/ns/net"),
                ]),
                conf("1.0.0"),
                8,
                "should not be the same",
            ),
            (
                "bad CNI_ARGS",
                env(&[("CNI_ARGS", "novalue")]),
                conf("1.0.0"),
                4,
                "ARGS: invalid pair",
            ),
        ];
        for (what, env, stdin, code, msg) in cases {
            let o = run_with(env, &stdin);
            assert_eq!(o.status, 1, "{what}");
            assert_eq!(o.code(), code, "{what}: {}", o.stdout);
            let got = o.json()["msg"].as_str().unwrap_or_default().to_owned();
            assert!(got.contains(msg), "{what}: {got:?} lacks {msg:?}");
            assert!(o.calls.is_empty(), "{what}: a handler ran: {:?}", o.calls);
            assert_eq!(o.stdout.lines().count(), 1, "{what}: one JSON document");
        }
    }

    #[test]
    fn missing_command_prints_about_on_stderr() {
        let o = run_with(env(&[("-CNI_COMMAND", "")]), b"");
        assert!(o.stderr.contains("recorder: a test plugin"));
        assert!(o
            .stderr
            .contains("CNI protocol versions supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"));
    }

    #[test]
    fn error_json_carries_the_config_version() {
        let o = run_with(env(&[("CNI_COMMAND", "CHECK")]), &conf("0.3.1"));
        assert_eq!(o.json()["cniVersion"], "0.3.1");
        let o = run_with(env(&[("CNI_CONTAINERID", "a/b")]), &conf("0.3.1"));
        assert_eq!(
            o.json()["cniVersion"],
            "1.1.0",
            "before stdin is read, the newest"
        );
    }

    #[test]
    fn add_prints_the_result_in_the_config_version() {
        for v in Version::ALL {
            let o = run_with(env(&[]), &conf(v.as_str()));
            assert_eq!(o.status, 0, "{}", o.stdout);
            let out = o.json();
            assert_eq!(out["cniVersion"], v.as_str());
            let has_version = out["ips"][0].get("version").is_some();
            assert_eq!(has_version, v < Version::V1_0_0, "{v}");
            assert_eq!(o.calls, vec!["ADD /run/netns/does-not-matter".to_string()]);
        }
    }

    #[test]
    fn del_accepts_an_empty_netns_and_prints_nothing() {
        let o = run_with(
            env(&[("CNI_COMMAND", "DEL"), ("CNI_NETNS", "")]),
            &conf("1.0.0"),
        );
        assert_eq!((o.status, o.stdout.as_str()), (0, ""));
        assert_eq!(o.calls, vec!["DEL None".to_string()]);
    }

    #[test]
    fn version_answers_every_supported_version() {
        let o = run_with(env(&[("CNI_COMMAND", "VERSION")]), &conf("0.4.0"));
        assert_eq!(
            o.json(),
            json!({"cniVersion": "0.4.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]})
        );
        let o = run_with(env(&[("CNI_COMMAND", "VERSION")]), b"");
        assert_eq!(o.json()["cniVersion"], "1.1.0");
    }

    #[test]
    fn gc_distinguishes_no_list_from_an_empty_list() {
        let mut c = json!({"cniVersion": "1.1.0", "name": "n", "type": "recorder"});
        let o = run_with(
            env(&[("CNI_COMMAND", "GC")]),
            &serde_json::to_vec(&c).unwrap(),
        );
        assert_eq!(o.calls, vec!["GC None".to_string()]);
        c["cni.dev/valid-attachments"] = json!([]);
        let o = run_with(
            env(&[("CNI_COMMAND", "GC")]),
            &serde_json::to_vec(&c).unwrap(),
        );
        assert_eq!(o.calls, vec!["GC Some([])".to_string()]);
        c["cni.dev/valid-attachments"] = json!([{"containerID": "c1", "ifname": "eth0"}]);
        let o = run_with(
            env(&[("CNI_COMMAND", "GC")]),
            &serde_json::to_vec(&c).unwrap(),
        );
        assert!(o.calls[0].contains("c1"), "{:?}", o.calls);
    }
}

//! The dispatcher: one invocation in, one result or error out.
//!
//! The dispatcher: turns an environment plus stdin into the verb's typed input, calls the
//! [`Plugin`], and prints exactly one result or error on stdout.
//!
//! Invariant: only [`dispatch`] writes to stdout, and it writes one JSON document (a result, an
//! error, or the VERSION answer) or nothing (DEL, CHECK, STATUS, GC success). [`plugin_main`]
//! then sends the verb's report ([`tern_node::report`]) once, after the output is flushed, and
//! exits whatever became of it.

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{json, Value};

use crate::env::{split_cni_path, CniArgs, ContainerId, EnvSource, IfName, ProcessEnv, Verb};
use crate::error::{code, Error};
use crate::netconf::{read_bounded, NetConf};
use crate::plugin::{AttachmentInput, GcInput, Plugin, StatusInput, ValidAttachment};
use crate::version::Version;
use tern_node::report::{VerbReport, REPORT_SOCKET};

/// Runs `plugin` in this process: reads the real environment and stdin, writes stdout, sends the
/// verb's report to [`REPORT_SOCKET`] (when [`Plugin::report_as`] names the plugin and
/// `CNI_COMMAND` is a verb), and exits. Runtimes call a plugin without arguments; `--version`
/// alone prints [`Plugin::about`] and the supported CNI versions on stdout and exits 0, for
/// operators.
pub fn plugin_main<P: Plugin>(plugin: &P) -> ! {
    tern_node::phase::init();
    let start = Instant::now();
    let mut args = std::env::args_os().skip(1);
    if let (Some(a), None) = (args.next(), args.next()) {
        if a == "--version" {
            println!("{}", plugin.about());
            println!(
                "CNI protocol versions supported: {}",
                Version::ALL.map(|v| v.as_str()).join(", ")
            );
            std::process::exit(0);
        }
    }
    // Unlocked handles: a handler's helper threads (tern's IPAM thread forwards its delegate's
    // stderr) write to the same streams; each write takes the lock for itself only.
    let code = dispatch_code(
        plugin,
        &ProcessEnv,
        &mut std::io::stdin(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    );
    let verb = ProcessEnv
        .var("CNI_COMMAND")
        .and_then(|c| Verb::parse(&c).ok());
    if let (Some(name), Some(verb)) = (plugin.report_as(), verb) {
        VerbReport::new(name, verb.as_str(), code, start.elapsed())
            .send_to(Path::new(REPORT_SOCKET));
    }
    tern_node::phase::mark("report");
    if tern_node::phase::on() {
        tern_node::phase::finish(&std::env::var("CNI_COMMAND").unwrap_or_default());
    }
    std::process::exit(i32::from(code != 0))
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
    i32::from(dispatch_code(plugin, env, stdin, stdout, stderr) != 0)
}

/// [`dispatch`], returning the result code: 0 on success, else the error's code (never 0: an
/// error carrying code 0 counts as 999, as it is "other").
fn dispatch_code<P: Plugin + ?Sized>(
    plugin: &P,
    env: &dyn EnvSource,
    stdin: &mut dyn Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> u32 {
    let mut version_for_errors = Version::LATEST;
    match run(plugin, env, stdin, stdout, stderr, &mut version_for_errors) {
        Ok(()) => 0,
        Err(e) => {
            log_failure(env, &e);
            let _ = writeln!(stdout, "{}", e.to_json(version_for_errors.as_str()));
            let _ = stdout.flush();
            if e.code == 0 {
                999
            } else {
                e.code
            }
        }
    }
}

/// Logs a failed verb (once the config named a log, else nowhere: stdout carries the error): the
/// command, the container ID (quoted, at most 128 characters: it is not validated yet when an early
/// check fails), the code, the message and details. Errors never carry a token.
fn log_failure(env: &dyn EnvSource, e: &Error) {
    let clip = |k: &str| {
        let v = env.var(k).unwrap_or_default();
        v.chars().take(128).collect::<String>()
    };
    tracing::error!(
        command = ?clip("CNI_COMMAND"),
        container_id = ?clip("CNI_CONTAINERID"),
        code = e.code,
        details = ?e.details,
        "verb failed: {}",
        e.msg
    );
}

fn supported_versions_json() -> Value {
    Value::from(Version::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>())
}

fn non_empty(env: &dyn EnvSource, key: &str) -> Option<String> {
    env.var(key).filter(|v| !v.is_empty())
}

/// The dispatcher's checks in the reference order, then the verb.
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
    let command = Verb::parse(&cmd)?;
    if command == Verb::Version {
        return answer_version(stdin, stdout);
    }
    let ids = check_env(env, command)?;
    let config = read_config(stdin, command)?;
    *version_for_errors = config.cni_version;
    check_version_allows(command, config.cni_version)?;
    let cni_path = env.var("CNI_PATH").unwrap_or_default();
    match ids {
        None => run_network_verb(plugin, command, cni_path, config),
        Some((container_id, ifname)) => {
            let netns = check_netns(env)?;
            let args_raw = env.var("CNI_ARGS").unwrap_or_default();
            let args = CniArgs::parse(&args_raw)?;
            let input = AttachmentInput {
                container_id,
                netns,
                ifname,
                args,
                args_raw,
                cni_path,
                config,
            };
            run_attachment_verb(plugin, command, input, stdout)
        }
    }
}

/// The variables `command` requires (code 4), and for ADD, CHECK and DEL the container ID and
/// ifname, validated (codes 3/4); `None` for STATUS and GC.
fn check_env(env: &dyn EnvSource, command: Verb) -> Result<Option<(ContainerId, IfName)>, Error> {
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
    if !matches!(command, Verb::Add | Verb::Check | Verb::Del) {
        return Ok(None);
    }
    let container_id = ContainerId::parse(&env.var("CNI_CONTAINERID").unwrap_or_default())?;
    let ifname = IfName::parse(&env.var("CNI_IFNAME").unwrap_or_default())?;
    Ok(Some((container_id, ifname)))
}

/// Reads and parses the netconf from stdin, once for the verb (DEL leniently: `parse_for_del`),
/// then starts the log it names.
fn read_config(stdin: &mut dyn Read, command: Verb) -> Result<NetConf, Error> {
    let bytes = read_bounded(stdin)?;
    let config = if command == Verb::Del {
        NetConf::parse_for_del(bytes)?
    } else {
        NetConf::parse(bytes)?
    };
    tern_node::phase::mark("netconf");
    tern_node::logging::init(
        config.log_level.as_deref(),
        config.log_file.as_deref(),
        config.log_file_max_bytes,
    );
    tern_node::phase::mark("log-init");
    if !config.ignored.is_empty() {
        // DEL reads only what it needs to find and release what ADD made (parse_for_del).
        tracing::warn!(
            ignored = %config.ignored.join("; "),
            "DEL: ignoring fields it does not need, whose values ADD refuses"
        );
    }
    Ok(config)
}

/// Code 1 when the config's version lacks the verb (CHECK before 0.4.0, STATUS and GC before
/// 1.1.0).
fn check_version_allows(command: Verb, v: Version) -> Result<(), Error> {
    match command {
        Verb::Check if !v.allows_check() => Err(Error::new(
            code::INCOMPATIBLE_VERSION,
            "config version does not allow CHECK",
        )
        .with_details(format!(
            "CHECK needs cniVersion 0.4.0 or later, the config is {v}"
        ))),
        Verb::Status | Verb::Gc if !v.allows_status_and_gc() => Err(Error::new(
            code::INCOMPATIBLE_VERSION,
            format!("config version does not allow {command}"),
        )
        .with_details(format!(
            "{command} needs cniVersion 1.1.0 or later, the config is {v}"
        ))),
        _ => Ok(()),
    }
}

/// STATUS or GC: verbs of the network, not of one attachment.
fn run_network_verb<P: Plugin + ?Sized>(
    plugin: &P,
    command: Verb,
    cni_path: String,
    config: NetConf,
) -> Result<(), Error> {
    let span = tracing::info_span!("cni", command = command.as_str(), network = %config.name);
    let _guard = span.enter();
    match command {
        Verb::Status => plugin.status(&StatusInput { cni_path, config }),
        _ => {
            let valid_attachments = parse_valid_attachments(&config)?;
            plugin.gc(&GcInput {
                cni_path,
                config,
                valid_attachments,
            })
        }
    }
}

/// `CNI_NETNS` when set; code 8 when it is the plugin's own netns (unless `CNI_NETNS_OVERRIDE`).
fn check_netns(env: &dyn EnvSource) -> Result<Option<PathBuf>, Error> {
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
    Ok(netns)
}

/// ADD, CHECK or DEL of one attachment, in its span; ADD's result printed on `stdout`.
fn run_attachment_verb<P: Plugin + ?Sized>(
    plugin: &P,
    command: Verb,
    input: AttachmentInput<Option<PathBuf>>,
    stdout: &mut dyn Write,
) -> Result<(), Error> {
    let span = tracing::info_span!(
        "cni",
        command = command.as_str(),
        container_id = input.container_id.as_str(),
        ifname = input.ifname.as_str()
    );
    let _guard = span.enter();
    tracing::debug!(network = %input.config.name, cni_version = %input.config.cni_version, "invoked");
    tern_node::phase::mark("env-checks");
    if command == Verb::Del {
        return plugin.del(&input);
    }
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
    let input = AttachmentInput {
        container_id,
        netns: netns.unwrap_or_default(),
        ifname,
        args,
        args_raw,
        cni_path,
        config,
    };
    match command {
        Verb::Add => {
            let result = plugin.add(&input)?;
            let out = result.to_json(input.config.cni_version);
            let r = writeln!(stdout, "{out}")
                .and_then(|()| stdout.flush())
                .map_err(|e| Error::io(format!("write result to stdout: {e}")));
            tern_node::phase::mark("result");
            r
        }
        Verb::Check => plugin.check(&input),
        _ => Ok(()),
    }
}

/// VERSION: `{cniVersion, supportedVersions}`. `cniVersion` echoes the config's when stdin holds a
/// supported one (CNI spec "VERSION"), else the newest; stdin is otherwise ignored.
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

/// `cni.dev/valid-attachments` (else the older `cni.dev/attachments`): absent is no list; `null`
/// is an empty list, as libcni sends it when the runtime has no sandbox (a Go nil slice: CRI-O
/// after a restart with none restored), and as the reference plugins read it.
fn parse_valid_attachments(config: &NetConf) -> Result<Option<Vec<ValidAttachment>>, Error> {
    let v = config
        .raw
        .get("cni.dev/valid-attachments")
        .or_else(|| config.raw.get("cni.dev/attachments"));
    match v {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(Vec::new())),
        Some(v) => crate::json::from_value(v.clone()).map(Some).map_err(|e| {
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

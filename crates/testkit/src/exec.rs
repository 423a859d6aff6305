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

/// The workspace root: two levels above this crate's manifest (`crates/testkit`).
pub fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or(here)
}

/// Directory holding the built tern binaries: `$TERN_BIN_DIR`, else the `release` directory
/// beside the running test's profile directory (`target/<triple>/release` when the build names
/// its target, as `.cargo/config.toml` does; `target/release` otherwise).
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TERN_BIN_DIR") {
        return PathBuf::from(d);
    }
    // A test binary lives in `<target dir>/<profile>/deps/`.
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join("release")))
        .filter(|d| d.is_dir())
        .unwrap_or_else(|| workspace_root().join("target/release"))
}

/// Directory holding the reference CNI plugins (host-local, ptp, tuning...):
/// `$TERN_REF_PLUGINS`, else Debian's `/usr/lib/cni`.
pub fn ref_plugin_dir() -> PathBuf {
    std::env::var_os("TERN_REF_PLUGINS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/cni"))
}

/// The libcni driver binary: `$TERN_CNITOOL`, else `<workspace>/tests/cnitool/cnitool`.
pub fn cnitool_path() -> PathBuf {
    std::env::var_os("TERN_CNITOOL")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("tests/cnitool/cnitool"))
}

/// The default `CNI_PATH` for tests: the tern bin dir, then the reference plugin dir.
pub fn default_cni_path() -> String {
    format!("{}:{}", bin_dir().display(), ref_plugin_dir().display())
}

/// Finds a plugin by name: in [`bin_dir`] first, then [`ref_plugin_dir`]. A name containing `/`
/// is returned as is. When found nowhere, returns the [`bin_dir`] path (the spawn then fails
/// with a clear [`ExecError::Spawn`]).
pub fn plugin_path(name: &str) -> PathBuf {
    if name.contains('/') {
        return PathBuf::from(name);
    }
    let ours = bin_dir().join(name);
    if ours.is_file() {
        return ours;
    }
    let reference = ref_plugin_dir().join(name);
    if reference.is_file() {
        return reference;
    }
    ours
}

/// Builds a conflist: `{"cniVersion": version, "name": name, "plugins": plugins}`.
pub fn conflist(name: &str, version: &str, plugins: Vec<Value>) -> Value {
    json!({ "cniVersion": version, "name": name, "plugins": plugins })
}

/// A container ID unique within this test process run: `tern-test-<pid>-<n>`.
pub fn unique_container_id() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "tern-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
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
/// With `etc_cni`, the whole thing runs in a private mount namespace (`unshare --mount
/// --propagation private`) where that directory is bind-mounted over `/etc/cni`, so fixed paths
/// such as tern-tuning's `/etc/cni/tuning/allowlist.conf` are per test: the machine's `/etc/cni`
/// is never written and tests cannot race on it. `sh` execs the rest in place, so the pid is
/// still the program's.
fn command_in(netns: Option<&str>, program: &Path, etc_cni: Option<&Path>) -> Command {
    let mut cmd = match etc_cni {
        None => return command_in_netns(netns, program),
        Some(dir) => {
            let mut cmd = Command::new("unshare");
            cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg("mount --bind \"$0\" /etc/cni && exec \"$@\"")
                .arg(dir);
            cmd
        }
    };
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

/// One direct invocation of a plugin binary, as a runtime makes it (CNI spec section 3).
///
/// Defaults: `CNI_COMMAND` as given, `CNI_CONTAINERID` a fresh [`unique_container_id`],
/// `CNI_IFNAME=eth0`, `CNI_PATH` = [`default_cni_path`]; `CNI_NETNS` and `CNI_ARGS` unset; empty
/// stdin. Any variable can be set or unset, and stdin can be any bytes.
#[derive(Debug, Clone)]
pub struct PluginCall {
    program: PathBuf,
    env: BTreeMap<String, Option<OsString>>,
    stdin: Vec<u8>,
    timeout: Duration,
    host_netns: Option<String>,
    etc_cni: Option<PathBuf>,
}

impl PluginCall {
    /// A call of `plugin` (a name resolved by [`plugin_path`], or a path) with `CNI_COMMAND=command`.
    pub fn new(plugin: &str, command: &str) -> Self {
        let mut env = BTreeMap::new();
        env.insert("CNI_COMMAND".to_owned(), Some(command.into()));
        env.insert(
            "CNI_CONTAINERID".to_owned(),
            Some(unique_container_id().into()),
        );
        env.insert("CNI_IFNAME".to_owned(), Some("eth0".into()));
        env.insert("CNI_PATH".to_owned(), Some(default_cni_path().into()));
        Self {
            program: plugin_path(plugin),
            env,
            stdin: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            host_netns: None,
            etc_cni: None,
        }
    }

    /// Runs the plugin with `dir` bind-mounted over `/etc/cni` in a private mount namespace
    /// (e.g. a per-test `tuning/allowlist.conf`); the machine's `/etc/cni` is untouched.
    pub fn etc_cni(mut self, dir: impl AsRef<Path>) -> Self {
        self.etc_cni = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Runs the plugin inside the named netns (`ip netns exec <name> plugin`): the netns plays
    /// the node's root namespace, so the real host is never touched.
    pub fn in_netns(mut self, name: &str) -> Self {
        self.host_netns = Some(name.to_owned());
        self
    }

    /// The binary that will be executed.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Sets an environment variable (any name, any value, including empty).
    pub fn env(mut self, key: &str, value: impl Into<OsString>) -> Self {
        self.env.insert(key.to_owned(), Some(value.into()));
        self
    }

    /// Removes an environment variable from the child's environment.
    pub fn unset(mut self, key: &str) -> Self {
        self.env.insert(key.to_owned(), None);
        self
    }

    /// Sets `CNI_CONTAINERID`.
    pub fn container_id(self, id: &str) -> Self {
        self.env("CNI_CONTAINERID", id)
    }

    /// Sets `CNI_NETNS` to a netns path (e.g. `/var/run/netns/<name>`).
    pub fn netns(self, path: impl AsRef<Path>) -> Self {
        self.env("CNI_NETNS", path.as_ref().as_os_str())
    }

    /// Sets `CNI_IFNAME`.
    pub fn ifname(self, name: &str) -> Self {
        self.env("CNI_IFNAME", name)
    }

    /// Sets `CNI_ARGS` (raw, e.g. `K8S_POD_NAME=a;K8S_POD_NAMESPACE=b`).
    pub fn args(self, args: &str) -> Self {
        self.env("CNI_ARGS", args)
    }

    /// Sets `CNI_PATH` (`:`-separated directories).
    pub fn path(self, path: &str) -> Self {
        self.env("CNI_PATH", path)
    }

    /// Sets stdin to the serialized netconf.
    ///
    /// # Errors
    /// [`ExecError::Json`] if `conf` cannot be serialized.
    pub fn netconf(mut self, conf: &Value) -> Result<Self, ExecError> {
        self.stdin = serde_json::to_vec(conf)?;
        Ok(self)
    }

    /// Sets stdin to raw bytes (not necessarily JSON).
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = bytes.into();
        self
    }

    /// Sets the deadline after which the plugin is killed.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The configured [`Command`] without stdin/stdout wiring, for tests that spawn it themselves
    /// (e.g. in its own process group to kill it midway).
    pub fn command(&self) -> Command {
        let mut cmd = command_in(
            self.host_netns.as_deref(),
            &self.program,
            self.etc_cni.as_deref(),
        );
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        for (k, v) in &self.env {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        cmd
    }

    /// Runs the plugin to completion.
    ///
    /// # Errors
    /// [`ExecError::Spawn`] when the binary cannot start, [`ExecError::Timeout`] past the deadline,
    /// [`ExecError::Io`] on pipe failures. A plugin that exits non-zero is not an error: inspect
    /// [`RunOutput::status`].
    pub fn run(&self) -> Result<RunOutput, ExecError> {
        run_with_timeout(self.command(), &self.stdin, self.timeout)
    }
}

/// The libcni driver (`tests/cnitool`) with a private conf dir and result cache.
///
/// Layout of its temp dir ([`Cnitool::scratch`]): `net.d/` (the conflist), `cache/` (libcni's
/// `CNI_CACHE_DIR`); tests may put other things there, such as host-local's `dataDir`. The temp dir
/// is removed on drop.
#[derive(Debug)]
pub struct Cnitool {
    dir: tempfile::TempDir,
    network: Option<String>,
    cni_path: String,
    container_id: String,
    ifname: String,
    cni_args: Option<String>,
    cap_args: Option<Value>,
    timeout: Duration,
    host_netns: Option<String>,
    etc_cni: Option<PathBuf>,
}

impl Cnitool {
    /// A driver with empty conf and cache dirs, `CNI_PATH` = [`default_cni_path`], a fresh
    /// [`unique_container_id`] and ifname `eth0`.
    ///
    /// # Errors
    /// [`ExecError::Io`] when the temp dirs cannot be created.
    pub fn new() -> Result<Self, ExecError> {
        let dir = tempfile::Builder::new()
            .prefix("tern-cnitool-")
            .tempdir()
            .map_err(io_err("create cnitool temp dir"))?;
        for sub in ["net.d", "cache"] {
            std::fs::create_dir(dir.path().join(sub)).map_err(io_err(format!("create {sub}")))?;
        }
        Ok(Self {
            dir,
            network: None,
            cni_path: default_cni_path(),
            container_id: unique_container_id(),
            ifname: "eth0".to_owned(),
            cni_args: None,
            cap_args: None,
            timeout: DEFAULT_TIMEOUT,
            host_netns: None,
            etc_cni: None,
        })
    }

    /// [`Cnitool::new`] then [`Cnitool::write_conflist`].
    ///
    /// # Errors
    /// As those two.
    pub fn with_conflist(conflist: &Value) -> Result<Self, ExecError> {
        let mut tool = Self::new()?;
        tool.write_conflist(conflist)?;
        Ok(tool)
    }

    /// Writes `conflist` as `net.d/10-<name>.conflist` (replacing any earlier one) and makes its
    /// `name` the network that [`Cnitool::add`] and friends use.
    ///
    /// # Errors
    /// [`ExecError::Io`] on write failure, [`ExecError::Json`] on serialization failure.
    pub fn write_conflist(&mut self, conflist: &Value) -> Result<&mut Self, ExecError> {
        let name = conflist
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("unnamed")
            .to_owned();
        let conf_dir = self.conf_dir();
        if let Ok(entries) = std::fs::read_dir(&conf_dir) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let path = conf_dir.join(format!("10-{name}.conflist"));
        std::fs::write(&path, serde_json::to_vec_pretty(conflist)?)
            .map_err(io_err(format!("write {}", path.display())))?;
        self.network = Some(name);
        Ok(self)
    }

    /// The temp dir owned by this driver.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// The conf dir passed as `NETCONFPATH`.
    pub fn conf_dir(&self) -> PathBuf {
        self.dir.path().join("net.d")
    }

    /// The libcni cache dir passed as `CNI_CACHE_DIR`.
    pub fn cache_dir(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// The container ID used for ADD/CHECK/DEL.
    pub fn get_container_id(&self) -> &str {
        &self.container_id
    }

    /// Sets the container ID.
    pub fn container_id(&mut self, id: &str) -> &mut Self {
        id.clone_into(&mut self.container_id);
        self
    }

    /// Sets the interface name.
    pub fn ifname(&mut self, name: &str) -> &mut Self {
        name.clone_into(&mut self.ifname);
        self
    }

    /// Sets `CNI_ARGS` (`K=V;K2=V2`); `None` unsets it.
    pub fn cni_args(&mut self, args: Option<&str>) -> &mut Self {
        self.cni_args = args.map(str::to_owned);
        self
    }

    /// Sets the capability args (a JSON object, e.g. `{"ips": ["10.99.0.9/24"]}`).
    pub fn cap_args(&mut self, args: Option<Value>) -> &mut Self {
        self.cap_args = args;
        self
    }

    /// Sets `CNI_PATH`.
    pub fn cni_path(&mut self, path: &str) -> &mut Self {
        path.clone_into(&mut self.cni_path);
        self
    }

    /// Sets the deadline after which cnitool is killed.
    pub fn timeout(&mut self, timeout: Duration) -> &mut Self {
        self.timeout = timeout;
        self
    }

    /// Runs cnitool (and every plugin it execs) with `dir` bind-mounted over `/etc/cni` in a
    /// private mount namespace (e.g. a per-test `tuning/allowlist.conf`); `None` turns it off.
    pub fn etc_cni(&mut self, dir: Option<&Path>) -> &mut Self {
        self.etc_cni = dir.map(Path::to_path_buf);
        self
    }

    /// Runs cnitool (and so every plugin libcni execs) inside the named netns, which plays the
    /// node's root namespace; `None` runs it in the test's own netns.
    pub fn in_netns(&mut self, name: Option<&str>) -> &mut Self {
        self.host_netns = name.map(str::to_owned);
        self
    }

    /// The configured [`Command`] for `verb` (`add`, `check`, `del`, `version`), for tests that
    /// spawn it themselves. `netns` is required for all verbs but `version`.
    pub fn command(&self, verb: &str, netns: Option<&Path>) -> Command {
        let mut cmd = command_in(
            self.host_netns.as_deref(),
            &cnitool_path(),
            self.etc_cni.as_deref(),
        );
        cmd.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        cmd.env("NETCONFPATH", self.conf_dir())
            .env("CNI_CACHE_DIR", self.cache_dir())
            .env("CNI_PATH", &self.cni_path)
            .env("CNI_CONTAINERID", &self.container_id)
            .env("CNI_IFNAME", &self.ifname);
        if let Some(a) = &self.cni_args {
            cmd.env("CNI_ARGS", a);
        }
        if let Some(c) = &self.cap_args {
            cmd.env("CAP_ARGS", c.to_string());
        }
        cmd.arg(verb)
            .arg(self.network.as_deref().unwrap_or("unnamed"));
        if let Some(ns) = netns {
            cmd.arg(ns);
        }
        cmd
    }

    fn run(&self, verb: &str, netns: Option<&Path>) -> Result<RunOutput, ExecError> {
        run_with_timeout(self.command(verb, netns), &[], self.timeout)
    }

    /// `cnitool add NETWORK NETNS`: stdout is the result JSON, or the error JSON.
    ///
    /// # Errors
    /// As [`PluginCall::run`].
    pub fn add(&self, netns: impl AsRef<Path>) -> Result<RunOutput, ExecError> {
        self.run("add", Some(netns.as_ref()))
    }

    /// `cnitool check NETWORK NETNS`: empty stdout on success.
    ///
    /// # Errors
    /// As [`PluginCall::run`].
    pub fn check(&self, netns: impl AsRef<Path>) -> Result<RunOutput, ExecError> {
        self.run("check", Some(netns.as_ref()))
    }

    /// `cnitool del NETWORK NETNS`: empty stdout on success.
    ///
    /// # Errors
    /// As [`PluginCall::run`].
    pub fn del(&self, netns: impl AsRef<Path>) -> Result<RunOutput, ExecError> {
        self.run("del", Some(netns.as_ref()))
    }

    /// `cnitool version NETWORK`: `{"<type>": ["0.1.0", ...], ...}` for each plugin in the list.
    ///
    /// # Errors
    /// As [`PluginCall::run`].
    pub fn version(&self) -> Result<RunOutput, ExecError> {
        self.run("version", None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflist_shape() {
        let c = conflist("n", "1.0.0", vec![json!({"type": "ptp"})]);
        assert_eq!(c["name"], "n");
        assert_eq!(c["cniVersion"], "1.0.0");
        assert_eq!(c["plugins"][0]["type"], "ptp");
    }

    #[test]
    fn unique_ids_differ() {
        assert_ne!(unique_container_id(), unique_container_id());
    }

    #[test]
    fn plugin_call_env_set_and_unset() {
        let call = PluginCall::new("/bin/sh", "ADD")
            .unset("CNI_IFNAME")
            .env("CNI_ARGS", "A=1")
            .netns("/var/run/netns/x");
        let cmd = call.command();
        let envs: BTreeMap<_, _> = cmd
            .get_envs()
            .map(|(k, v)| (k.to_os_string(), v.map(|v| v.to_os_string())))
            .collect();
        assert_eq!(
            envs.get(&OsString::from("CNI_COMMAND")),
            Some(&Some("ADD".into()))
        );
        assert_eq!(
            envs.get(&OsString::from("CNI_ARGS")),
            Some(&Some("A=1".into()))
        );
        assert!(!envs.contains_key(&OsString::from("CNI_IFNAME")));
    }

    #[test]
    fn run_passes_stdin_env_and_parses_json() {
        // /bin/sh stands in for a plugin: echoes the env and stdin back as JSON.
        let out = PluginCall::new("/bin/sh", "VERSION")
            .env("X", "y")
            .stdin(b"echo \"{\\\"cmd\\\":\\\"$CNI_COMMAND\\\",\\\"x\\\":\\\"$X\\\"}\"; echo oops >&2; exit 3".to_vec())
            .run()
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.json, Some(json!({"cmd": "VERSION", "x": "y"})));
        assert_eq!(out.stderr, "oops\n");
    }

    #[test]
    fn run_times_out() {
        let err = PluginCall::new("/bin/sh", "ADD")
            .stdin(b"sleep 5".to_vec())
            .timeout(Duration::from_millis(200))
            .run()
            .unwrap_err();
        assert!(matches!(err, ExecError::Timeout { .. }), "{err}");
    }

    #[test]
    fn missing_binary_is_spawn_error() {
        let err = PluginCall::new("/nonexistent/plugin", "ADD")
            .run()
            .unwrap_err();
        assert!(matches!(err, ExecError::Spawn { .. }), "{err}");
    }
}

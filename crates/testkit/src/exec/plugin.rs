//! [`PluginCall`]: one plugin binary exec'd directly, as CNI spec section 3 describes a runtime doing.

use super::*;

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
    run_tern: Option<PathBuf>,
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
            run_tern: None,
        }
    }

    /// Runs the plugin with `dir` bind-mounted over `/etc/cni` in a private mount namespace
    /// (e.g. a per-test `tuning/allowlist.conf`); the machine's `/etc/cni` is untouched.
    pub fn etc_cni(mut self, dir: impl AsRef<Path>) -> Self {
        self.etc_cni = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Runs the plugin with `dir` bind-mounted over `/run/tern` in a private mount namespace, so
    /// its verb report (sent to the fixed `/run/tern/metrics.sock`) reaches a test's receiver.
    pub fn run_tern(mut self, dir: impl AsRef<Path>) -> Self {
        self.run_tern = Some(dir.as_ref().to_path_buf());
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
            &[(&self.etc_cni, "/etc/cni"), (&self.run_tern, "/run/tern")]
                .into_iter()
                .filter_map(|(d, at)| d.as_deref().map(|d| (d, at)))
                .collect::<Vec<_>>(),
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

//! [`Cnitool`]: the libcni driver (`tests/cnitool`) with a private conf dir and result cache.

use super::*;

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
    run_tern: Option<PathBuf>,
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
            run_tern: None,
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

    /// Runs cnitool (and every plugin it execs) with `dir` bind-mounted over `/run/tern` in a
    /// private mount namespace, so the plugins' verb reports (sent to the fixed
    /// `/run/tern/metrics.sock`) reach a test's own receiver; `None` turns it off.
    pub fn run_tern(&mut self, dir: Option<&Path>) -> &mut Self {
        self.run_tern = dir.map(Path::to_path_buf);
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
            &[(&self.etc_cni, "/etc/cni"), (&self.run_tern, "/run/tern")]
                .into_iter()
                .filter_map(|(d, at)| d.as_deref().map(|d| (d, at)))
                .collect::<Vec<_>>(),
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

//! The real-cluster tier's support for its cases (tests/cluster/tests/cluster): the node's layout
//! as `tests/cluster/node.sh vars` prints it, the shell functions the cases call (restart the API
//! server, stop the kubelet), and `kubectl`/`crictl` run with every command and its output logged
//! to the case's log.
//!
//! Invariant: every command a case runs is checked: a non-zero exit is an `Err` carrying the
//! command and its stderr, never a value to compare (no pipeline can swallow a failure here).
//! The cluster itself is brought up and torn down by node.sh (`up`/`down`).

mod apiserver;
pub mod conformance;
pub mod node2;
pub mod pods;

use std::collections::HashMap;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A case's outcome: `Err` holds what failed, for libtest's failure list.
pub type Res<T = ()> = Result<T, String>;

/// The last `n` lines of `path`, each prefixed with `    | `.
pub fn tail(path: &std::path::Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| format!("    | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first `n` error lines of a component's log `path` (klog's `E`/`F` lines, logrus'
/// `level=error`/`fatal`), each prefixed with `    | `: what a tail past them no longer shows.
pub fn errors(path: &std::path::Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let error = |l: &&str| {
        let b = l.as_bytes();
        let klog =
            b.len() > 5 && matches!(b[0], b'E' | b'F') && b[1..5].iter().all(u8::is_ascii_digit);
        klog || l.contains("level=error") || l.contains("level=fatal")
    };
    text.lines()
        .filter(error)
        .take(n)
        .map(|l| format!("    | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Fails a case with `msg` (as bash's `fail`).
pub fn fail<T>(msg: impl Into<String>) -> Res<T> {
    Err(msg.into())
}

/// The node's layout (tests/cluster/lib.sh's variables, read through `node.sh vars`) and the
/// case log every command writes to.
pub struct Node {
    vars: HashMap<String, String>,
    /// The repository root (deploy/, cargo xtask image).
    pub root: PathBuf,
    /// The instance directory (`$KT`, default /tmp/tern-cluster).
    pub kt: PathBuf,
    /// The node's name (`tern-node`).
    pub name: String,
    /// `containerd` or `crio` (TERN_CLUSTER_RUNTIME).
    pub runtime: String,
    /// The node's CNI config dir (`/etc/cni/net.d`).
    pub cni_net: PathBuf,
    /// The node's CNI bin dir (`/opt/cni/bin`).
    pub cni_bin: PathBuf,
    /// The path of `tern-cluster-crio-conf` handed to node.sh (TERN_CRIO_CONF).
    crio_conf: PathBuf,
    log: Mutex<Option<File>>,
}

impl Node {
    /// Reads the layout from `bash <root>/tests/cluster/node.sh vars`; `crio_conf` is the
    /// renderer CRI-O's bring-up runs.
    ///
    /// # Errors
    /// node.sh failing or lacking a variable.
    pub fn load(root: &Path, crio_conf: &Path) -> Res<Self> {
        let out = Command::new("bash")
            .arg(root.join("tests/cluster/node.sh"))
            .arg("vars")
            .output()
            .map_err(|e| format!("bash node.sh vars: {e}"))?;
        if !out.status.success() {
            return fail(format!(
                "node.sh vars: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let vars: HashMap<String, String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let get = |k: &str| {
            vars.get(k)
                .cloned()
                .ok_or_else(|| format!("node.sh vars printed no {k}"))
        };
        Ok(Self {
            root: root.to_owned(),
            kt: get("KT")?.into(),
            name: get("NODE")?,
            runtime: get("RUNTIME")?,
            cni_net: get("CNI_NET")?.into(),
            cni_bin: get("CNI_BIN")?.into(),
            crio_conf: crio_conf.to_owned(),
            vars,
            log: Mutex::new(None),
        })
    }

    /// A variable of lib.sh (`API`, `CLUSTER_CIDR`, `GOBIN_DIR`, ...), empty when unknown.
    pub fn var(&self, name: &str) -> &str {
        self.vars.get(name).map_or("", String::as_str)
    }

    /// Sends every later command's output to `path` (a case's log), truncating it.
    ///
    /// # Errors
    /// The file cannot be created.
    pub fn log_to(&self, path: &Path) -> Res {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        }
        let f = File::create(path).map_err(|e| format!("create {}: {e}", path.display()))?;
        *self.lock_log() = Some(f);
        Ok(())
    }

    /// Writes `line` to the case's log.
    pub fn note(&self, line: &str) {
        if let Some(f) = self.lock_log().as_mut() {
            // A lost log line must not fail the case it describes.
            let _ = writeln!(f, "{line}");
        }
    }

    fn lock_log(&self) -> std::sync::MutexGuard<'_, Option<File>> {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `cmd` (with `stdin` when given), logs it and its output; its stdout on success.
    ///
    /// # Errors
    /// The command cannot start or exits non-zero: its line, status and stderr.
    pub fn run(&self, cmd: &mut Command, stdin: Option<&str>) -> Res<String> {
        let line = format!("{cmd:?}");
        self.note(&format!("$ {line}"));
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("{line}: {e}"))?;
        if let (Some(text), Some(mut w)) = (stdin, child.stdin.take()) {
            w.write_all(text.as_bytes())
                .map_err(|e| format!("{line}: write stdin: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("{line}: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        for l in stdout.lines().chain(stderr.lines()) {
            self.note(&format!("  | {l}"));
        }
        if !out.status.success() {
            return fail(format!("{line}: {}: {}", out.status, stderr.trim()));
        }
        Ok(stdout)
    }

    /// Runs `cmd` and says whether it succeeded (logged as [`Node::run`]).
    pub fn ok(&self, cmd: &mut Command) -> bool {
        self.run(cmd, None).is_ok()
    }

    /// `kubectl` with the admin kubeconfig.
    pub fn kubectl_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(Path::new(self.var("K8S_BIN")).join("kubectl"));
        c.arg("--kubeconfig")
            .arg(self.kt.join("pki/admin.kubeconfig"))
            .args(args);
        c
    }

    /// `kubectl ARGS`: its stdout.
    ///
    /// # Errors
    /// As [`Node::run`].
    pub fn kubectl(&self, args: &[&str]) -> Res<String> {
        self.run(&mut self.kubectl_cmd(args), None)
    }

    /// `kubectl ARGS` with `input` on stdin (`apply -f -`).
    ///
    /// # Errors
    /// As [`Node::run`].
    pub fn kubectl_in(&self, args: &[&str], input: &str) -> Res<String> {
        self.run(&mut self.kubectl_cmd(args), Some(input))
    }

    /// `crictl ARGS` on the node's runtime (`$CRI_SOCK`, no config file).
    ///
    /// # Errors
    /// As [`Node::run`].
    pub fn crictl(&self, args: &[&str]) -> Res<String> {
        let sock = format!("unix://{}", self.var("CRI_SOCK"));
        let mut c = Command::new(Path::new(self.var("GOBIN_DIR")).join("cri-tools/crictl"));
        c.args(["--runtime-endpoint", &sock, "--image-endpoint", &sock])
            .args(["--timeout", "30s", "--config", "/dev/null"])
            .args(args);
        self.run(&mut c, None)
    }

    /// `bash tests/cluster/node.sh ARGS` with `env` added: bring-up, teardown, or one of
    /// lib.sh's functions (`start_apiserver`, `stop kubelet`, ...), under errexit.
    ///
    /// # Errors
    /// As [`Node::run`].
    pub fn sh(&self, args: &[&str], env: &[(&str, &str)]) -> Res<String> {
        let mut c = Command::new("bash");
        c.arg(self.root.join("tests/cluster/node.sh"))
            .args(args)
            .env("KT", &self.kt)
            .env("TERN_CLUSTER_RUNTIME", &self.runtime)
            .env("TERN_CRIO_CONF", &self.crio_conf)
            .envs(env.iter().copied());
        self.run(&mut c, None)
    }

    /// `cmd ARGS` as a [`Command`].
    pub fn cmd(program: &str, args: &[&str]) -> Command {
        let mut c = Command::new(program);
        c.args(args);
        c
    }

    /// Retries `check` every 0.5 s for up to `secs` seconds until it holds.
    ///
    /// # Errors
    /// "timed out after N s waiting for WHAT".
    pub fn wait_for(&self, secs: u64, what: &str, mut check: impl FnMut() -> bool) -> Res {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            if check() {
                return Ok(());
            }
            if Instant::now() >= end {
                let msg = format!("timed out after {secs}s waiting for: {what}");
                self.note(&msg);
                return fail(msg);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logs_errors_are_klogs_e_and_f_lines_and_logrus_error_levels() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        std::fs::write(
            &log,
            "I1207 06:29:28.39 1 server.go:1262] \"Started kubelet\"\n\
             E1207 06:29:28.39 1 server.go:1258] \"Failed to set rlimit\"\n\
             Everything fine\n\
             time=\"x\" level=info msg=\"ok\"\n\
             time=\"x\" level=error msg=\"bad\"\n\
             F1207 06:29:29.00 1 x.go:1] fatal\n",
        )
        .unwrap();
        let got = errors(&log, 15);
        let lines: Vec<&str> = got.lines().collect();
        assert_eq!(lines.len(), 3, "{got}");
        assert!(
            lines[0].contains("rlimit") && lines[1].contains("level=error"),
            "{got}"
        );
        assert!(lines[2].contains("fatal"), "{got}");
        assert_eq!(errors(&log, 1).lines().count(), 1);
    }

    fn node() -> Node {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        Node::load(&root, Path::new("/nonexistent")).unwrap()
    }

    #[test]
    fn layout_comes_from_lib_sh() {
        let n = node();
        assert_eq!(n.var("CLUSTER_CIDR"), "10.99.210.0/23");
        assert_eq!(n.cni_net, Path::new("/etc/cni/net.d"));
        assert!(n.var("API").starts_with("https://"), "{}", n.var("API"));
    }

    #[test]
    fn a_failing_command_is_an_error_with_its_stderr() {
        let n = node();
        let e = n
            .run(
                &mut Node::cmd("sh", &["-c", "echo out; echo why >&2; exit 3"]),
                None,
            )
            .unwrap_err();
        assert!(e.contains("why") && e.contains('3'), "{e}");
        assert_eq!(n.run(&mut Node::cmd("cat", &[]), Some("in")).unwrap(), "in");
        assert!(!n.ok(&mut Node::cmd("false", &[])));
    }

    #[test]
    fn wait_for_times_out_with_what_it_waited_for() {
        let e = node().wait_for(1, "never", || false).unwrap_err();
        assert!(e.contains("timed out after 1s waiting for: never"), "{e}");
    }
}

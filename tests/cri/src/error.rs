//! The one error type of this crate: which step failed, with its cause.

use std::path::PathBuf;

/// Everything that can fail while driving a private containerd through the CRI.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// A file system operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// The operation ("create dir", "write config", ...).
        what: &'static str,
        /// The path it was applied to.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A helper program could not be started.
    #[error("cannot run {program}: {source} (run scripts/setup?)")]
    Spawn {
        /// The program name.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A helper program exited unsuccessfully.
    #[error("{command} failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// Its standard error.
        stderr: String,
    },
    /// The tokio runtime for the client could not be built.
    #[error("build the client's runtime: {0}")]
    Runtime(std::io::Error),
    /// Connecting to the CRI socket failed.
    #[error("connect to CRI socket {}: {source}", socket.display())]
    Connect {
        /// The socket path.
        socket: PathBuf,
        /// The transport error.
        source: tonic::transport::Error,
    },
    /// A CRI call returned a gRPC error.
    #[error("CRI {rpc}: {} {}", status.code(), status.message())]
    Rpc {
        /// The method name (`RunPodSandbox`, ...).
        rpc: &'static str,
        /// The gRPC status containerd returned.
        status: Box<tonic::Status>,
    },
    /// A CRI call or a wait did not finish within its deadline.
    #[error("{what} did not finish within {secs} s")]
    Timeout {
        /// What was waited for.
        what: String,
        /// The deadline, in seconds.
        secs: u64,
    },
    /// The runtime exited during start-up.
    #[error("{program} exited during start-up ({status}); its log {}:\n{log}", log_path.display())]
    Exited {
        /// The runtime (`containerd`, `CRI-O`).
        program: &'static str,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The log file.
        log_path: PathBuf,
        /// The log's tail.
        log: String,
    },
    /// A JSON document containerd returned did not have the expected shape.
    #[error("unexpected {what}: {detail}")]
    Shape {
        /// The document.
        what: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// JSON (de)serialization failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

impl CriError {
    /// An [`CriError::Io`] builder for `map_err`.
    pub fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> CriError {
        let path = path.into();
        move |source| CriError::Io { what, path, source }
    }

    /// The gRPC message when this is an [`CriError::Rpc`], else the display text.
    pub fn message(&self) -> String {
        match self {
            CriError::Rpc { status, .. } => status.message().to_owned(),
            other => other.to_string(),
        }
    }
}

//! The crate's error type and the Kubernetes `metav1.Status` body it decodes.
//!
//! Invariant: no variant ever carries a bearer token; messages come from the server's
//! Status body, from paths, or from transport errors (which never see the token).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A `metav1.Status` error body (`staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Always `"Status"` for a Status body.
    #[serde(default)]
    pub kind: String,
    /// `"Failure"` for errors.
    #[serde(default)]
    pub status: String,
    /// Human-readable description, e.g. `pods "web-0" not found`.
    #[serde(default)]
    pub message: String,
    /// Machine-readable reason, e.g. `NotFound`, `Forbidden`, `Invalid`.
    #[serde(default)]
    pub reason: String,
    /// The HTTP code repeated in the body.
    #[serde(default)]
    pub code: u16,
}

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The kubeconfig could not be read or is malformed.
    #[error("kubeconfig {path}: {reason}")]
    Kubeconfig {
        /// The kubeconfig path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A file other than the kubeconfig could not be read or written.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`read`, `write`, `rename`, ...).
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// 401: the token was refused (expired, revoked, bad signature; the server does not say which).
    #[error("unauthorized (401): the API server refused the token")]
    Unauthorized,
    /// 403: authenticated but not allowed; `message` is the server's Status message naming the permission.
    #[error("forbidden (403): {message}")]
    Forbidden {
        /// The Status message.
        message: String,
    },
    /// 404 with the Status message.
    #[error("not found (404): {message}")]
    NotFound {
        /// The Status message.
        message: String,
    },
    /// 409 with the Status message.
    #[error("conflict (409): {message}")]
    Conflict {
        /// The Status message.
        message: String,
    },
    /// 422 with the Status message (e.g. a lifetime below 10 minutes).
    #[error("unprocessable (422): {message}")]
    Unprocessable {
        /// The Status message.
        message: String,
    },
    /// 429: the server sheds load; `retry_after` is the `Retry-After` header in seconds when it parsed.
    #[error("too many requests (429){}", retry_after.map(|s| format!(", retry after {s} s")).unwrap_or_default())]
    TooManyRequests {
        /// Seconds from `Retry-After` (integer form only, as client-go).
        retry_after: Option<u64>,
    },
    /// 5xx with the Status message when there was one.
    #[error("server error ({code}): {message}")]
    ServerError {
        /// HTTP status code.
        code: u16,
        /// Status message or a short body excerpt.
        message: String,
        /// Seconds from `Retry-After`, when present.
        retry_after: Option<u64>,
    },
    /// Any other non-success status (e.g. 400).
    #[error("unexpected status {code}: {message}")]
    UnexpectedStatus {
        /// HTTP status code.
        code: u16,
        /// Status message or a short body excerpt.
        message: String,
    },
    /// The request did not complete within its deadline (connect, TLS and response included).
    #[error("no answer from the API server within {0:?}")]
    Timeout(Duration),
    /// The TCP connection could not be made.
    #[error("cannot connect to the API server: {0}")]
    Connect(String),
    /// TLS failed (certificate not trusted, handshake error).
    #[error("TLS with the API server failed: {0}")]
    Tls(String),
    /// A body (or a token's claims) did not decode.
    #[error("cannot decode: {0}")]
    Decode(String),
    /// The agent socket could not be reached or did not answer in time.
    #[error("agent at {socket} unreachable: {reason}")]
    AgentUnreachable {
        /// The socket path.
        socket: PathBuf,
        /// Why.
        reason: String,
    },
    /// The agent answered something that is not the channel protocol.
    #[error("agent at {socket} answered badly: {reason}")]
    AgentProtocol {
        /// The socket path.
        socket: PathBuf,
        /// Why.
        reason: String,
    },
}

impl KubeError {
    /// True when the agent channel's connect failed: no agent listens on the socket (yet). A
    /// restarting agent listens again within seconds; a request that was sent is not this.
    pub fn is_agent_not_listening(&self) -> bool {
        matches!(self, Self::AgentUnreachable { reason, .. }
            if reason.starts_with(crate::channel::NOT_LISTENING))
    }

    /// True for failures that a later attempt may not see: timeouts, connection and TLS
    /// failures, 429 and 5xx.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Timeout(_)
                | Self::Connect(_)
                | Self::TooManyRequests { .. }
                | Self::ServerError { .. }
        )
    }

    /// Short, stable label for metrics (`unauthorized`, `forbidden`, `timeout`, ...).
    pub fn cause_label(&self) -> &'static str {
        match self {
            Self::Kubeconfig { .. } => "kubeconfig",
            Self::Io { .. } => "io",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden { .. } => "forbidden",
            Self::NotFound { .. } => "not_found",
            Self::Conflict { .. } => "conflict",
            Self::Unprocessable { .. } => "unprocessable",
            Self::TooManyRequests { .. } => "too_many_requests",
            Self::ServerError { .. } => "server_error",
            Self::UnexpectedStatus { .. } => "unexpected_status",
            Self::Timeout(_) => "timeout",
            Self::Connect(_) => "connect",
            Self::Tls(_) => "tls",
            Self::Decode(_) => "decode",
            Self::AgentUnreachable { .. } => "agent_unreachable",
            Self::AgentProtocol { .. } => "agent_protocol",
        }
    }

    /// The `Retry-After` seconds the server sent, if any.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Self::TooManyRequests { retry_after } | Self::ServerError { retry_after, .. } => {
                *retry_after
            }
            _ => None,
        }
    }

    /// Builds the error for an HTTP status from its body and `Retry-After` header.
    ///
    /// The body is decoded as a `Status` when it is one; otherwise its first 200 bytes are used
    /// (429 from max-in-flight/APF is plain text).
    pub fn from_response(code: u16, body: &str, retry_after: Option<u64>) -> Self {
        let message = match serde_json::from_str::<Status>(body) {
            Ok(s) if s.kind == "Status" => s.message,
            _ => body.trim().chars().take(200).collect(),
        };
        match code {
            401 => Self::Unauthorized,
            403 => Self::Forbidden { message },
            404 => Self::NotFound { message },
            409 => Self::Conflict { message },
            422 => Self::Unprocessable { message },
            429 => Self::TooManyRequests { retry_after },
            500..=599 => Self::ServerError {
                code,
                message,
                retry_after,
            },
            _ => Self::UnexpectedStatus { code, message },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_status_bodies() {
        let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"web-0\" is forbidden: User \"system:serviceaccount:kube-system:cni\" cannot get resource \"pods\" in API group \"\" in the namespace \"default\"","reason":"Forbidden","details":{"name":"web-0","kind":"pods"},"code":403}"#;
        match KubeError::from_response(403, body, None) {
            KubeError::Forbidden { message } => {
                assert!(message.contains("cannot get resource \"pods\""))
            }
            e => panic!("{e:?}"),
        }
        let e =
            KubeError::from_response(429, "Too many requests, please try again later.\n", Some(3));
        assert_eq!(e.retry_after(), Some(3));
        assert!(e.is_transient());
        match KubeError::from_response(
            503,
            r#"{"kind":"Status","message":"apiserver is shutting down","code":503}"#,
            Some(1),
        ) {
            KubeError::ServerError {
                code: 503,
                message,
                retry_after: Some(1),
            } => {
                assert_eq!(message, "apiserver is shutting down")
            }
            e => panic!("{e:?}"),
        }
        assert!(matches!(
            KubeError::from_response(401, "", None),
            KubeError::Unauthorized
        ));
        assert!(matches!(
            KubeError::from_response(400, "x", None),
            KubeError::UnexpectedStatus { code: 400, .. }
        ));
    }
}

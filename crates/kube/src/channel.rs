//! The agent channel: one JSON line from a plugin asking for a token refresh or a pod's
//! admission, one JSON line back with the outcome (DESIGN.md, "Agent channel" and "NetworkPolicy
//! in the agent").
//!
//! Wire format (UTF-8, each message one line ending in `\n`, at most [`MAX_LINE`] bytes):
//! - requests: `{"op":"refresh","reason":"pod ADD got 401"}`;
//!   `{"op":"admitPod","namespace":"x","name":"web","uid":"...","ips":["10.0.1.2"],"waitMs":5000}`
//! - responses: `{"outcome":"refreshed","expiresAt":"2025-06-01T13:00:00Z"}`,
//!   `{"outcome":"rateLimited","retryAfterSeconds":12}`, `{"outcome":"admitted","isolated":true}`,
//!   `{"outcome":"failed","reason":"..."}`, and for a request the agent could not read,
//!   `{"outcome":"error","reason":"..."}`.
//!
//! Invariant: nothing in the protocol carries a token; the channel can only ask for work the
//! agent would do anyway (an admission only tells it a pod's addresses a little before the API
//! server does).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::KubeError;

/// How [`AgentClient::ask`]'s error reason starts when nothing accepted the connection (no
/// socket, or no agent behind it): [`KubeError::is_agent_not_listening`].
pub(crate) const NOT_LISTENING: &str = "connect: ";

/// Default agent socket path.
pub const DEFAULT_SOCKET: &str = "/run/tern/agent.sock";
/// Longest accepted line, newline included (bytes).
pub const MAX_LINE: usize = 4096;
/// Longest `reason` kept by the server (characters); longer ones are cut.
pub const MAX_REASON: usize = 256;

/// A request from a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", deny_unknown_fields)]
pub enum Request {
    /// Ask for a token refresh; `reason` is free text for the agent's log.
    Refresh {
        /// Why the client asks (e.g. `pod ADD got 401`).
        #[serde(default)]
        reason: String,
    },
    /// Ask the agent to enforce NetworkPolicy for a pod being wired (tern's ADD, before it
    /// returns): it answers once the pod's rules are in the kernel, or at once when no policy
    /// selects it.
    AdmitPod {
        /// `K8S_POD_NAMESPACE`.
        namespace: String,
        /// `K8S_POD_NAME`.
        name: String,
        /// `K8S_POD_UID` when the runtime passed it: a pod of the same name with another UID is
        /// not this one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uid: Option<String>,
        /// The addresses ADD gave the pod.
        ips: Vec<IpAddr>,
        /// How long the plugin waits for the answer (milliseconds); the agent answers
        /// `failed` before then rather than let the plugin time out.
        #[serde(rename = "waitMs")]
        wait_ms: u64,
    },
}

/// The agent's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum Outcome {
    /// A refresh completed (this request's or one it was coalesced into); the kubeconfig holds
    /// the new token.
    Refreshed {
        /// New expiry, RFC 3339 UTC.
        #[serde(rename = "expiresAt")]
        expires_at: String,
    },
    /// Channel-triggered refreshes are rate-limited; ask again after this many seconds.
    RateLimited {
        /// Seconds to wait (≥ 1).
        #[serde(rename = "retryAfterSeconds")]
        retry_after_seconds: u64,
    },
    /// The pod's addresses are in the agent's NetworkPolicy model; when `isolated`, a policy
    /// selects it and the kernel table that isolates it has been applied.
    Admitted {
        /// Whether a policy selects the pod (for ingress, egress or both).
        isolated: bool,
    },
    /// The refresh or admission was attempted and failed.
    Failed {
        /// Why (never contains a token).
        reason: String,
    },
    /// The request could not be read (malformed, oversized, too slow).
    Error {
        /// Why.
        reason: String,
    },
}

/// Why a request line could not be read (server side).
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The line exceeded [`MAX_LINE`] (or the given maximum).
    #[error("request longer than {0} bytes")]
    TooLong(usize),
    /// Not a valid request.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// The peer closed before sending a full line.
    #[error("connection closed before a full request line")]
    Eof,
    /// Reading failed (including the read deadline passing).
    #[error("reading request: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads one bounded line (up to `max` bytes including `\n`) from `r`.
fn read_line_bounded<R: BufRead>(r: &mut R, max: usize) -> Result<Vec<u8>, CodecError> {
    let mut buf = Vec::with_capacity(128);
    let mut limited = r.take(max as u64 + 1);
    limited.read_until(b'\n', &mut buf)?;
    if buf.last() != Some(&b'\n') {
        if buf.len() > max {
            return Err(CodecError::TooLong(max));
        }
        return Err(CodecError::Eof);
    }
    if buf.len() > max {
        return Err(CodecError::TooLong(max));
    }
    buf.pop();
    Ok(buf)
}

/// Reads and decodes one request line of at most `max` bytes (server side). The caller sets the
/// read deadline on the stream.
///
/// # Errors
/// [`CodecError`] for an oversized, malformed or incomplete line or an I/O failure.
pub fn read_request<R: BufRead>(r: &mut R, max: usize) -> Result<Request, CodecError> {
    let line = read_line_bounded(r, max)?;
    let mut req: Request =
        serde_json::from_slice(&line).map_err(|e| CodecError::Malformed(e.to_string()))?;
    if let Request::Refresh { reason } = &mut req {
        if reason.chars().count() > MAX_REASON {
            *reason = reason.chars().take(MAX_REASON).collect();
        }
    }
    Ok(req)
}

/// Writes one outcome line.
///
/// # Errors
/// The write's I/O error.
pub fn write_outcome<W: Write>(w: &mut W, outcome: &Outcome) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(outcome).map_err(std::io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()
}

/// The plugin side of the channel.
#[derive(Debug, Clone, Copy, Default)]
pub struct AgentClient;

impl AgentClient {
    /// Asks the agent at `socket` for a refresh and waits for its outcome, all within `deadline`.
    ///
    /// # Errors
    /// [`KubeError::AgentUnreachable`] when the socket cannot be connected or no answer comes in
    /// time; [`KubeError::AgentProtocol`] when the answer is not an [`Outcome`] line.
    pub fn request_refresh(
        socket: &Path,
        reason: &str,
        deadline: Duration,
    ) -> Result<Outcome, KubeError> {
        let req = Request::Refresh {
            reason: reason.chars().take(MAX_REASON).collect(),
        };
        Self::ask(socket, &req, deadline)
    }

    /// Sends `req` to the agent at `socket` and waits for its outcome, all within `deadline`.
    ///
    /// # Errors
    /// [`KubeError::AgentUnreachable`] when the socket cannot be connected or no answer comes in
    /// time; [`KubeError::AgentProtocol`] when the answer is not an [`Outcome`] line.
    pub fn ask(socket: &Path, req: &Request, deadline: Duration) -> Result<Outcome, KubeError> {
        let start = Instant::now();
        let unreachable = |reason: String| KubeError::AgentUnreachable {
            socket: socket.to_owned(),
            reason,
        };
        let left = || {
            deadline
                .saturating_sub(start.elapsed())
                .max(Duration::from_millis(1))
        };
        let mut stream =
            UnixStream::connect(socket).map_err(|e| unreachable(format!("{NOT_LISTENING}{e}")))?;
        stream
            .set_write_timeout(Some(left()))
            .map_err(|e| unreachable(e.to_string()))?;
        let mut line = serde_json::to_vec(req).map_err(|e| unreachable(e.to_string()))?;
        line.push(b'\n');
        stream
            .write_all(&line)
            .map_err(|e| unreachable(format!("send: {e}")))?;
        stream
            .set_read_timeout(Some(left()))
            .map_err(|e| unreachable(e.to_string()))?;
        let mut reader = BufReader::new(stream);
        let answer = read_line_bounded(&mut reader, MAX_LINE).map_err(|e| match e {
            CodecError::Io(io)
                if matches!(
                    io.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                unreachable(format!("no answer within {deadline:?}"))
            }
            other => KubeError::AgentProtocol {
                socket: socket.to_owned(),
                reason: other.to_string(),
            },
        })?;
        serde_json::from_slice(&answer).map_err(|e| KubeError::AgentProtocol {
            socket: socket.to_owned(),
            reason: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_format_is_as_documented() {
        let r: Request = serde_json::from_str(r#"{"op":"refresh","reason":"401"}"#).unwrap();
        assert_eq!(
            r,
            Request::Refresh {
                reason: "401".into()
            }
        );
        let cases = [
            (
                Outcome::Refreshed {
                    expires_at: "2025-06-01T13:00:00Z".into(),
                },
                r#"{"outcome":"refreshed","expiresAt":"2025-06-01T13:00:00Z"}"#,
            ),
            (
                Outcome::RateLimited {
                    retry_after_seconds: 12,
                },
                r#"{"outcome":"rateLimited","retryAfterSeconds":12}"#,
            ),
            (
                Outcome::Admitted { isolated: true },
                r#"{"outcome":"admitted","isolated":true}"#,
            ),
            (
                Outcome::Failed { reason: "x".into() },
                r#"{"outcome":"failed","reason":"x"}"#,
            ),
        ];
        for (o, s) in cases {
            assert_eq!(serde_json::to_string(&o).unwrap(), s);
            assert_eq!(serde_json::from_str::<Outcome>(s).unwrap(), o);
        }
    }

    #[test]
    fn codec_refuses_bad_lines() {
        let long = format!(
            "{{\"op\":\"refresh\",\"reason\":\"{}\"}}\n",
            "x".repeat(MAX_LINE)
        );
        assert!(matches!(
            read_request(&mut long.as_bytes(), MAX_LINE),
            Err(CodecError::TooLong(_))
        ));
        assert!(matches!(
            read_request(&mut &b"{\"op\":\"refresh\"}"[..], MAX_LINE),
            Err(CodecError::Eof)
        ));
        assert!(matches!(
            read_request(&mut &b"{\"op\":\"steal\"}\n"[..], MAX_LINE),
            Err(CodecError::Malformed(_))
        ));
        assert!(matches!(
            read_request(&mut &b"not json\n"[..], MAX_LINE),
            Err(CodecError::Malformed(_))
        ));
        let ok = read_request(&mut &b"{\"op\":\"refresh\"}\n"[..], MAX_LINE).unwrap();
        assert_eq!(
            ok,
            Request::Refresh {
                reason: String::new()
            }
        );
        let long_reason = format!(
            "{{\"op\":\"refresh\",\"reason\":\"{}\"}}\n",
            "y".repeat(1000)
        );
        let Request::Refresh { reason } =
            read_request(&mut long_reason.as_bytes(), MAX_LINE).unwrap()
        else {
            panic!("not a refresh")
        };
        assert_eq!(reason.len(), MAX_REASON);
    }

    #[test]
    fn admit_pod_wire_format() {
        let line = r#"{"op":"admitPod","namespace":"x","name":"web","ips":["10.0.1.2","fd00::2"],"waitMs":5000}"#;
        let r: Request = serde_json::from_str(line).unwrap();
        assert_eq!(
            r,
            Request::AdmitPod {
                namespace: "x".into(),
                name: "web".into(),
                uid: None,
                ips: vec!["10.0.1.2".parse().unwrap(), "fd00::2".parse().unwrap()],
                wait_ms: 5000,
            }
        );
        assert_eq!(serde_json::to_string(&r).unwrap(), line);
        assert!(matches!(
            read_request(
                &mut &b"{\"op\":\"admitPod\",\"namespace\":\"x\",\"name\":\"a\",\"ips\":[\"nope\"],\"waitMs\":1}\n"[..],
                MAX_LINE
            ),
            Err(CodecError::Malformed(_))
        ));
    }
}

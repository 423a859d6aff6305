//! A small blocking Kubernetes API client over ureq 3 and rustls (ring provider).
//!
//! Invariants: every request runs under a caller-given deadline that covers DNS, connect, TLS,
//! sending and reading the whole response; the server certificate is checked against the CA
//! from the kubeconfig (never the web roots); the token is sent only in the `Authorization`
//! header and never appears in an error. Errors are typed by HTTP status and Status body.

use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::CertificateDer;
use ureq::tls::{Certificate, RootCerts, TlsConfig, TlsProvider};

use crate::error::KubeError;
use crate::kubeconfig::{ClientConfig, TlsTrust};
use crate::time::parse_rfc3339;
use crate::token::BearerToken;
use crate::types::{
    Node, Pod, RawNode, RawPod, RawTokenRequest, TokenRequestSpec, TokenRequestStatus,
};

pub mod nodes;
pub mod objects;

/// Largest response body read (1 MiB); a Pod or TokenRequest is far smaller.
const MAX_BODY: u64 = 1 << 20;

/// A connection to one API server with one bearer token.
pub struct Client {
    agent: ureq::Agent,
    server: String,
    token: BearerToken,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.server)
            .field("token", &self.token)
            .finish()
    }
}

/// A raw API response: status code, selected headers, body text.
struct Reply {
    code: u16,
    retry_after: Option<u64>,
    warnings: Vec<String>,
    body: String,
}

/// A response's `Retry-After` in whole seconds (the API server sends seconds, never a date).
fn retry_after_secs(h: &ureq::http::HeaderMap) -> Option<u64> {
    h.get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// Parses the CA PEM bundle into certificates.
fn ca_certs(pem: &[u8]) -> Result<Vec<Certificate<'static>>, KubeError> {
    let mut out = Vec::new();
    for der in CertificateDer::pem_slice_iter(pem) {
        let der = der.map_err(|e| KubeError::Tls(format!("bad CA PEM: {e}")))?;
        out.push(Certificate::from_der(der.as_ref()).to_owned());
    }
    if out.is_empty() {
        return Err(KubeError::Tls("CA data holds no PEM certificate".into()));
    }
    Ok(out)
}

impl Client {
    /// Builds a client from a resolved kubeconfig (or in-cluster configuration).
    ///
    /// `tls_server_name` is not supported and is ignored (tern's kubeconfigs never set it).
    ///
    /// # Errors
    /// [`KubeError::Tls`] when the CA PEM holds no certificate or when no CA is given without
    /// `insecure-skip-tls-verify` (this client links no system roots).
    pub fn new(cfg: &ClientConfig) -> Result<Self, KubeError> {
        let tls = TlsConfig::builder().provider(TlsProvider::Rustls);
        let tls = match &cfg.trust {
            TlsTrust::CaPem(pem) => tls.root_certs(RootCerts::Specific(Arc::new(ca_certs(pem)?))),
            TlsTrust::InsecureSkipVerify => tls.disable_verification(true),
            TlsTrust::SystemRoots => {
                return Err(KubeError::Tls(format!(
                    "{} gives no certificate-authority; tern needs the cluster CA",
                    cfg.source.display()
                )))
            }
        };
        let config = ureq::Agent::config_builder()
            .tls_config(tls.build())
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent("tern/0.1")
            .build();
        Ok(Client {
            agent: ureq::Agent::new_with_config(config),
            server: cfg.server.clone(),
            token: cfg.token.clone(),
        })
    }

    /// The server URL (`https://host:port`).
    pub fn server(&self) -> &str {
        &self.server
    }

    fn map_err(e: ureq::Error, timeout: Duration) -> KubeError {
        match e {
            ureq::Error::Timeout(_) => KubeError::Timeout(timeout),
            ureq::Error::Io(io)
                if matches!(
                    io.kind(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                ) =>
            {
                KubeError::Timeout(timeout)
            }
            ureq::Error::Io(io)
                if io.kind() == std::io::ErrorKind::InvalidData
                    || io
                        .get_ref()
                        .is_some_and(|e| e.downcast_ref::<rustls::Error>().is_some()) =>
            {
                KubeError::Tls(io.to_string())
            }
            ureq::Error::Io(io) => KubeError::Connect(io.to_string()),
            ureq::Error::HostNotFound => KubeError::Connect("host not found".into()),
            ureq::Error::ConnectionFailed => KubeError::Connect("connection failed".into()),
            ureq::Error::Tls(s) => KubeError::Tls(s.to_owned()),
            ureq::Error::Rustls(e) => KubeError::Tls(e.to_string()),
            ureq::Error::Pem(e) => KubeError::Tls(e.to_string()),
            ureq::Error::BodyExceedsLimit(n) => {
                KubeError::Decode(format!("response body over {n} bytes"))
            }
            other => KubeError::Connect(other.to_string()),
        }
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Reply, KubeError> {
        let url = format!("{}{}", self.server, path);
        let auth = format!("Bearer {}", self.token.expose());
        let result = if method == "PATCH" {
            self.agent
                .patch(&url)
                .header("Authorization", &auth)
                .header("Accept", "application/json")
                .header("Content-Type", "application/strategic-merge-patch+json")
                .config()
                .timeout_global(Some(timeout))
                .build()
                .send(body.unwrap_or_default())
        } else if method == "POST" {
            self.agent
                .post(&url)
                .header("Authorization", &auth)
                .header("Accept", "application/json")
                .header("Content-Type", "application/json")
                .config()
                .timeout_global(Some(timeout))
                .build()
                .send(body.unwrap_or_default())
        } else {
            self.agent
                .get(&url)
                .header("Authorization", &auth)
                .header("Accept", "application/json")
                .config()
                .timeout_global(Some(timeout))
                .build()
                .call()
        };
        let mut resp = result.map_err(|e| Self::map_err(e, timeout))?;
        let code = resp.status().as_u16();
        let retry_after = retry_after_secs(resp.headers());
        let warnings = resp
            .headers()
            .get_all("warning")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect();
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_string()
            .map_err(|e| Self::map_err(e, timeout))?;
        Ok(Reply {
            code,
            retry_after,
            warnings,
            body,
        })
    }

    fn check(reply: Reply, want: u16) -> Result<Reply, KubeError> {
        if reply.code == want {
            Ok(reply)
        } else {
            Err(KubeError::from_response(
                reply.code,
                &reply.body,
                reply.retry_after,
            ))
        }
    }

    /// `GET /api/v1/namespaces/{ns}/pods/{name}` (200).
    ///
    /// # Errors
    /// Typed by status ([`KubeError::NotFound`] for a missing pod, [`KubeError::Unauthorized`],
    /// [`KubeError::Forbidden`], ...), [`KubeError::Timeout`] past `timeout`, transport errors,
    /// [`KubeError::Decode`] for a body that is not a Pod.
    pub fn get_pod(&self, ns: &str, name: &str, timeout: Duration) -> Result<Pod, KubeError> {
        let r = Self::check(
            self.send(
                "GET",
                &format!("/api/v1/namespaces/{ns}/pods/{name}"),
                None,
                timeout,
            )?,
            200,
        )?;
        let raw: RawPod =
            serde_json::from_str(&r.body).map_err(|e| KubeError::Decode(format!("pod: {e}")))?;
        Ok(raw.into())
    }

    /// `GET /api/v1/nodes/{name}` (200); reads `spec.podCIDRs`.
    ///
    /// # Errors
    /// As [`Client::get_pod`].
    pub fn get_node(&self, name: &str, timeout: Duration) -> Result<Node, KubeError> {
        let r = Self::check(
            self.send("GET", &format!("/api/v1/nodes/{name}"), None, timeout)?,
            200,
        )?;
        let raw: RawNode =
            serde_json::from_str(&r.body).map_err(|e| KubeError::Decode(format!("node: {e}")))?;
        Ok(raw.into())
    }

    /// TokenRequest: `POST /api/v1/namespaces/{ns}/serviceaccounts/{sa}/token`, answered 201
    /// (`authentication/v1` TokenRequest). Returns the token and `status.expirationTimestamp`.
    ///
    /// # Errors
    /// [`KubeError::Unprocessable`] for a lifetime under 600 s, [`KubeError::NotFound`] for a missing
    /// service account, [`KubeError::Forbidden`] without `create serviceaccounts/token`, the other
    /// status and transport errors as [`Client::get_pod`]; [`KubeError::Decode`] when the 201 body
    /// lacks a token or a valid `expirationTimestamp`.
    pub fn create_token(
        &self,
        ns: &str,
        sa: &str,
        spec: &TokenRequestSpec,
        timeout: Duration,
    ) -> Result<TokenRequestStatus, KubeError> {
        let body = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": spec,
        });
        let bytes = serde_json::to_vec(&body).map_err(|e| KubeError::Decode(e.to_string()))?;
        let path = format!("/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token");
        let r = Self::check(self.send("POST", &path, Some(bytes), timeout)?, 201)?;
        let raw: RawTokenRequest = serde_json::from_str(&r.body)
            .map_err(|_| KubeError::Decode("TokenRequest response is not JSON".into()))?;
        let status = raw
            .status
            .ok_or_else(|| KubeError::Decode("TokenRequest response has no status".into()))?;
        if status.token.is_empty() {
            return Err(KubeError::Decode(
                "TokenRequest response has no status.token".into(),
            ));
        }
        let expiration_timestamp = parse_rfc3339(&status.expiration_timestamp)?;
        Ok(TokenRequestStatus {
            token: BearerToken::new(status.token),
            expiration_timestamp,
            granted_seconds: raw.spec.and_then(|s| s.expiration_seconds),
            warnings: r.warnings,
        })
    }

    /// `POST /api/v1/namespaces/{ns}/events` of `event` (a core/v1 Event): `true` when created
    /// (201), `false` when one of its name exists already (409: another writer was first).
    ///
    /// # Errors
    /// [`KubeError::Forbidden`] without `create events`, the other status and transport errors
    /// as [`Client::get_pod`].
    pub fn create_event(
        &self,
        ns: &str,
        event: &serde_json::Value,
        timeout: Duration,
    ) -> Result<bool, KubeError> {
        let bytes = serde_json::to_vec(event).map_err(|e| KubeError::Decode(e.to_string()))?;
        let path = format!("/api/v1/namespaces/{ns}/events");
        match Self::check(self.send("POST", &path, Some(bytes), timeout)?, 201) {
            Ok(_) => Ok(true),
            Err(KubeError::Conflict { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `GET /apis/apps/v1/namespaces/{ns}/daemonsets/{name}` (200): whether the DaemonSet is being
    /// deleted (`metadata.deletionTimestamp` set). `tern-agent uninstall` asks before removing tern.
    ///
    /// # Errors
    /// As [`Client::get_pod`] ([`KubeError::NotFound`] once the DaemonSet is gone).
    pub fn daemonset_deleting(
        &self,
        ns: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<bool, KubeError> {
        let path = format!("/apis/apps/v1/namespaces/{ns}/daemonsets/{name}");
        let r = Self::check(self.send("GET", &path, None, timeout)?, 200)?;
        let v: serde_json::Value = serde_json::from_str(&r.body)
            .map_err(|e| KubeError::Decode(format!("daemonset: {e}")))?;
        Ok(!v["metadata"]["deletionTimestamp"].is_null())
    }
}

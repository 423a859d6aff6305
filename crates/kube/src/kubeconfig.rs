//! Kubeconfig reading (YAML or JSON) and writing, per client-go's schema
//! (`client-go/tools/clientcmd/api/v1/types.go`).
//!
//! Invariants: only what tern needs is honoured — `current-context`, the cluster's `server`
//! (https only, since client-go sends credentials only over TLS), `certificate-authority-data`
//! (standard base64 of PEM; wins over `certificate-authority`), `certificate-authority` (relative
//! paths resolved against the kubeconfig's directory), `insecure-skip-tls-verify` (refused together
//! with a CA, as client-go does), `tls-server-name`, and the user's `token` or `tokenFile`
//! (the file wins when both are set and it can be read, as client-go behaves). Errors name the path,
//! never the token.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use crate::error::KubeError;
use crate::token::BearerToken;

mod file;
pub use file::{read_regular_file, MAX_KUBECONFIG};

#[derive(Debug, Default, Deserialize)]
struct RawConfig {
    #[serde(default)]
    clusters: Option<Vec<Named<RawCluster>>>,
    #[serde(default)]
    users: Option<Vec<Named<RawUser>>>,
    #[serde(default)]
    contexts: Option<Vec<Named<RawContext>>>,
    #[serde(default, rename = "current-context")]
    current_context: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    item: Option<T>,
}

#[derive(Debug, Default, Deserialize)]
struct RawCluster {
    server: Option<String>,
    #[serde(rename = "certificate-authority")]
    certificate_authority: Option<String>,
    #[serde(rename = "certificate-authority-data")]
    certificate_authority_data: Option<String>,
    #[serde(rename = "insecure-skip-tls-verify", default)]
    insecure_skip_tls_verify: Option<bool>,
    #[serde(rename = "tls-server-name")]
    tls_server_name: Option<String>,
}

#[derive(Default, Deserialize)]
struct RawUser {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
}

impl std::fmt::Debug for RawUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawUser")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

#[derive(Debug, Default, Deserialize)]
struct RawContext {
    cluster: Option<String>,
    user: Option<String>,
}

/// How the API server's certificate is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsTrust {
    /// Trust only these CA certificates (PEM bytes, one or more certificates).
    CaPem(Vec<u8>),
    /// Trust the built-in web roots: never used by tern, refused by the client (no system roots linked).
    SystemRoots,
    /// `insecure-skip-tls-verify: true`.
    InsecureSkipVerify,
}

/// A kubeconfig resolved to what a client needs: where, how to trust it, and which token.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The kubeconfig this came from (for messages), or a description like `in-cluster`.
    pub source: PathBuf,
    /// `https://host:port` without a trailing slash.
    pub server: String,
    /// Server certificate trust.
    pub trust: TlsTrust,
    /// Overrides the name checked in the server certificate.
    pub tls_server_name: Option<String>,
    /// The bearer token.
    pub token: BearerToken,
}

fn err(path: &Path, reason: impl Into<String>) -> KubeError {
    KubeError::Kubeconfig {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// Reads and resolves the kubeconfig at `path` (read fresh on every call; nothing is cached).
///
/// # Errors
/// [`KubeError::Kubeconfig`] naming `path` when the file is missing, unreadable, not YAML/JSON,
/// lacks a usable context/cluster/user, names an http server, has CA data that is not base64,
/// combines a CA with `insecure-skip-tls-verify`, has no token, or is larger than
/// [`MAX_KUBECONFIG`].
pub fn load(path: &Path) -> Result<ClientConfig, KubeError> {
    let bytes = read_regular_file(path).map_err(|e| err(path, format!("cannot read: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|_| err(path, "cannot read: not UTF-8"))?;
    parse(&text, path)
}

/// Resolves kubeconfig text; `path` is used for messages and to resolve relative file references.
///
/// # Errors
/// As [`load`].
pub fn parse(text: &str, path: &Path) -> Result<ClientConfig, KubeError> {
    let raw: RawConfig = if text.trim().is_empty() {
        RawConfig::default()
    } else {
        serde_yaml_ng::from_str(text)
            .map_err(|e| err(path, format!("not valid YAML or JSON: {e}")))?
    };
    let base = path.parent().unwrap_or_else(|| Path::new("."));
    let resolve = |p: &str| -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_owned()
        } else {
            base.join(p)
        }
    };
    let contexts = raw.contexts.unwrap_or_default();
    let ctx_name = match raw.current_context.filter(|c| !c.is_empty()) {
        Some(c) => c,
        None if contexts.len() == 1 => contexts[0].name.clone(),
        None => return Err(err(path, "no current-context set")),
    };
    let ctx = contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.item.as_ref())
        .ok_or_else(|| err(path, format!("context \"{ctx_name}\" does not exist")))?;
    let cluster_name = ctx.cluster.clone().unwrap_or_default();
    let cluster = raw
        .clusters
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.name == cluster_name)
        .and_then(|c| c.item)
        .ok_or_else(|| err(path, format!("cluster \"{cluster_name}\" does not exist")))?;
    let user_name = ctx.user.clone().unwrap_or_default();
    let user = raw
        .users
        .unwrap_or_default()
        .into_iter()
        .find(|u| u.name == user_name)
        .and_then(|u| u.item)
        .ok_or_else(|| err(path, format!("user \"{user_name}\" does not exist")))?;

    let server = cluster
        .server
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            err(
                path,
                format!("no server found for cluster \"{cluster_name}\""),
            )
        })?;
    if !server.starts_with("https://") {
        return Err(err(
            path,
            format!("server {server} is not https; credentials are only sent over TLS"),
        ));
    }
    let server = server.trim_end_matches('/').to_owned();
    let trust = tls_trust(&cluster, path, &resolve, &cluster_name)?;

    let token = user_token(user, path, &resolve, &user_name)?;
    Ok(ClientConfig {
        source: path.to_owned(),
        server,
        trust,
        tls_server_name: cluster.tls_server_name.filter(|s| !s.is_empty()),
        token,
    })
}

/// The TLS trust of `cluster` (named `cluster_name` in the kubeconfig at `path`): its
/// `certificate-authority-data`, else its `certificate-authority` file (resolved by `resolve`),
/// else `insecure-skip-tls-verify`, else the system roots.
///
/// # Errors
/// As [`load`]: data that is not base64, an unreadable CA file, a CA with the insecure flag.
fn tls_trust(
    cluster: &RawCluster,
    path: &Path,
    resolve: &dyn Fn(&str) -> PathBuf,
    cluster_name: &str,
) -> Result<TlsTrust, KubeError> {
    let insecure = cluster.insecure_skip_tls_verify.unwrap_or(false);
    let ca = if let Some(data) = cluster
        .certificate_authority_data
        .as_deref()
        .filter(|d| !d.is_empty())
    {
        let compact: String = data.split_whitespace().collect();
        Some(
            base64::engine::general_purpose::STANDARD
                .decode(compact)
                .map_err(|_| err(path, "certificate-authority-data is not base64"))?,
        )
    } else if let Some(file) = cluster
        .certificate_authority
        .as_deref()
        .filter(|f| !f.is_empty())
    {
        let p = resolve(file);
        Some(read_regular_file(&p).map_err(|e| {
            err(
                path,
                format!(
                    "unable to read certificate-authority {} for {cluster_name} due to {e}",
                    p.display()
                ),
            )
        })?)
    } else {
        None
    };
    Ok(match (ca, insecure) {
        (Some(_), true) => {
            return Err(err(
                path,
                "specifying a root certificates file with the insecure flag is not allowed",
            ))
        }
        (Some(pem), false) => TlsTrust::CaPem(pem),
        (None, true) => TlsTrust::InsecureSkipVerify,
        (None, false) => TlsTrust::SystemRoots,
    })
}

/// The bearer token of `user` (named `user_name` in the kubeconfig at `path`): its `tokenFile`
/// (resolved by `resolve`), else its `token`.
///
/// # Errors
/// As [`load`]: neither is set, or the file is empty or unreadable and there is no `token`.
fn user_token(
    user: RawUser,
    path: &Path,
    resolve: &dyn Fn(&str) -> PathBuf,
    user_name: &str,
) -> Result<BearerToken, KubeError> {
    let from_file = match user.token_file.filter(|f| !f.is_empty()) {
        Some(f) => {
            let p = resolve(&f);
            let text = read_regular_file(&p).and_then(|b| {
                String::from_utf8(b)
                    .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"))
            });
            match text {
                Ok(t) if !t.trim().is_empty() => Some(BearerToken::new(t)),
                Ok(_) if user.token.is_some() => None,
                Ok(_) => return Err(err(path, format!("tokenFile {} is empty", p.display()))),
                Err(_) if user.token.is_some() => None,
                Err(e) => {
                    return Err(err(
                        path,
                        format!("cannot read tokenFile {}: {e}", p.display()),
                    ))
                }
            }
        }
        None => None,
    };
    from_file
        .or_else(|| user.token.map(BearerToken::new))
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            err(
                path,
                format!("user \"{user_name}\" has no token or tokenFile"),
            )
        })
}

/// Renders the kubeconfig tern-agent writes: one cluster (`server`, `certificate-authority-data`),
/// one user with `token`, one context that is current. Strings are YAML double-quoted scalars
/// ([`yaml_quoted`]), so any string parses back unchanged.
///
/// `server` must be an https URL; `ca_pem` is the PEM bundle to trust.
pub fn render(server: &str, ca_pem: &[u8], token: &BearerToken) -> String {
    let q = yaml_quoted;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "# Written by tern-agent and replaced atomically on every token refresh; do not edit.\n\
         apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster:\n    server: {}\n    \
         certificate-authority-data: {}\nusers:\n- name: tern-cni\n  user:\n    token: {}\ncontexts:\n\
         - name: tern\n  context:\n    cluster: kubernetes\n    user: tern-cni\ncurrent-context: tern\n",
        q(server),
        q(&ca),
        q(token.expose())
    )
}

/// `s` as a YAML double-quoted scalar: JSON's quoting, plus a `\uXXXX` escape for each character
/// JSON leaves raw that YAML 1.1 refuses in a document (DEL, the C1 controls, U+FFFE, U+FFFF) or
/// reads as a line break and folds (NEL, U+2028, U+2029), and for the byte-order mark.
fn yaml_quoted(s: &str) -> String {
    let json = serde_json::Value::String(s.to_owned()).to_string();
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if matches!(
            c,
            '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
        ) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests;

//! Minting the CNI token: TokenRequest with the agent's own in-cluster credentials, and the
//! kubeconfig carrying the token, rendered in memory and written atomically (mode 0600).
//!
//! Invariant: the token leaves this module only inside the kubeconfig file.

use tern_kube::kubeconfig::{ClientConfig, TlsTrust};
use tern_kube::{
    write_atomic, BearerToken, Client, KubeError, TokenRequestSpec, TokenRequestStatus,
};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::args::{api_server_from, namespace_from, CredentialArgs};
use crate::schedule::{backoff_delay, Rng};

/// The deadline of each API request unless `--request-timeout` (of `run`) says otherwise.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How the agent reaches the API server: what every subsystem that calls it needs (the token
/// refresher, install, uninstall, node routes, egress NAT), and no more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiAccess {
    /// API server URL (`https://host:port`).
    pub api_server: String,
    /// Directory holding the agent's own `token` and `ca.crt` (re-read per client).
    pub sa_dir: PathBuf,
    /// Deadline of each API request.
    pub request_timeout: Duration,
}

/// What the node controllers (node routes, egress NAT) take of the agent's settings: how to reach
/// the API server, the back-off between failed reads, and the kubeconfig beside which
/// `uninstall`'s mark appears (they stop changing the host once it does).
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// The API server and the agent's credentials.
    pub api: ApiAccess,
    /// Back-off between failed API reads (`backoff_base`, `backoff_cap`).
    pub policy: crate::schedule::Policy,
    /// The plugins' kubeconfig (its directory holds the uninstall mark).
    pub kubeconfig: PathBuf,
}

impl ControllerSettings {
    /// Counts one more failed API read of a controller's list/watch loop — in `failures` (in a
    /// row) and under the error's cause ([`KubeError::cause_label`]) in `api_errors` — and
    /// returns the back-off before the next try: [`backoff_delay`] on [`Self::policy`] with no
    /// token time left, jittered by `rng`, at least the server's `Retry-After`.
    pub fn api_failure(
        &self,
        failures: &mut u32,
        api_errors: &mut BTreeMap<&'static str, u64>,
        e: &KubeError,
        rng: &mut Rng,
    ) -> Duration {
        *failures = failures.saturating_add(1);
        *api_errors.entry(e.cause_label()).or_insert(0) += 1;
        backoff_delay(
            &self.policy,
            *failures,
            None,
            e.retry_after().map(Duration::from_secs),
            rng.unit(),
        )
    }
}

/// What a CNI token is minted for, and where its kubeconfig goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenTarget {
    /// The API server and the agent's credentials.
    pub api: ApiAccess,
    /// Namespace of the CNI service account.
    pub namespace: String,
    /// The CNI service account whose tokens are requested.
    pub cni_service_account: String,
    /// Requested token lifetime.
    pub token_lifetime: Duration,
    /// The kubeconfig written for the plugins.
    pub kubeconfig: PathBuf,
}

impl TokenTarget {
    /// The credential flags `run` and `install` share, resolved as `run` resolves them (the API
    /// server from `--api-server` or the in-cluster variables in `env`, the namespace from
    /// `--namespace` or the service-account directory), each request's deadline
    /// [`DEFAULT_REQUEST_TIMEOUT`], and the kubeconfig at `kubeconfig`.
    ///
    /// # Errors
    /// No API server can be found, or it is not https; the token lifetime is refused
    /// ([`check_token_lifetime`]).
    pub fn from_credentials(
        a: &CredentialArgs,
        env: &dyn Fn(&str) -> Option<String>,
        kubeconfig: PathBuf,
    ) -> anyhow::Result<Self> {
        let api = ApiAccess {
            api_server: api_server_from(a.api.api_server.as_ref(), env)?,
            sa_dir: a.api.sa_dir.clone(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        };
        check_token_lifetime(a.token_lifetime)?;
        Ok(TokenTarget {
            api,
            namespace: namespace_from(a.api.namespace.as_ref(), &a.api.sa_dir),
            cni_service_account: a.service_account.clone(),
            token_lifetime: a.token_lifetime,
            kubeconfig,
        })
    }
}

/// Checks a requested token lifetime (`--token-lifetime`) as the API server would take it.
///
/// # Errors
/// Under 10 minutes (the API server refuses it), or exactly 3607 s (the API server extends that
/// one lifetime to a year under `--service-account-extend-token-expiration`, its default).
pub fn check_token_lifetime(lifetime: Duration) -> anyhow::Result<()> {
    let life = lifetime.as_secs();
    if life < 600 {
        anyhow::bail!(
            "--token-lifetime must be at least 10m (the API server refuses shorter tokens)"
        );
    }
    if life == 3607 {
        anyhow::bail!("--token-lifetime must not be exactly 3607s: the API server would mint a one-year token");
    }
    Ok(())
}

/// One refresh: TokenRequest with the agent's own (re-read) credentials, then the atomic write
/// of the kubeconfig (mode 0600) to `cfg.kubeconfig`.
///
/// # Errors
/// Reading the credentials, the TokenRequest, or the write failed.
pub fn refresh_once(cfg: &TokenTarget) -> Result<TokenRequestStatus, KubeError> {
    let m = mint_kubeconfig(cfg)?;
    m.write(&cfg.kubeconfig)?;
    Ok(m.status)
}

/// A freshly minted CNI token and the kubeconfig text carrying it, not yet on disk. It has no
/// `Debug`/`Display`: the text holds the token and is only ever written, by [`Self::write`].
pub struct MintedKubeconfig {
    /// The TokenRequest's status (expiry, granted lifetime, warnings).
    pub status: TokenRequestStatus,
    text: String,
}

impl MintedKubeconfig {
    /// Writes the kubeconfig atomically with mode 0600.
    ///
    /// # Errors
    /// [`KubeError::Io`] naming the file; the previous file is then unchanged.
    pub fn write(&self, path: &std::path::Path) -> Result<(), KubeError> {
        write_atomic(path, self.text.as_bytes(), 0o600)
    }
}

/// TokenRequest for the CNI service account with the agent's own (re-read) credentials; the
/// kubeconfig is rendered in memory, not written. `install` uses it to hold the token before it
/// touches the host.
///
/// # Errors
/// Reading the credentials or the TokenRequest failed.
pub fn mint_kubeconfig(cfg: &TokenTarget) -> Result<MintedKubeconfig, KubeError> {
    mint_observed(cfg, |_, _| {})
}

/// As [`mint_kubeconfig`], calling `observe` with the TokenRequest's duration and result once it
/// was sent (not when the credentials could not be read, so no request left).
///
/// # Errors
/// As [`mint_kubeconfig`].
pub fn mint_observed(
    cfg: &TokenTarget,
    observe: impl FnOnce(std::time::Duration, Result<(), &KubeError>),
) -> Result<MintedKubeconfig, KubeError> {
    let (client, ca) = in_cluster_client(&cfg.api)?;
    let spec = TokenRequestSpec {
        audiences: Vec::new(),
        expiration_seconds: Some(i64::try_from(cfg.token_lifetime.as_secs()).unwrap_or(86_400)),
        bound_object_ref: None,
    };
    let started = std::time::Instant::now();
    let status = client.create_token(
        &cfg.namespace,
        &cfg.cni_service_account,
        &spec,
        cfg.api.request_timeout,
    );
    observe(started.elapsed(), status.as_ref().map(|_| ()));
    let status = status?;
    let text =
        crate::kubeconfig::render(&cfg.api.api_server, &ca, &status.token).map_err(|reason| {
            KubeError::Kubeconfig {
                path: cfg.kubeconfig.clone(),
                reason,
            }
        })?;
    Ok(MintedKubeconfig { status, text })
}

/// A client with the agent's own in-cluster credentials (token and CA re-read now), and the CA.
///
/// # Errors
/// The token or CA file cannot be read, or the CA holds no certificate.
pub fn in_cluster_client(cfg: &ApiAccess) -> Result<(Client, Vec<u8>), KubeError> {
    let token_path = cfg.sa_dir.join("token");
    let ca_path = cfg.sa_dir.join("ca.crt");
    let own = std::fs::read_to_string(&token_path).map_err(|source| KubeError::Io {
        op: "read",
        path: token_path,
        source,
    })?;
    let ca = std::fs::read(&ca_path).map_err(|source| KubeError::Io {
        op: "read",
        path: ca_path,
        source,
    })?;
    let client = Client::new(&ClientConfig {
        source: cfg.sa_dir.clone(),
        server: cfg.api_server.clone(),
        trust: TlsTrust::CaPem(ca.clone()),
        tls_server_name: None,
        token: BearerToken::new(own),
    })?;
    Ok((client, ca))
}

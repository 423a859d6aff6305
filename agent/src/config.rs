//! `tern-agent run` settings: defaults, flags, environment, and their validation.
//!
//! Invariant: a [`RunConfig`] that exists is valid — the requested lifetime is ≥ 600 s and never
//! exactly 3607 s, the refresh override parses strictly and lies in [1 min, lifetime), the
//! metrics address is loopback unless explicitly allowed, and the wall-clock check runs at least
//! once a minute.
//!
//! Flags ([`parse_flags`]) are strict for both subcommands: only those in the subcommand's
//! [`FlagSpec`] table, each at most once, booleans only `true`/`false`/`1`/`0` (any case);
//! `--help`/`-h` yields [`HelpRequested`] whatever else is given.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};

use crate::schedule::{parse_duration, Policy};

/// Default path of the kubeconfig the agent writes.
pub const DEFAULT_KUBECONFIG: &str = "/etc/cni/net.d/tern-kubeconfig";
/// Default in-cluster service-account directory.
pub const DEFAULT_SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Default CNI service account.
pub const DEFAULT_CNI_SA: &str = "tern-cni";
/// Default health/metrics address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9412";
/// Environment variable overriding the refresh interval.
pub const REFRESH_ENV: &str = "CNI_TOKEN_REFRESH_DURATION";

/// Everything `tern-agent run` needs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// API server URL (`https://host:port`), from `KUBERNETES_SERVICE_HOST`/`_PORT` or `--api-server`.
    pub api_server: String,
    /// Directory holding the agent's own `token`, `ca.crt` and `namespace` (re-read per request).
    pub sa_dir: PathBuf,
    /// Namespace of the CNI service account (`POD_NAMESPACE`, else `<sa_dir>/namespace`).
    pub namespace: String,
    /// The CNI service account whose tokens are requested.
    pub cni_service_account: String,
    /// Requested token lifetime (default 24 h).
    pub token_lifetime: Duration,
    /// Refresh and backoff settings.
    pub policy: Policy,
    /// Kubeconfig written for the plugin.
    pub kubeconfig: PathBuf,
    /// Agent channel socket.
    pub socket: PathBuf,
    /// `/healthz` and `/metrics` address.
    pub listen: SocketAddr,
    /// Deadline of each API request.
    pub request_timeout: Duration,
    /// How often wall-clock time is compared with the schedule (≤ 60 s).
    pub wall_check: Duration,
    /// Minimum spacing of channel-triggered refreshes (default 30 s).
    pub channel_min_interval: Duration,
    /// Read deadline for one channel request.
    pub channel_read_timeout: Duration,
}

/// One flag of a subcommand, as `--help` shows it.
#[derive(Debug, Clone, Copy)]
pub struct FlagSpec {
    /// Name without the leading `--`.
    pub name: &'static str,
    /// Placeholder for the value in `--help` (`BOOL` marks a boolean flag).
    pub value: &'static str,
    /// What `--help` shows as the default (empty: none).
    pub default: &'static str,
    /// Environment variables consulted when the flag is absent (empty: none).
    pub env: &'static str,
    /// One-line description.
    pub help: &'static str,
}

impl FlagSpec {
    /// Whether the flag takes `true`/`false`/`1`/`0`.
    pub fn is_bool(&self) -> bool {
        self.value == "BOOL"
    }
}

/// Returned (inside `anyhow::Error`) when `--help` or `-h` is among the arguments; the binary
/// prints the subcommand's help to stdout and exits 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelpRequested;

impl std::fmt::Display for HelpRequested {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("help requested")
    }
}

impl std::error::Error for HelpRequested {}

/// Parses a boolean flag value: `true`/`false`/`1`/`0`, any case.
///
/// # Errors
/// Anything else, naming the flag and the accepted forms.
pub fn parse_bool(flag: &str, v: &str) -> anyhow::Result<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => bail!("--{flag} takes true, false, 1 or 0, not {v:?}"),
    }
}

/// Parses `--name value` / `--name=value` pairs against `specs`.
///
/// A `--help`/`-h` anywhere yields [`HelpRequested`]. Boolean flags ([`FlagSpec::is_bool`]) are
/// checked here and stored as `"true"`/`"false"`.
///
/// # Errors
/// An unknown flag (naming the known ones), a stray argument, a flag without a value (a value
/// may not start with `--` unless given as `--name=value`), a flag given twice, or a bad boolean.
pub fn parse_flags(
    args: &[String],
    specs: &[FlagSpec],
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        return Err(HelpRequested.into());
    }
    let mut flags = std::collections::BTreeMap::new();
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        let Some(name) = a.strip_prefix("--") else {
            bail!("unexpected argument {a:?}; flags are --name value (see --help)")
        };
        let (name, inline) = match name.split_once('=') {
            Some((n, v)) => (n, Some(v.to_owned())),
            None => (name, None),
        };
        let Some(spec) = specs.iter().find(|s| s.name == name) else {
            let known: Vec<&str> = specs.iter().map(|s| s.name).collect();
            bail!("unknown flag --{name}; known: --{}", known.join(", --"));
        };
        let value = match inline {
            Some(v) => v,
            None => match it.next_if(|v| !v.starts_with("--")) {
                Some(v) => v.clone(),
                None => bail!("--{name} needs a value"),
            },
        };
        let value = if spec.is_bool() {
            parse_bool(name, &value)?.to_string()
        } else {
            value
        };
        if flags.insert(name.to_owned(), value).is_some() {
            bail!("--{name} given twice");
        }
    }
    Ok(flags)
}

/// The `--help` text of a subcommand: `usage`, then one block per flag (value, default,
/// environment), then `footer`.
pub fn help_text(usage: &str, specs: &[FlagSpec], footer: &str) -> String {
    let mut out = format!("{usage}\n\nflags (--name value or --name=value):\n");
    for s in specs {
        let head = format!("  --{} {}", s.name, s.value);
        out.push_str(&format!("{head:<40} {}", s.help));
        if s.is_bool() {
            out.push_str(" (true, false, 1 or 0)");
        }
        out.push('\n');
        let mut extra = Vec::new();
        if !s.default.is_empty() {
            extra.push(format!("default {}", s.default));
        }
        if !s.env.is_empty() {
            extra.push(format!("env {}", s.env));
        }
        if !extra.is_empty() {
            out.push_str(&format!("{:<40} [{}]\n", "", extra.join("; ")));
        }
    }
    out.push_str(&format!(
        "  {:<38} {}\n",
        "-h, --help", "print this help and exit"
    ));
    if !footer.is_empty() {
        out.push('\n');
        out.push_str(footer);
        out.push('\n');
    }
    out
}

/// Flags shared by `run` and `install` (in-cluster credentials and the CNI service account).
const API_SERVER: FlagSpec = FlagSpec {
    name: "api-server",
    value: "URL",
    default: "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT",
    env: "KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT",
    help: "API server (https only)",
};
const SA_DIR: FlagSpec = FlagSpec {
    name: "sa-dir",
    value: "DIR",
    default: DEFAULT_SA_DIR,
    env: "",
    help: "the agent's own token, ca.crt and namespace (re-read per request)",
};
const NAMESPACE: FlagSpec = FlagSpec {
    name: "namespace",
    value: "NS",
    default: "$POD_NAMESPACE, else <sa-dir>/namespace, else default",
    env: "POD_NAMESPACE",
    help: "namespace of the CNI service account",
};
const SERVICE_ACCOUNT: FlagSpec = FlagSpec {
    name: "service-account",
    value: "NAME",
    default: DEFAULT_CNI_SA,
    env: "TERN_CNI_SERVICE_ACCOUNT",
    help: "service account whose tokens are requested",
};
const TOKEN_LIFETIME: FlagSpec = FlagSpec {
    name: "token-lifetime",
    value: "DURATION",
    default: "24h",
    env: "",
    help: "requested token lifetime (at least 10m, never 3607s)",
};

/// `tern-agent run` flags.
pub const RUN_FLAGS: &[FlagSpec] = &[
    API_SERVER,
    SA_DIR,
    NAMESPACE,
    SERVICE_ACCOUNT,
    TOKEN_LIFETIME,
    FlagSpec {
        name: "kubeconfig",
        value: "PATH",
        default: DEFAULT_KUBECONFIG,
        env: "",
        help: "kubeconfig written for the plugin (mode 0600)",
    },
    FlagSpec {
        name: "socket",
        value: "PATH",
        default: tern_kube::channel::DEFAULT_SOCKET,
        env: "",
        help: "agent channel socket",
    },
    FlagSpec {
        name: "listen",
        value: "ADDR",
        default: DEFAULT_LISTEN,
        env: "",
        help: "/healthz and /metrics address",
    },
    FlagSpec {
        name: "allow-non-loopback-listen",
        value: "BOOL",
        default: "false",
        env: "",
        help: "allow a non-loopback --listen",
    },
    FlagSpec {
        name: "request-timeout",
        value: "DURATION",
        default: "10s",
        env: "",
        help: "deadline of each API request",
    },
    FlagSpec {
        name: "backoff-base",
        value: "DURATION",
        default: "1s",
        env: "",
        help: "first retry ceiling after a failure",
    },
    FlagSpec {
        name: "backoff-cap",
        value: "DURATION",
        default: "5m",
        env: "",
        help: "largest retry ceiling",
    },
    FlagSpec {
        name: "wall-check",
        value: "DURATION",
        default: "30s",
        env: "",
        help: "how often the wall clock is compared with the schedule (at most 1m)",
    },
    FlagSpec {
        name: "channel-interval",
        value: "DURATION",
        default: "30s",
        env: "",
        help: "minimum spacing of channel-triggered refreshes",
    },
];

/// Environment of `tern-agent run` that has no flag.
pub const RUN_ENV_HELP: &str = "environment:
  CNI_TOKEN_REFRESH_DURATION   refresh interval instead of a quarter to a half of the lifetime
                               (e.g. 10m, 2h; at least 1m, below the token lifetime)
  TERN_LOG                     log level: debug, info (default) or warn
durations: a number with a unit, e.g. 500ms, 30s, 10m, 24h";

/// The shared credential flags, for `install`.
pub(crate) const CREDENTIAL_FLAGS: [FlagSpec; 5] = [
    API_SERVER,
    SA_DIR,
    NAMESPACE,
    SERVICE_ACCOUNT,
    TOKEN_LIFETIME,
];

/// The API server URL from `--api-server` or the in-cluster environment.
///
/// # Errors
/// Neither is set, or the URL is not https.
pub fn api_server_from(
    flag: Option<&String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<String> {
    let api_server = match flag {
        Some(s) => s.trim_end_matches('/').to_owned(),
        None => {
            let host = env("KUBERNETES_SERVICE_HOST").filter(|h| !h.is_empty());
            let port = env("KUBERNETES_SERVICE_PORT").filter(|p| !p.is_empty());
            let (Some(host), Some(port)) = (host, port) else {
                bail!("unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined (or pass --api-server)");
            };
            if host.contains(':') {
                format!("https://[{host}]:{port}")
            } else {
                format!("https://{host}:{port}")
            }
        }
    };
    if !api_server.starts_with("https://") {
        bail!("--api-server {api_server} must be https");
    }
    Ok(api_server)
}

/// The namespace from `--namespace`, `POD_NAMESPACE`, `<sa_dir>/namespace`, else `default`.
pub fn namespace_from(
    flag: Option<&String>,
    env: &dyn Fn(&str) -> Option<String>,
    sa_dir: &std::path::Path,
) -> String {
    match flag
        .cloned()
        .or_else(|| env("POD_NAMESPACE"))
        .filter(|n| !n.is_empty())
    {
        Some(ns) => ns,
        None => std::fs::read_to_string(sa_dir.join("namespace"))
            .map(|s| s.trim().to_owned())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into()),
    }
}

impl RunConfig {
    /// Defaults for everything but the API server and namespace.
    pub fn with_defaults(api_server: String, namespace: String) -> Self {
        RunConfig {
            api_server,
            sa_dir: DEFAULT_SA_DIR.into(),
            namespace,
            cni_service_account: DEFAULT_CNI_SA.into(),
            token_lifetime: Duration::from_secs(24 * 3600),
            policy: Policy::default(),
            kubeconfig: DEFAULT_KUBECONFIG.into(),
            socket: tern_kube::channel::DEFAULT_SOCKET.into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 9412)),
            request_timeout: Duration::from_secs(10),
            wall_check: Duration::from_secs(30),
            channel_min_interval: Duration::from_secs(30),
            channel_read_timeout: Duration::from_secs(2),
        }
    }

    /// Builds the configuration from `args` (after `run`) and the environment lookup `env`.
    ///
    /// # Errors
    /// A message naming the bad flag or variable and what is accepted.
    pub fn from_args(
        args: &[String],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Self> {
        let flags = parse_flags(args, RUN_FLAGS)?;
        let dur = |flag: &str, default: Duration| -> anyhow::Result<Duration> {
            flags.get(flag).map_or(Ok(default), |v| {
                parse_duration(v).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
            })
        };
        let api_server = api_server_from(flags.get("api-server"), env)?;
        let sa_dir = PathBuf::from(flags.get("sa-dir").map_or(DEFAULT_SA_DIR, String::as_str));
        let namespace = namespace_from(flags.get("namespace"), env, &sa_dir);
        let mut c = RunConfig::with_defaults(api_server, namespace);
        c.sa_dir = sa_dir;
        if let Some(sa) = flags
            .get("service-account")
            .cloned()
            .or_else(|| env("TERN_CNI_SERVICE_ACCOUNT"))
        {
            c.cni_service_account = sa;
        }
        c.token_lifetime = dur("token-lifetime", c.token_lifetime)?;
        c.kubeconfig = flags.get("kubeconfig").map_or(c.kubeconfig, PathBuf::from);
        c.socket = flags.get("socket").map_or(c.socket, PathBuf::from);
        if let Some(l) = flags.get("listen") {
            c.listen = l.parse().with_context(|| {
                format!("--listen {l:?} is not an address such as {DEFAULT_LISTEN}")
            })?;
        }
        c.request_timeout = dur("request-timeout", c.request_timeout)?;
        c.policy.backoff_base = dur("backoff-base", c.policy.backoff_base)?;
        c.policy.backoff_cap = dur("backoff-cap", c.policy.backoff_cap)?;
        c.wall_check = dur("wall-check", c.wall_check)?;
        c.channel_min_interval = dur("channel-interval", c.channel_min_interval)?;
        if let Some(v) = env(REFRESH_ENV).filter(|v| !v.is_empty()) {
            c.policy.refresh_override =
                Some(parse_duration(&v).map_err(|e| anyhow::anyhow!("{REFRESH_ENV}: {e}"))?);
        }
        let allow_remote = flags
            .get("allow-non-loopback-listen")
            .is_some_and(|v| v == "true"); // normalised by parse_flags
        c.validate(allow_remote)?;
        Ok(c)
    }

    /// Checks the invariants stated in the module docs.
    ///
    /// # Errors
    /// A message naming the setting and what is accepted.
    pub fn validate(&self, allow_non_loopback: bool) -> anyhow::Result<()> {
        let life = self.token_lifetime.as_secs();
        if life < 600 {
            bail!("--token-lifetime must be at least 10m (the API server refuses shorter tokens)");
        }
        if life == 3607 {
            bail!("--token-lifetime must not be exactly 3607s: the API server would mint a one-year token");
        }
        if let Some(o) = self.policy.refresh_override {
            if o < Duration::from_secs(60) || o >= self.token_lifetime {
                bail!("{REFRESH_ENV} must be at least 1m and shorter than the token lifetime ({life}s), e.g. 10m or 2h");
            }
        }
        if self.wall_check.is_zero() || self.wall_check > Duration::from_secs(60) {
            bail!("--wall-check must be between 1ms and 1m");
        }
        if self.policy.backoff_base.is_zero() || self.policy.backoff_cap < self.policy.backoff_base
        {
            bail!("--backoff-base must be positive and not above --backoff-cap");
        }
        if self.request_timeout.is_zero() {
            bail!("--request-timeout must be positive");
        }
        if !allow_non_loopback && !self.listen.ip().is_loopback() {
            bail!("--listen {} is not loopback; pass --allow-non-loopback-listen true to expose metrics", self.listen);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn in_cluster_env_and_defaults() {
        let env = env_of(&[
            ("KUBERNETES_SERVICE_HOST", "fd00::1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("POD_NAMESPACE", "tern"),
        ]);
        let c = RunConfig::from_args(&[], &env).unwrap();
        assert_eq!(c.api_server, "https://[fd00::1]:443");
        assert_eq!(c.namespace, "tern");
        assert_eq!(c.token_lifetime, Duration::from_secs(86_400));
        assert_eq!(c.policy.backoff_cap, Duration::from_secs(300));
        assert!(c.listen.ip().is_loopback());
    }

    #[test]
    fn refresh_override_is_strict() {
        let env = env_of(&[
            ("KUBERNETES_SERVICE_HOST", "h"),
            ("KUBERNETES_SERVICE_PORT", "1"),
            ("CNI_TOKEN_REFRESH_DURATION", "10"),
        ]);
        let e = RunConfig::from_args(&[], &env).unwrap_err().to_string();
        assert!(
            e.contains("CNI_TOKEN_REFRESH_DURATION") && e.contains("such as 10m"),
            "{e}"
        );
        let env = env_of(&[
            ("KUBERNETES_SERVICE_HOST", "h"),
            ("KUBERNETES_SERVICE_PORT", "1"),
            ("CNI_TOKEN_REFRESH_DURATION", "10s"),
        ]);
        assert!(RunConfig::from_args(&[], &env)
            .unwrap_err()
            .to_string()
            .contains("at least 1m"));
        let env = env_of(&[
            ("KUBERNETES_SERVICE_HOST", "h"),
            ("KUBERNETES_SERVICE_PORT", "1"),
            ("CNI_TOKEN_REFRESH_DURATION", "10m"),
        ]);
        assert_eq!(
            RunConfig::from_args(&[], &env)
                .unwrap()
                .policy
                .refresh_override,
            Some(Duration::from_secs(600))
        );
    }

    #[test]
    fn refuses_3607_short_lifetimes_and_exposed_listen() {
        let env = env_of(&[]);
        let a = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(RunConfig::from_args(&[], &env)
            .unwrap_err()
            .to_string()
            .contains("KUBERNETES_SERVICE_HOST"));
        let base = ["--api-server", "https://h:1", "--namespace", "n"];
        let with = |extra: &[&str]| {
            let mut v = a(&base);
            v.extend(a(extra));
            RunConfig::from_args(&v, &env)
        };
        assert!(with(&["--token-lifetime", "3607s"])
            .unwrap_err()
            .to_string()
            .contains("3607"));
        assert!(with(&["--token-lifetime", "5m"]).is_err());
        assert!(with(&["--listen", "0.0.0.0:9412"])
            .unwrap_err()
            .to_string()
            .contains("not loopback"));
        assert!(with(&["--wall-check", "2m"]).is_err());
        assert!(with(&["--bogus", "1"])
            .unwrap_err()
            .to_string()
            .contains("unknown flag"));
        assert!(with(&["--token-lifetime", "1h"]).is_ok());
    }
}

//! `tern-agent run` settings from the command line and the environment: the flag tables, the
//! in-cluster API server and namespace, and [`RunConfig::from_args`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};

use super::flags::{parse_flags, FlagSpec};
use super::{
    RunConfig, DEFAULT_CNI_SA, DEFAULT_KUBECONFIG, DEFAULT_LISTEN, DEFAULT_SA_DIR, REFRESH_ENV,
};
use crate::schedule::parse_duration;

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
}

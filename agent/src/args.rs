//! The command line's shared pieces, a leaf of the agent's modules (it imports none of them):
//! the flags more than one subcommand takes ([`ApiArgs`], [`CredentialArgs`]), their defaults,
//! the API server and namespace they resolve to, the value parsers (strict booleans, humantime
//! durations, plugin lists), and clap's errors turned into one-line messages
//! ([`parse_subcommand`], [`flag_error`]). The subcommands themselves are in `cli.rs`; each
//! subcommand's own flags beside its code (`config`, `install`, `uninstall`, `routes`, `egress`).
//!
//! Invariants: as `cli.rs`'s — strict flags, strict booleans, an environment variable read only
//! where a flag names it as its fallback.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Args, FromArgMatches};

/// Default in-cluster service-account directory.
pub const DEFAULT_SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Default CNI service account.
pub const DEFAULT_CNI_SA: &str = "tern-cni";

/// Where the API server is and the agent's own credentials: shared by `run`, `install` and
/// `uninstall` (whose `--if-daemonset-deleted` reads its DaemonSet with them).
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// API server (https only) [default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT]
    #[arg(long, value_name = "URL")]
    pub api_server: Option<String>,
    /// The agent's own token, ca.crt and namespace (re-read per request)
    #[arg(long, value_name = "DIR", default_value = DEFAULT_SA_DIR)]
    pub sa_dir: PathBuf,
    /// The agent's namespace: its CNI service account's, and uninstall's DaemonSet's
    /// [default: <sa-dir>/namespace, else default]
    #[arg(long, value_name = "NS", env = "POD_NAMESPACE", hide_env_values = true)]
    pub namespace: Option<String>,
}

/// [`ApiArgs`] and the CNI service account whose tokens are minted: shared by `run` and
/// `install`.
#[derive(Debug, Clone, Args)]
pub struct CredentialArgs {
    /// The API server and the agent's own credentials.
    #[command(flatten)]
    pub api: ApiArgs,
    /// Service account whose tokens are requested
    #[arg(
        long,
        value_name = "NAME",
        default_value = DEFAULT_CNI_SA,
        env = "TERN_CNI_SERVICE_ACCOUNT",
        hide_env_values = true
    )]
    pub service_account: String,
    /// Requested token lifetime (at least 10m, never 3607s)
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_duration)]
    pub token_lifetime: Duration,
}

/// Parses a boolean flag value: `true`/`false`/`1`/`0`, any case.
///
/// # Errors
/// Anything else, quoting it and naming the accepted forms.
pub fn parse_bool(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!("takes true, false, 1 or 0, not {v:?}")),
    }
}

/// A flag that takes a value, strictly `true`, `false`, `1` or `0` ([`parse_bool`]), where clap's
/// own `bool` would take none: `--egress-nat false` means what it says. Read it with `.0`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Switch(pub bool);

impl clap::builder::ValueParserFactory for Switch {
    type Parser = fn(&str) -> Result<Switch, String>;
    fn value_parser() -> Self::Parser {
        |v| parse_bool(v).map(Switch)
    }
}

/// Parses a duration with humantime (`500ms`, `30s`, `10m`, `1h30m`, `24h`): a number and a unit
/// for each part, no sign, no bare number.
///
/// # Errors
/// A message saying what is accepted.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| {
        format!("{text:?} is not a duration ({e}): use a number with a unit, such as 10m, 1h30m, 90s or 500ms")
    })
}

/// Parses the flags of one subcommand (`args` without the subcommand's name) as the binary does.
///
/// # Errors
/// As [`flag_error`]; `--help` is an error too (its text is the help).
pub fn parse_subcommand<T: Args + FromArgMatches>(
    name: &str,
    args: &[String],
) -> anyhow::Result<T> {
    let cmd =
        T::augment_args(clap::Command::new(format!("tern-agent {name}")).no_binary_name(true));
    let m = cmd
        .clone()
        .try_get_matches_from(args)
        .map_err(|e| flag_error(&e, &cmd))?;
    T::from_arg_matches(&m).map_err(|e| flag_error(&e, &cmd))
}

/// Turns a clap error about `cmd`'s flags into one line: `unknown flag --x; known: --a, --b`,
/// `--x given twice`, `--x needs a value`, `--x: <why the value is refused>`.
pub fn flag_error(e: &clap::Error, cmd: &clap::Command) -> anyhow::Error {
    let text = |k: ContextKind| match e.get(k) {
        Some(ContextValue::String(s)) => s.clone(),
        Some(ContextValue::Strings(v)) => v.join(" "),
        _ => String::new(),
    };
    // "--namespace <NS>" -> "--namespace"; "--bogus=1" -> "--bogus".
    let arg = text(ContextKind::InvalidArg);
    let flag = arg.split([' ', '=']).next().unwrap_or_default().to_owned();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            anyhow::anyhow!("{}", e.render())
        }
        ErrorKind::UnknownArgument if flag.starts_with('-') => {
            let known: Vec<String> = cmd
                .get_arguments()
                .filter_map(clap::Arg::get_long)
                .filter(|l| *l != "help")
                .map(|l| format!("--{l}"))
                .collect();
            anyhow::anyhow!("unknown flag {flag}; known: {}", known.join(", "))
        }
        ErrorKind::UnknownArgument => {
            anyhow::anyhow!("unexpected argument {arg:?}; flags are --name value (see --help)")
        }
        ErrorKind::ArgumentConflict => anyhow::anyhow!("{flag} given twice"),
        ErrorKind::InvalidValue if text(ContextKind::InvalidValue).is_empty() => {
            anyhow::anyhow!("{flag} needs a value")
        }
        ErrorKind::ValueValidation | ErrorKind::InvalidValue => {
            let why = std::error::Error::source(e).map_or_else(
                || format!("{:?} is not accepted", text(ContextKind::InvalidValue)),
                ToString::to_string,
            );
            anyhow::anyhow!("{flag} {why}")
        }
        _ => {
            let first = e.kind().as_str().unwrap_or("bad command line");
            anyhow::anyhow!("{first}: {arg}")
        }
    }
}

/// Parses `--plugins`: comma-separated plain file names, no duplicates.
///
/// # Errors
/// An empty list or entry, a name with `/` or that is `.`/`..`, or a name given twice.
pub fn parse_plugins(list: &str) -> anyhow::Result<Vec<String>> {
    parse_names("--plugins", list)
}

/// Parses a comma-separated list of plain file names given to `flag` (named in the errors), no
/// duplicates.
///
/// # Errors
/// An empty list or entry, a name with `/` or that is `.`/`..`, or a name given twice.
pub fn parse_names(flag: &str, list: &str) -> anyhow::Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for p in list.split(',').map(str::trim) {
        if p.is_empty() || p == "." || p == ".." || p.contains('/') || p.contains('\0') {
            anyhow::bail!(
                "{flag} {list:?}: each entry must be a plain file name such as tern-tuning"
            );
        }
        if out.iter().any(|o| o == p) {
            anyhow::bail!("{flag} {list:?}: {p} listed twice");
        }
        out.push(p.to_owned());
    }
    Ok(out)
}

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

/// The namespace from `--namespace` (or its fallback `POD_NAMESPACE`), `<sa_dir>/namespace`,
/// else `default`.
pub fn namespace_from(flag: Option<&String>, sa_dir: &std::path::Path) -> String {
    match flag.cloned().filter(|n| !n.is_empty()) {
        Some(ns) => ns,
        None => std::fs::read_to_string(sa_dir.join("namespace"))
            .map(|s| s.trim().to_owned())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_humantime_and_refuse_bare_numbers() {
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        for bad in ["", "10", "-5m", "m", "10x", "ten minutes", "1e3s"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains("such as 10m"), "{bad}: {e}");
        }
    }

    #[test]
    fn booleans_are_strict() {
        for (v, want) in [
            ("true", true),
            ("TRUE", true),
            ("1", true),
            ("False", false),
            ("0", false),
        ] {
            assert_eq!(parse_bool(v), Ok(want));
        }
        for v in ["yes", "on", "", "truee"] {
            assert!(parse_bool(v).unwrap_err().contains("true, false, 1 or 0"));
        }
    }
}

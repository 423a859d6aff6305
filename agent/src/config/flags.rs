//! Strict flag parsing shared by `run` and `install`: `--name value` / `--name=value` against a
//! subcommand's [`FlagSpec`] table, each flag at most once, booleans only `true`/`false`/`1`/`0`
//! (any case); `--help`/`-h` yields [`HelpRequested`] whatever else is given.

use anyhow::bail;

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

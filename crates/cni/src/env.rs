//! The invocation environment (CNI spec section 2, "Parameters"): `CNI_COMMAND`, `CNI_CONTAINERID`,
//! `CNI_NETNS`, `CNI_IFNAME`, `CNI_ARGS`, `CNI_PATH`, and the validated newtypes built from them.
//!
//! Validation follows the reference library (`pkg/utils`): container IDs and network names match
//! `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`; interface names are 1–15 bytes, not `.` or `..`, without `/`,
//! `:` or whitespace.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

use crate::error::{code, Error};

/// Where environment variables come from: the process, or a map in tests.
pub trait EnvSource {
    /// The value of `key`, `None` when unset.
    fn var(&self, key: &str) -> Option<String>;
}

/// The process environment.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn var(&self, key: &str) -> Option<String> {
        std::env::var(key).ok()
    }
}

impl EnvSource for HashMap<String, String> {
    fn var(&self, key: &str) -> Option<String> {
        self.get(key).cloned()
    }
}

/// A CNI verb (`CNI_COMMAND`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verb {
    /// Add a container to a network, or apply modifications.
    Add,
    /// Remove a container from a network, or undo modifications.
    Del,
    /// Check that a container's networking is as expected.
    Check,
    /// Report whether the plugin is ready to serve ADD (1.1.0).
    Status,
    /// Clean up resources of attachments not in `cni.dev/valid-attachments` (1.1.0).
    Gc,
    /// Report the supported versions.
    Version,
}

impl Verb {
    /// Parses `CNI_COMMAND`.
    ///
    /// # Errors
    /// Code 4 `unknown CNI_COMMAND: X` for anything but the six verbs.
    pub fn parse(s: &str) -> Result<Verb, Error> {
        Ok(match s {
            "ADD" => Verb::Add,
            "DEL" => Verb::Del,
            "CHECK" => Verb::Check,
            "STATUS" => Verb::Status,
            "GC" => Verb::Gc,
            "VERSION" => Verb::Version,
            other => return Err(Error::invalid_env(format!("unknown CNI_COMMAND: {other}"))),
        })
    }

    /// The verb as spelled in `CNI_COMMAND`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Add => "ADD",
            Verb::Del => "DEL",
            Verb::Check => "CHECK",
            Verb::Status => "STATUS",
            Verb::Gc => "GC",
            Verb::Version => "VERSION",
        }
    }

    /// The variables this verb requires, as the reference dispatcher (`skel`) requires them.
    pub fn required_vars(self) -> &'static [&'static str] {
        match self {
            Verb::Add | Verb::Check => &[
                "CNI_COMMAND",
                "CNI_CONTAINERID",
                "CNI_NETNS",
                "CNI_IFNAME",
                "CNI_PATH",
            ],
            Verb::Del => &["CNI_COMMAND", "CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"],
            Verb::Status | Verb::Gc => &["CNI_COMMAND", "CNI_PATH"],
            Verb::Version => &["CNI_COMMAND"],
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn is_id_shaped(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphanumeric() => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// A validated container ID (`CNI_CONTAINERID`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContainerId(String);

impl ContainerId {
    /// Validates a container ID.
    ///
    /// # Errors
    /// Code 3 `missing containerID` when empty; code 4 `invalid characters in containerID` (details:
    /// the ID) when it does not match `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`.
    pub fn parse(s: &str) -> Result<ContainerId, Error> {
        if s.is_empty() {
            return Err(Error::new(code::UNKNOWN_CONTAINER, "missing containerID"));
        }
        if !is_id_shaped(s) {
            return Err(Error::invalid_env("invalid characters in containerID").with_details(s));
        }
        Ok(ContainerId(s.to_owned()))
    }

    /// The ID.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A validated Linux interface name (`CNI_IFNAME`): 1–15 bytes, not `.`/`..`, no `/`, `:` or
/// whitespace. Dots inside (`eth0.100`) are legal.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IfName(String);

/// IFNAMSIZ (16) less the terminating NUL.
pub const MAX_IFNAME_LEN: usize = 15;

impl IfName {
    /// Validates an interface name.
    ///
    /// # Errors
    /// Code 4 with the reference library's messages (`interface name is empty`, `… is too long`,
    /// `… is . or ..`, `… contains / or : or whitespace characters`).
    pub fn parse(s: &str) -> Result<IfName, Error> {
        if s.is_empty() {
            return Err(Error::invalid_env("interface name is empty"));
        }
        if s.len() > MAX_IFNAME_LEN {
            return Err(Error::invalid_env("interface name is too long")
                .with_details("interface name should be less than 16 characters"));
        }
        if s == "." || s == ".." {
            return Err(Error::invalid_env("interface name is . or .."));
        }
        if s.chars().any(|c| c == '/' || c == ':' || c.is_whitespace()) {
            return Err(Error::invalid_env(
                "interface name contains / or : or whitespace characters",
            ));
        }
        Ok(IfName(s.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IfName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Validates a network name (`name` in the netconf).
///
/// # Errors
/// Code 7 `missing network name` or `invalid characters found in network name`.
pub fn validate_network_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::invalid_config("missing network name"));
    }
    if !is_id_shaped(name) {
        return Err(
            Error::invalid_config("invalid characters found in network name").with_details(name),
        );
    }
    Ok(())
}

/// `CNI_ARGS`: `K=V;K2=V2` pairs (CONVENTIONS.md, "CNI_ARGS"; reference `types.LoadArgs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
}

impl CniArgs {
    /// Parses `CNI_ARGS`; empty means no arguments. Stricter than the reference's `LoadArgs`
    /// where it would be silent or a plugin would fail later: a key given twice (Go keeps the
    /// last, tern's readers the first: they would disagree), an empty key, and an
    /// `IgnoreUnknown` that is not a boolean (`1`, `0`, `true`, `false`, any case; the reference
    /// plugins answer 999 for it) are refused here, before any plugin acts.
    ///
    /// # Errors
    /// Code 4 `ARGS: invalid pair "x"` for a pair without exactly one `=` or with an empty key;
    /// code 4 `ARGS: duplicate key "K"`; code 4 `ARGS: IgnoreUnknown must be a boolean`.
    pub fn parse(s: &str) -> Result<CniArgs, Error> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for pair in s.split(';').filter(|p| !p.is_empty()) {
            let mut kv = pair.split('=');
            match (kv.next(), kv.next(), kv.next()) {
                (Some(k), Some(v), None) if !k.is_empty() => {
                    if pairs.iter().any(|(seen, _)| seen == k) {
                        return Err(Error::invalid_env(format!("ARGS: duplicate key {k:?}")));
                    }
                    pairs.push((k.to_owned(), v.to_owned()));
                }
                _ => return Err(Error::invalid_env(format!("ARGS: invalid pair {pair:?}"))),
            }
        }
        let args = CniArgs { pairs };
        if let Some(v) = args.get("IgnoreUnknown") {
            if !["1", "0", "true", "false"].contains(&v.to_ascii_lowercase().as_str()) {
                return Err(Error::invalid_env(format!(
                    "ARGS: IgnoreUnknown must be a boolean (1, 0, true or false), got {v:?}"
                )));
            }
        }
        Ok(args)
    }

    /// The value of `key` (case-sensitive, as the reference matches struct field names).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// All pairs in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// Whether `IgnoreUnknown` is `1` or `true` (any case).
    pub fn ignore_unknown(&self) -> bool {
        self.get("IgnoreUnknown")
            .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
    }

    /// Refuses keys outside `known` unless `IgnoreUnknown` is set, as the reference does.
    ///
    /// # Errors
    /// Code 4 `ARGS: unknown args ["K=V"]`.
    pub fn check_known(&self, known: &[&str]) -> Result<(), Error> {
        if self.ignore_unknown() {
            return Ok(());
        }
        let unknown: Vec<String> = self
            .pairs
            .iter()
            .filter(|(k, _)| k != "IgnoreUnknown" && !known.contains(&k.as_str()))
            .map(|(k, v)| format!("{:?}", format!("{k}={v}")))
            .collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid_env(format!(
                "ARGS: unknown args [{}]",
                unknown.join(", ")
            )))
        }
    }
}

/// `CNI_PATH` split on `:`, empty entries dropped.
pub fn split_cni_path(s: &str) -> Vec<PathBuf> {
    s.split(':')
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .collect()
}

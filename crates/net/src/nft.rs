//! nftables through the `nft` tool (Debian package `nftables`): a script applied as one
//! transaction (`nft -f -`), a table listed without counters, a chain's rules read back as JSON
//! with their handles and comments.
//!
//! Invariants: every change goes through [`Nft::apply`], which the kernel commits whole or not at
//! all (`nft -f` sends one netlink batch); names that reach a script are checked by
//! [`check_name`] and comments by [`comment`], so no input can add a statement. The tool runs in
//! the calling thread's network namespace, with no shell.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;

/// Where the tool is looked for, in order, before `PATH`.
pub const NFT_PATHS: &[&str] = &["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft", "/bin/nft"];

/// Longest rule comment nft accepts (`NFT_USERDATA_MAXLEN` is 256; nft itself refuses past 128).
pub const COMMENT_MAX: usize = 128;

/// Failures of the `nft` tool.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    /// No `nft` binary in [`NFT_PATHS`] or `PATH`.
    #[error("the nft tool was not found in {} or PATH: install nftables", NFT_PATHS.join(", "))]
    NotFound,
    /// The tool could not be started or its output read.
    #[error("run {bin}: {source}")]
    Spawn {
        /// The binary.
        bin: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The tool exited with an error (the transaction, if any, was not committed).
    #[error("nft {what} failed: {stderr}")]
    Failed {
        /// What was asked (`-f -`, `list table inet x`).
        what: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// The tool's JSON output did not parse.
    #[error("nft {what}: unexpected JSON output: {why}")]
    Json {
        /// What was asked.
        what: String,
        /// Why.
        why: String,
    },
    /// A name that may not appear in a script.
    #[error("{0:?} is not a valid nftables name (letters, digits, _ and -, at most 64 bytes, starting with a letter)")]
    BadName(String),
}

/// One rule of a chain, as `nft -j list chain` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The kernel's handle, for `delete rule … handle N`.
    pub handle: u64,
    /// The rule's comment, when it has one.
    pub comment: Option<String>,
}

/// The `nft` tool.
#[derive(Clone, Debug)]
pub struct Nft {
    bin: PathBuf,
}

/// Checks a table or chain name: `[A-Za-z][A-Za-z0-9_-]*`, at most 64 bytes (`NFT_NAME_MAXLEN`
/// 256, but short names keep listings readable).
///
/// # Errors
/// [`NftError::BadName`].
pub fn check_name(name: &str) -> Result<(), NftError> {
    let ok = name.len() <= 64
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(NftError::BadName(name.to_owned()))
    }
}

/// A rule comment as a quoted nft string: characters other than printable ASCII, `"` and `\`
/// become `_`, and the text is cut to [`COMMENT_MAX`] bytes.
pub fn comment(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .take(COMMENT_MAX)
        .collect();
    format!("\"{clean}\"")
}

#[derive(Deserialize)]
struct Listing {
    nftables: Vec<serde_json::Value>,
}

impl Nft {
    /// The tool at `bin`.
    pub fn at(bin: &Path) -> Nft {
        Nft {
            bin: bin.to_path_buf(),
        }
    }

    /// The first executable `nft` in [`NFT_PATHS`], then in `PATH`.
    ///
    /// # Errors
    /// [`NftError::NotFound`].
    pub fn find() -> Result<Nft, NftError> {
        let path_dirs = std::env::var_os("PATH")
            .map(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join("nft"))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        NFT_PATHS
            .iter()
            .map(PathBuf::from)
            .chain(path_dirs)
            .find(|p| is_executable(p))
            .map(|bin| Nft { bin })
            .ok_or(NftError::NotFound)
    }

    /// The binary in use.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    fn run(&self, args: &[&str], stdin: Option<&str>) -> Result<String, NftError> {
        let what = args.join(" ");
        let spawn = |source| NftError::Spawn {
            bin: self.bin.clone(),
            source,
        };
        let mut child = Command::new(&self.bin)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn)?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // A script is a few hundred bytes: the pipe takes it whole before nft reads.
            pipe.write_all(text.as_bytes()).map_err(spawn)?;
        }
        let out = child.wait_with_output().map_err(spawn)?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            Err(NftError::Failed {
                what,
                stderr: if stderr.is_empty() {
                    out.status.to_string()
                } else {
                    stderr
                },
            })
        }
    }

    /// Applies `script` (nft syntax, one command per line) as one transaction: all of it or none.
    ///
    /// # Errors
    /// [`NftError::Spawn`], or [`NftError::Failed`] with nft's message.
    pub fn apply(&self, script: &str) -> Result<(), NftError> {
        self.run(&["-f", "-"], Some(script)).map(drop)
    }

    /// `nft -s list table FAMILY NAME`: the table as text without counters; `None` when it does
    /// not exist.
    ///
    /// # Errors
    /// As [`Nft::apply`], for anything but a missing table.
    pub fn list_table(&self, family: &str, table: &str) -> Result<Option<String>, NftError> {
        check_name(table)?;
        match self.run(&["-s", "list", "table", family, table], None) {
            Ok(text) => Ok(Some(text)),
            Err(e) if is_missing(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The rules of one chain with their handles and comments; empty when the table or chain
    /// does not exist.
    ///
    /// # Errors
    /// As [`Nft::apply`]; [`NftError::Json`] for output that does not parse.
    pub fn rules(&self, family: &str, table: &str, chain: &str) -> Result<Vec<Rule>, NftError> {
        check_name(table)?;
        check_name(chain)?;
        let args = ["-j", "list", "chain", family, table, chain];
        let text = match self.run(&args, None) {
            Ok(t) => t,
            Err(e) if is_missing(&e) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        parse_rules(&text).map_err(|why| NftError::Json {
            what: args.join(" "),
            why,
        })
    }
}

impl Nft {
    /// `nft -s list KIND FAMILY TABLE NAME` (`chain`, `set`, `map`, `limit`): one object as
    /// text, without counters; `None` when it or its table does not exist.
    ///
    /// Cost (nft 1.0.6): a set, map or limit is read alone (milliseconds at any table size); a
    /// chain is not — nft fetches every set's elements of the table first (about 0.5 s of CPU
    /// and 144 MB at 400,000 elements, `tern-bench trace-check`).
    ///
    /// # Errors
    /// As [`Nft::apply`]; [`NftError::BadName`] for a kind or name that is not a name.
    pub fn list_object(
        &self,
        kind: &str,
        family: &str,
        table: &str,
        name: &str,
    ) -> Result<Option<String>, NftError> {
        self.list(&["-s"], kind, family, table, name)
    }

    /// `nft -j list KIND FAMILY TABLE NAME`: the object (the value of its `KIND` key: a set's
    /// `elem`, a map's `elem` of `[key, verdict]` pairs...); `None` when it or its table does
    /// not exist. Costs as [`Nft::list_object`].
    ///
    /// # Errors
    /// As [`Nft::list_object`]; [`NftError::Json`] for output that does not parse.
    pub fn list_json(
        &self,
        kind: &str,
        family: &str,
        table: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, NftError> {
        let Some(text) = self.list(&["-j"], kind, family, table, name)? else {
            return Ok(None);
        };
        let what = format!("-j list {kind} {family} {table} {name}");
        let listing: Listing = serde_json::from_str(&text).map_err(|e| NftError::Json {
            what: what.clone(),
            why: e.to_string(),
        })?;
        let object = listing
            .nftables
            .into_iter()
            .find_map(|mut v| v.get_mut(kind).map(serde_json::Value::take));
        object.map(Some).ok_or(NftError::Json {
            what,
            why: format!("no {kind} in the output"),
        })
    }

    fn list(
        &self,
        flags: &[&str],
        kind: &str,
        family: &str,
        table: &str,
        name: &str,
    ) -> Result<Option<String>, NftError> {
        for n in [kind, family, table, name] {
            check_name(n)?;
        }
        let mut args = flags.to_vec();
        args.extend(["list", kind, family, table, name]);
        match self.run(&args, None) {
            Ok(text) => Ok(Some(text)),
            Err(e) if is_missing(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The rules in `nft -j list chain` output.
fn parse_rules(text: &str) -> Result<Vec<Rule>, String> {
    let listing: Listing = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let mut rules = Vec::new();
    for item in &listing.nftables {
        let Some(rule) = item.get("rule") else {
            continue;
        };
        let handle = rule
            .get("handle")
            .and_then(serde_json::Value::as_u64)
            .ok_or("a rule without a handle")?;
        let comment = rule
            .get("comment")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned);
        rules.push(Rule { handle, comment });
    }
    Ok(rules)
}

/// Whether nft failed because the table or chain does not exist (`ENOENT`).
fn is_missing(e: &NftError) -> bool {
    matches!(e, NftError::Failed { stderr, .. } if stderr.contains("No such file or directory"))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_comments_cannot_add_statements() {
        for good in ["tern_nat", "masq", "a-1"] {
            check_name(good).unwrap();
        }
        for bad in ["", "1x", "a b", "x;flush ruleset", "a\"", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert_eq!(comment("a\"; flush ruleset\n"), "\"a_; flush ruleset_\"");
        assert_eq!(comment(&"x".repeat(300)).len(), COMMENT_MAX + 2);
    }

    #[test]
    fn rules_from_json() {
        let text = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}},
            {"chain": {"family": "inet", "table": "t", "name": "c", "handle": 2}},
            {"rule": {"family": "inet", "table": "t", "chain": "c", "handle": 6, "comment": "k1", "expr": []}},
            {"rule": {"family": "inet", "table": "t", "chain": "c", "handle": 7, "expr": []}}]}"#;
        assert_eq!(
            parse_rules(text).unwrap(),
            vec![
                Rule {
                    handle: 6,
                    comment: Some("k1".into())
                },
                Rule {
                    handle: 7,
                    comment: None
                }
            ]
        );
        assert!(parse_rules(r#"{"nftables": [{"rule": {}}]}"#).is_err());
    }
}

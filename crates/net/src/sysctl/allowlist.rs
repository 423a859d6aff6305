//! The sysctl allowlist: which keys a configuration may set.
//!
//! Invariants (fail closed, unlike the reference tuning plugin, which allows everything without its file):
//! - Every pattern is anchored to the whole key (`^(?:re)$`): a pattern never matches a part.
//! - An absent file means the built-in [`DEFAULT_ALLOWLIST`], never "allow everything".
//! - A file that exists but cannot be used (a directory, unreadable, not UTF-8, an invalid
//!   regex on any line) is an error: nothing is allowed.
//! - Keys are matched as written (dot or slash form, literal `IFNAME`), before substitution. A
//!   slash-form key is therefore allowed only by a pattern that matches its slash spelling; the
//!   built-in list names dotted keys only.

use std::path::{Path, PathBuf};

use regex::Regex;

use crate::error::{Error, Result};

/// Where the allowlist is read from (the reference tuning plugin's fixed path).
pub const DEFAULT_ALLOWLIST_PATH: &str = "/etc/cni/tuning/allowlist.conf";

/// The built-in allowlist used when the file is absent: the network sysctls Kubernetes calls
/// *safe* (namespaced and isolated from other pods), from kubernetes `pkg/kubelet/sysctl/
/// safe_sysctls.go` and the Kubernetes documentation "Using sysctls in a Kubernetes Cluster":
/// the original set (≤1.26), `ip_local_reserved_ports` (1.27), TCP keepalive time, interval and
/// probes and `tcp_fin_timeout` (1.29), `tcp_rmem` / `tcp_wmem` (1.32). Exact keys, dots escaped.
pub const DEFAULT_ALLOWLIST: &[&str] = &[
    r"net\.ipv4\.ip_local_port_range",
    r"net\.ipv4\.tcp_syncookies",
    r"net\.ipv4\.ping_group_range",
    r"net\.ipv4\.ip_unprivileged_port_start",
    r"net\.ipv4\.ip_local_reserved_ports",
    r"net\.ipv4\.tcp_keepalive_time",
    r"net\.ipv4\.tcp_keepalive_intvl",
    r"net\.ipv4\.tcp_keepalive_probes",
    r"net\.ipv4\.tcp_fin_timeout",
    r"net\.ipv4\.tcp_rmem",
    r"net\.ipv4\.tcp_wmem",
];

/// A compiled allowlist.
#[derive(Debug, Clone)]
pub struct Allowlist {
    patterns: Vec<String>,
    regexes: Vec<Regex>,
    /// Exact keys, for patterns that are plain names with escaped dots (the built-in list):
    /// compared as strings, no regex compiled (compiling 11 regexes was a visible part of a
    /// tern-tuning ADD).
    literals: Vec<String>,
    source: String,
}

/// The key a pattern matches when it is a plain name with escaped dots (`net\.ipv4\.x` →
/// `net.ipv4.x`); `None` when it uses any other regex syntax.
fn literal_of(pattern: &str) -> Option<String> {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.next() == Some('.') => out.push('.'),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
    }
    (!out.is_empty()).then_some(out)
}

impl Allowlist {
    /// Loads the allowlist from `path`: one regular expression per line, leading and trailing
    /// whitespace trimmed, blank lines and lines starting with `#` skipped; each compiled
    /// anchored to the whole key. When `path` does not exist: [`Allowlist::builtin`].
    ///
    /// # Errors
    /// [`Error::Allowlist`] when the path is a directory, cannot be read, is not UTF-8, or a
    /// line is not a valid regular expression (the error names the line). Fail closed.
    pub fn load(path: &Path) -> Result<Allowlist> {
        let fail = |reason: String| Error::Allowlist {
            path: path.to_path_buf(),
            reason,
        };
        let text = match std::fs::read(path) {
            Ok(bytes) => String::from_utf8(bytes).map_err(|_| fail("not UTF-8 text".into()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Allowlist::builtin()),
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
                return Err(fail(
                    "is a directory, not a file of regular expressions".into(),
                ))
            }
            Err(e) => return Err(fail(format!("cannot be read: {e}"))),
        };
        let lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
        let mut list = Allowlist {
            patterns: Vec::new(),
            regexes: Vec::new(),
            literals: Vec::new(),
            source: path.display().to_string(),
        };
        for (lineno, pattern) in lines {
            list.push(pattern).map_err(|e| {
                fail(format!(
                    "line {lineno}: invalid regular expression {pattern:?}: {e}"
                ))
            })?;
        }
        Ok(list)
    }

    /// The built-in default ([`DEFAULT_ALLOWLIST`]): exact keys, matched without regexes.
    pub fn builtin() -> Allowlist {
        let mut list = Allowlist {
            patterns: Vec::new(),
            regexes: Vec::new(),
            literals: Vec::new(),
            source: "the built-in default allowlist (Kubernetes safe sysctls)".into(),
        };
        for p in DEFAULT_ALLOWLIST {
            // The built-in patterns are constants covered by a unit test; a failure here would be
            // a programming error, which we surface as "nothing allowed" rather than a panic.
            if list.push(p).is_err() {
                tracing::error!(
                    pattern = p,
                    "built-in sysctl allowlist pattern does not compile"
                );
            }
        }
        list
    }

    /// An allowlist from explicit patterns (tests, `validate`), anchored like file lines.
    ///
    /// # Errors
    /// [`Error::Allowlist`] for an invalid pattern.
    pub fn from_patterns<S: AsRef<str>>(patterns: &[S], source: &str) -> Result<Allowlist> {
        let mut list = Allowlist {
            patterns: Vec::new(),
            regexes: Vec::new(),
            literals: Vec::new(),
            source: source.to_string(),
        };
        for p in patterns {
            let p = p.as_ref();
            list.push(p).map_err(|e| Error::Allowlist {
                path: PathBuf::from(source),
                reason: format!("invalid regular expression {p:?}: {e}"),
            })?;
        }
        Ok(list)
    }

    fn push(&mut self, pattern: &str) -> std::result::Result<(), regex::Error> {
        match literal_of(pattern) {
            Some(key) => self.literals.push(key),
            None => self.regexes.push(Regex::new(&format!("^(?:{pattern})$"))?),
        }
        self.patterns.push(pattern.to_string());
        Ok(())
    }

    /// Where this allowlist came from, for messages: the file path, or the built-in default.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The patterns as written (unanchored spelling).
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// True when some pattern matches the whole of `raw_key`, as written.
    pub fn is_allowed(&self, raw_key: &str) -> bool {
        self.literals.iter().any(|k| k == raw_key)
            || self.regexes.iter().any(|re| re.is_match(raw_key))
    }

    /// `Ok` when allowed, else [`Error::SysctlNotAllowed`] naming the key and the source.
    ///
    /// # Errors
    /// [`Error::SysctlNotAllowed`].
    pub fn check(&self, raw_key: &str) -> Result<()> {
        if self.is_allowed(raw_key) {
            Ok(())
        } else {
            Err(Error::SysctlNotAllowed {
                key: raw_key.to_string(),
                allowlist: self.source.clone(),
                patterns: if self.patterns.is_empty() {
                    "nothing".into()
                } else {
                    self.patterns.join(", ")
                },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_patterns_match_exactly_what_their_regex_matches() {
        assert_eq!(
            literal_of(r"net\.ipv4\.tcp_fin_timeout").as_deref(),
            Some("net.ipv4.tcp_fin_timeout")
        );
        for p in [
            r"net\.ipv4\..*",
            "net.ipv4.x",
            r"net\.ipv[46]\.x",
            "a|b",
            r"a\d",
            "",
            "a$",
        ] {
            assert_eq!(literal_of(p), None, "{p}");
        }
        let probes = [
            "net.ipv4.tcp_fin_timeout",
            "net.ipv4.tcp_fin_timeouts",
            "net.ipv4xtcp_fin_timeout",
            "net/ipv4/tcp_fin_timeout",
            "xnet.ipv4.tcp_fin_timeout",
            "net.ipv4.tcp_rmem",
            "",
        ];
        for p in DEFAULT_ALLOWLIST {
            let key = literal_of(p).expect("every built-in pattern is a literal key");
            let re = Regex::new(&format!("^(?:{p})$")).unwrap();
            for probe in probes.iter().copied().chain([key.as_str()]) {
                assert_eq!(re.is_match(probe), probe == key, "{p} vs {probe}");
            }
        }
    }

    #[test]
    fn builtin_has_keepalive_and_not_everything() {
        let a = Allowlist::builtin();
        assert_eq!(a.patterns().len(), DEFAULT_ALLOWLIST.len());
        for k in [
            "net.ipv4.tcp_keepalive_time",
            "net.ipv4.tcp_keepalive_intvl",
            "net.ipv4.tcp_keepalive_probes",
            "net.ipv4.tcp_fin_timeout",
            "net.ipv4.ip_local_port_range",
        ] {
            assert!(a.is_allowed(k), "{k}");
        }
        for k in [
            "net.ipv4.ip_forward",
            "net.ipv4.tcp_keepalive_time2",
            "xnet.ipv4.tcp_keepalive_time",
            "net.ipv4xtcp_keepalive_time",
            "kernel.hostname",
            "net/ipv4/tcp_keepalive_time",
        ] {
            assert!(!a.is_allowed(k), "{k}");
        }
        assert!(a.source().contains("built-in"));
    }

    #[test]
    fn file_patterns_are_anchored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allowlist.conf");
        std::fs::write(
            &path,
            "# comment\n\n  net\\.ipv4\\.conf\\.IFNAME\\.rp_filter  \nipv4\\.tcp\n",
        )
        .unwrap();
        let a = Allowlist::load(&path).unwrap();
        assert_eq!(a.patterns().len(), 2);
        assert!(a.is_allowed("net.ipv4.conf.IFNAME.rp_filter"));
        // Substituted spelling is not what the allowlist sees.
        assert!(!a.is_allowed("net.ipv4.conf.eth0.rp_filter"));
        // `ipv4\.tcp` would match part of many keys unanchored; anchored it matches none.
        assert!(!a.is_allowed("net.ipv4.tcp_keepalive_time"));
        assert!(!a.is_allowed("net.ipv4.conf.IFNAME.rp_filter.x"));
        assert_eq!(a.source(), path.display().to_string());
        let err = a.check("net.ipv4.ip_forward").unwrap_err();
        assert!(err.to_string().contains("net.ipv4.ip_forward"), "{err}");
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
        assert_eq!(err.cni_code(), 7);
    }

    #[test]
    fn absent_file_is_builtin_not_everything() {
        let dir = tempfile::tempdir().unwrap();
        let a = Allowlist::load(&dir.path().join("missing.conf")).unwrap();
        assert!(a.source().contains("built-in"));
        assert!(!a.is_allowed("net.ipv4.ip_forward"));
    }

    #[test]
    fn unusable_file_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        // A directory.
        let e = Allowlist::load(dir.path()).unwrap_err();
        assert!(matches!(e, Error::Allowlist { .. }), "{e}");
        // An invalid regex on line 2.
        let path = dir.path().join("bad.conf");
        std::fs::write(&path, "net\\.ipv4\\.tcp_syncookies\nnet.(\n").unwrap();
        let e = Allowlist::load(&path).unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        // Present but empty: nothing allowed.
        let empty = dir.path().join("empty.conf");
        std::fs::write(&empty, "\n# nothing\n").unwrap();
        let a = Allowlist::load(&empty).unwrap();
        assert!(!a.is_allowed("net.ipv4.tcp_syncookies"));
        assert!(a
            .check("net.ipv4.tcp_syncookies")
            .unwrap_err()
            .to_string()
            .contains("nothing"));
    }

    #[test]
    fn alternation_is_anchored_as_a_whole() {
        // Without the group, `^a|b$` would allow anything starting with `a`.
        let a =
            Allowlist::from_patterns(&[r"net\.ipv4\.tcp_syncookies|net\.core\.somaxconn"], "test")
                .unwrap();
        assert!(a.is_allowed("net.core.somaxconn"));
        assert!(!a.is_allowed("net.ipv4.tcp_syncookies.extra"));
        assert!(!a.is_allowed("x.net.core.somaxconn"));
    }
}

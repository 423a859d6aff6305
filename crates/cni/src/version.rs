//! CNI specification versions this crate speaks, from 0.3.0 to 1.1.0 (CNI spec, "Version").
//!
//! Results are one of two families: 0.3.0–0.4.0 (with `ips[].version`) and 1.0.0–1.1.0.

use std::fmt;

use crate::error::{code, Error};

/// A supported CNI specification version.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// 0.3.0: rich results and chaining.
    V0_3_0,
    /// 0.3.1: typo fix of 0.3.0.
    V0_3_1,
    /// 0.4.0: CHECK, `prevResult` on DEL.
    V0_4_0,
    /// 1.0.0: `ips[].version` removed, list configs only.
    V1_0_0,
    /// 1.1.0: STATUS, GC, interface and route additions.
    V1_1_0,
}

/// The two result families: results convert freely inside one, and across them by the spec's rules.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Family {
    /// 0.3.0, 0.3.1 and 0.4.0.
    V0,
    /// 1.0.0 and 1.1.0.
    V1,
}

impl Version {
    /// Every version tern supports, oldest first.
    pub const ALL: [Version; 5] = [
        Version::V0_3_0,
        Version::V0_3_1,
        Version::V0_4_0,
        Version::V1_0_0,
        Version::V1_1_0,
    ];

    /// The newest supported version.
    pub const LATEST: Version = Version::V1_1_0;

    /// The version as the spec spells it, e.g. `"1.0.0"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V0_3_0 => "0.3.0",
            Version::V0_3_1 => "0.3.1",
            Version::V0_4_0 => "0.4.0",
            Version::V1_0_0 => "1.0.0",
            Version::V1_1_0 => "1.1.0",
        }
    }

    /// Parses a supported version string; `None` for anything else (including 0.1.0 and 0.2.0).
    pub fn parse(s: &str) -> Option<Version> {
        Version::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// Parses a config's `cniVersion`, refusing unsupported ones with code 1 as the reference
    /// dispatcher does (`incompatible CNI versions`, details naming both sides).
    ///
    /// # Errors
    /// Code 1 when the version is not one of [`Version::ALL`].
    pub fn parse_config(s: &str) -> Result<Version, Error> {
        Version::parse(s).ok_or_else(|| {
            Error::new(code::INCOMPATIBLE_VERSION, "incompatible CNI versions").with_details(
                format!(
                    "config is {s:?}, plugin supports {}",
                    Version::supported_list()
                ),
            )
        })
    }

    /// `["0.3.0", …, "1.1.0"]`, for messages.
    pub fn supported_list() -> String {
        let quoted: Vec<String> = Version::ALL
            .iter()
            .map(|v| format!("{:?}", v.as_str()))
            .collect();
        format!("[{}]", quoted.join(", "))
    }

    /// The result family of this version.
    pub fn family(self) -> Family {
        if self >= Version::V1_0_0 {
            Family::V1
        } else {
            Family::V0
        }
    }

    /// CHECK exists from 0.4.0 on (CNI spec, "CHECK").
    pub fn allows_check(self) -> bool {
        self >= Version::V0_4_0
    }

    /// STATUS and GC exist from 1.1.0 on (CNI spec, "STATUS", "GC").
    pub fn allows_status_and_gc(self) -> bool {
        self >= Version::V1_1_0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_supported_version_and_nothing_else() {
        for v in Version::ALL {
            assert_eq!(Version::parse(v.as_str()), Some(v));
        }
        for bad in ["0.1.0", "0.2.0", "9.9.9", "", "1.0", "1.1.0 "] {
            assert_eq!(Version::parse(bad), None, "{bad:?}");
        }
        let err = Version::parse_config("9.9.9").unwrap_err();
        assert_eq!(err.code, 1);
        assert_eq!(err.msg, "incompatible CNI versions");
        assert!(err.details.contains("\"9.9.9\""), "{}", err.details);
    }

    #[test]
    fn verb_gates_follow_the_spec() {
        assert!(!Version::V0_3_1.allows_check());
        assert!(Version::V0_4_0.allows_check());
        assert!(!Version::V1_0_0.allows_status_and_gc());
        assert!(Version::V1_1_0.allows_status_and_gc());
        assert_eq!(Version::V0_4_0.family(), Family::V0);
        assert_eq!(Version::V1_0_0.family(), Family::V1);
    }
}

//! Sysctl keys and values, validated on construction.
//!
//! Key rules (the reference tuning plugin's key-to-path mapping, made strict):
//! 1. The key is 1..=[`MAX_KEY_LEN`] bytes of printable ASCII without whitespace
//!    (no control characters, no newline).
//! 2. It starts with `net.` (dot form) or `net/` (slash form).
//! 3. Dot form: every `.` is a separator (so a `/` in a dot-form key is refused — it could only
//!    be an attempt to mix spellings such as `net.ipv4/../../kernel/hostname`). Slash form: `/` is
//!    the separator and dots are kept inside segments (sysctl.d(5) semantics), so
//!    `net/ipv4/conf/eth0.100/rp_filter` names the interface `eth0.100`.
//! 4. No segment is empty, `.` or `..` (this refuses `net..kernel.hostname`, `net/../x`).
//! 5. The first `IFNAME` token is replaced by the interface name *after* the separator
//!    conversion, so names with dots survive (containernetworking/plugins#779). The interface
//!    name must be non-empty, at most 15 bytes, printable ASCII without `/` or whitespace.
//! 6. After substitution rule 4 is checked again (an ifname `..` is refused), and the path
//!    `/proc/sys/<segments>` is strictly under `/proc/sys/net/` by construction.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Where sysctls live (proc(5)).
pub const SYSCTL_ROOT: &str = "/proc/sys";
/// Longest accepted key, in bytes.
pub const MAX_KEY_LEN: usize = 256;
/// Longest accepted value, in bytes (the longest safe values, `tcp_rmem`-style triples, need ~30).
pub const MAX_VALUE_LEN: usize = 256;
/// Linux `IFNAMSIZ - 1`.
const MAX_IFNAME_LEN: usize = 15;
/// The token replaced by the interface name.
const IFNAME_TOKEN: &str = "IFNAME";

/// A validated sysctl key under `/proc/sys/net/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SysctlKey {
    raw: String,
    rel: String,
}

impl SysctlKey {
    /// Parses and validates `raw` (dot or slash form, see the module docs), substituting the
    /// first `IFNAME` with `ifname`.
    ///
    /// `ifname` is only checked when the key contains `IFNAME`.
    ///
    /// # Errors
    /// [`Error::InvalidSysctlKey`] naming the rule that failed.
    pub fn parse(raw: &str, ifname: &str) -> Result<SysctlKey> {
        let bad = |reason: &str| Error::InvalidSysctlKey {
            key: raw.to_string(),
            reason: reason.to_string(),
        };
        if raw.is_empty() {
            return Err(bad("empty key"));
        }
        if raw.len() > MAX_KEY_LEN {
            return Err(bad(&format!("longer than {MAX_KEY_LEN} bytes")));
        }
        if !raw.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad(
                "only printable ASCII without whitespace or control characters is allowed",
            ));
        }
        let segments: Vec<&str> = if let Some(rest) = raw.strip_prefix("net/") {
            std::iter::once("net").chain(rest.split('/')).collect()
        } else if raw.starts_with("net.") {
            if raw.contains('/') {
                return Err(bad(
                    "a key in dot form must not contain '/'; write it in slash form (net/...) to keep dots in names",
                ));
            }
            raw.split('.').collect()
        } else {
            return Err(bad(
                "only network sysctls are allowed: the key must start with net. or net/",
            ));
        };
        check_segments(&segments).map_err(&bad)?;
        let joined = segments.join("/");
        let rel = if joined.contains(IFNAME_TOKEN) {
            check_ifname(ifname).map_err(|r| bad(&format!("interface name {ifname:?}: {r}")))?;
            joined.replacen(IFNAME_TOKEN, ifname, 1)
        } else {
            joined
        };
        let segments: Vec<&str> = rel.split('/').collect();
        check_segments(&segments).map_err(|r| bad(&format!("after IFNAME substitution: {r}")))?;
        if segments.first() != Some(&"net") || segments.len() < 2 {
            return Err(bad("must resolve strictly under /proc/sys/net/"));
        }
        Ok(SysctlKey {
            raw: raw.to_string(),
            rel,
        })
    }

    /// The key as written (dotted or slashed, literal `IFNAME`): what the allowlist matches.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// Whether the key names the attachment's interface (holds the `IFNAME` token): only then
    /// does writing it need `CNI_IFNAME` to exist in the netns.
    pub fn uses_ifname(&self) -> bool {
        self.raw.contains(IFNAME_TOKEN)
    }

    /// Whether a network namespace has the key from its creation on: it names no interface, or
    /// only `all`, `default` or `lo` (`net/ipv{4,6}/{conf,neigh}/<name>/…`). Only such a key can
    /// hold a value the runtime wrote before the chain ran (CRI-O writes a pod's
    /// `securityContext.sysctls` when it creates the netns); an interface's appears with the
    /// interface, in the chain.
    pub fn exists_at_netns_creation(&self) -> bool {
        let segments: Vec<&str> = self.rel.split('/').collect();
        match segments.as_slice() {
            ["net", "ipv4" | "ipv6", "conf" | "neigh", name, ..] => {
                matches!(*name, "all" | "default" | "lo")
            }
            _ => true,
        }
    }

    /// The path relative to `/proc/sys`, slash-separated, `IFNAME` substituted
    /// (e.g. `net/ipv4/conf/eth0.100/rp_filter`).
    pub fn relative(&self) -> &str {
        &self.rel
    }

    /// The absolute file, `/proc/sys/<relative>`.
    pub fn path(&self) -> PathBuf {
        Path::new(SYSCTL_ROOT).join(&self.rel)
    }
}

impl std::fmt::Display for SysctlKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.raw)
    }
}

fn check_segments(segments: &[&str]) -> std::result::Result<(), &'static str> {
    for s in segments {
        match *s {
            "" => return Err("empty path segment"),
            "." | ".." => return Err("'.' and '..' segments are not allowed"),
            _ => {}
        }
    }
    Ok(())
}

fn check_ifname(ifname: &str) -> std::result::Result<(), &'static str> {
    if ifname.is_empty() {
        return Err("empty");
    }
    if ifname.len() > MAX_IFNAME_LEN {
        return Err("longer than 15 bytes");
    }
    if ifname == "." || ifname == ".." {
        return Err("'.' and '..' are not interface names");
    }
    if !ifname.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
        return Err("contains '/', whitespace or a non-printable character");
    }
    Ok(())
}

/// A validated sysctl value: 1..=[`MAX_VALUE_LEN`] bytes, one line of printable ASCII (spaces
/// and tabs allowed, for multi-value sysctls such as `net.ipv4.tcp_rmem`). Written verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SysctlValue(String);

impl SysctlValue {
    /// Validates a configured `value` for `key` (the key is only used in the error message):
    /// printable ASCII and spaces, 1–256 bytes. No control character, tabs included: the kernel
    /// parses a value up to the first character it does not expect and may have stored part of
    /// it by then (`net.ipv4.tcp_rmem` = `"4096\t1000\t2000x"` fails with EINVAL after setting
    /// its second field; checked on 6.18). Several values are separated by spaces.
    ///
    /// # Errors
    /// [`Error::InvalidSysctlValue`] when empty, too long, multi-line or not printable ASCII.
    pub fn parse(key: &str, value: &str) -> Result<SysctlValue> {
        SysctlValue::check(key, value, false)
    }

    /// Validates a value read back from the kernel (a backup to restore): as [`Self::parse`], but
    /// tabs are allowed, since the kernel prints multi-value sysctls tab-separated and reads them
    /// back that way.
    ///
    /// # Errors
    /// As [`Self::parse`].
    pub fn from_kernel(key: &str, value: &str) -> Result<SysctlValue> {
        SysctlValue::check(key, value, true)
    }

    fn check(key: &str, value: &str, tabs: bool) -> Result<SysctlValue> {
        let bad = |reason: &'static str| Error::InvalidSysctlValue {
            key: key.to_string(),
            value: value.to_string(),
            reason,
        };
        if value.is_empty() {
            return Err(bad("empty value"));
        }
        if value.len() > MAX_VALUE_LEN {
            return Err(bad("longer than 256 bytes"));
        }
        if value.contains(['\n', '\r']) {
            return Err(bad("must be a single line"));
        }
        if !value
            .bytes()
            .all(|b| b == b' ' || (tabs && b == b'\t') || b.is_ascii_graphic())
        {
            return Err(bad(
                "only printable ASCII and spaces are allowed (no tabs or other control characters: separate values with spaces)",
            ));
        }
        Ok(SysctlValue(value.to_string()))
    }

    /// The value as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SysctlValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(raw: &str, ifname: &str) -> String {
        SysctlKey::parse(raw, ifname)
            .unwrap()
            .relative()
            .to_string()
    }

    fn refused(raw: &str, ifname: &str) -> String {
        match SysctlKey::parse(raw, ifname) {
            Err(Error::InvalidSysctlKey { reason, .. }) => reason,
            other => panic!("{raw:?} with ifname {ifname:?} should be refused, got {other:?}"),
        }
    }

    #[test]
    fn dot_form_maps_to_slashes() {
        assert_eq!(
            rel("net.ipv4.tcp_keepalive_time", "eth0"),
            "net/ipv4/tcp_keepalive_time"
        );
        let k = SysctlKey::parse("net.ipv4.tcp_keepalive_time", "eth0").unwrap();
        assert_eq!(k.path(), Path::new("/proc/sys/net/ipv4/tcp_keepalive_time"));
        assert_eq!(k.raw(), "net.ipv4.tcp_keepalive_time");
    }

    #[test]
    fn only_interface_keys_are_missing_from_a_new_netns() {
        let at_creation = |raw: &str| {
            SysctlKey::parse(raw, "eth0")
                .unwrap()
                .exists_at_netns_creation()
        };
        for raw in [
            "net.ipv4.tcp_keepalive_time",
            "net.ipv4.conf.all.rp_filter",
            "net.ipv6.conf.default.accept_ra",
            "net.ipv4.conf.lo.arp_ignore",
            "net.ipv4.neigh.default.gc_thresh1",
            "net.core.somaxconn",
        ] {
            assert!(at_creation(raw), "{raw}");
        }
        for raw in [
            "net.ipv4.conf.IFNAME.arp_notify",
            "net.ipv6.conf.eth0.accept_dad",
            "net/ipv4/conf/eth0.100/rp_filter",
            "net.ipv6.neigh.IFNAME.retrans_time_ms",
        ] {
            assert!(!at_creation(raw), "{raw}");
        }
    }

    #[test]
    fn ifname_substituted_after_conversion_so_dots_survive() {
        assert_eq!(
            rel("net.ipv4.conf.IFNAME.rp_filter", "eth0.100"),
            "net/ipv4/conf/eth0.100/rp_filter"
        );
        assert_eq!(
            rel("net.ipv6.conf.IFNAME.accept_ra", "eth0"),
            "net/ipv6/conf/eth0/accept_ra"
        );
        // Only the first token is replaced, as the reference does.
        assert_eq!(rel("net.IFNAME.IFNAME", "x"), "net/x/IFNAME");
        let uses = |raw: &str| SysctlKey::parse(raw, "eth0").unwrap().uses_ifname();
        assert!(uses("net.ipv4.conf.IFNAME.rp_filter"));
        assert!(uses("net/ipv4/conf/IFNAME/rp_filter"));
        assert!(!uses("net.ipv4.conf.eth0.rp_filter"));
        assert!(!uses("net.ipv4.tcp_keepalive_time"));
    }

    #[test]
    fn slash_form_keeps_dots_in_segments() {
        assert_eq!(
            rel("net/ipv4/conf/eth0.100/rp_filter", "eth0"),
            "net/ipv4/conf/eth0.100/rp_filter"
        );
        assert_eq!(
            rel("net/ipv4/conf/IFNAME/rp_filter", "eth0.100"),
            "net/ipv4/conf/eth0.100/rp_filter"
        );
    }

    #[test]
    fn escapes_are_refused() {
        refused("kernel.hostname", "eth0");
        refused("kernel/hostname", "eth0");
        refused("net/../kernel/hostname", "eth0");
        refused("net.ipv4/../../kernel/hostname", "eth0");
        refused("net..kernel.hostname", "eth0");
        refused("net.", "eth0");
        refused("net", "eth0");
        refused("net/", "eth0");
        refused("net//ipv4", "eth0");
        refused("net/./ipv4/tcp_syncookies", "eth0");
        refused("/net/ipv4/tcp_syncookies", "eth0");
        refused("net.ipv4.tcp_syncookies\n", "eth0");
        refused("net.ipv4.tcp_syncookies\nkernel.x", "eth0");
        refused("net.ipv4 .tcp_syncookies", "eth0");
        refused("net.ipv4.tcp\u{0}syncookies", "eth0");
        refused("net.ipv4.tcp_sync\u{e9}", "eth0");
        refused("", "eth0");
        refused(&format!("net.{}", "a".repeat(300)), "eth0");
        refused("netfoo.x", "eth0");
    }

    #[test]
    fn hostile_ifnames_are_refused() {
        assert!(refused("net.ipv4.conf.IFNAME.rp_filter", "..").contains("interface name"));
        refused("net.ipv4.conf.IFNAME.rp_filter", ".");
        refused("net.ipv4.conf.IFNAME.rp_filter", "");
        refused("net.ipv4.conf.IFNAME.rp_filter", "a/../../..");
        refused("net.ipv4.conf.IFNAME.rp_filter", "eth 0");
        refused("net.ipv4.conf.IFNAME.rp_filter", "averyveryverylongname");
        // A token glued to a segment cannot make an empty or dot segment either.
        refused("net.ipv4.conf.xIFNAME.rp_filter", "/");
        // An ifname is irrelevant (and unchecked) when the key has no IFNAME.
        assert_eq!(
            rel("net.ipv4.tcp_syncookies", ".."),
            "net/ipv4/tcp_syncookies"
        );
    }

    #[test]
    fn values() {
        assert_eq!(SysctlValue::parse("k", "300").unwrap().as_str(), "300");
        assert!(SysctlValue::parse("k", "4096 87380 6291456").is_ok());
        assert!(SysctlValue::from_kernel("k", "4096\t87380\t6291456").is_ok());
        assert!(SysctlValue::from_kernel("k", "1\u{7}").is_err());
        for bad in [
            "",
            "1\n",
            "1\n2",
            "1\r",
            "\u{7}",
            "caf\u{e9}",
            "300\t400",
            "4096\t87380 6291456",
            "1\u{0}",
            "1\u{1b}[0m",
        ] {
            assert!(
                matches!(
                    SysctlValue::parse("k", bad),
                    Err(Error::InvalidSysctlValue { .. })
                ),
                "{bad:?} should be refused"
            );
        }
        assert!(SysctlValue::parse("k", &"1".repeat(MAX_VALUE_LEN)).is_ok());
        assert!(SysctlValue::parse("k", &"1".repeat(MAX_VALUE_LEN + 1)).is_err());
    }
}

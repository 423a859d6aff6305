//! tern's version as the binaries report it, held in a stamp that `cargo xtask stamp-version` (run
//! by `cargo xtask image --version V`) rewrites in a built binary, with no rebuild and no `unsafe`.
//!
//! Shape: [`VERSION_STAMP`] is [`MARKER`] followed by a [`VERSION_FIELD`]-byte field holding the
//! version in ASCII, padded with NUL bytes (built with the crate's Cargo version, the workspace's
//! `version`). The marker occurs once in a binary that calls [`version`] (nothing else refers to
//! its bytes), so the script finds the stamp by searching for it, refuses a file where it occurs
//! zero or several times, and overwrites the field in place: the file keeps its length and every
//! other byte.
//!
//! Invariant: [`version`] reads the stamp through [`std::hint::black_box`], so the compiler cannot
//! fold the Cargo version into the code that prints it; what a rewritten binary reports is what
//! its stamp holds. `black_box` is documented as best effort: tests/e2e/tests/version_stamp.rs
//! checks it on the release binaries, rewriting the stamp of copies and running them.
//!
//! Read by every binary where it reports its version: the plugins' `--version` and the line they
//! print when run without `CNI_COMMAND` (`Plugin::about`), `tern-lookup --version`, and
//! `tern-agent --version`, its `tern-agent starting` log line and its `tern_build_info` metric.

/// The five binaries tern ships (release tarball, image, `tern-agent install`'s copies), each
/// carrying [`VERSION_STAMP`].
pub const BINARIES: [&str; 5] = [
    "tern",
    "tern-tuning",
    "tern-ipam",
    "tern-lookup",
    "tern-agent",
];

/// The bytes that precede the version field in [`VERSION_STAMP`]: what `cargo xtask stamp-version`
/// searches for (its `marker=` line spells the same bytes).
pub const MARKER: &[u8] = b"TERN-VERSION-STAMP:";

/// Length of the version field after [`MARKER`], in bytes: the longest version a stamp holds.
pub const VERSION_FIELD: usize = 64;

/// The stamp: [`MARKER`], then the version NUL-padded to [`VERSION_FIELD`] bytes (module docs).
/// Built from `CARGO_PKG_VERSION`; a version longer than the field fails the build.
pub static VERSION_STAMP: [u8; MARKER.len() + VERSION_FIELD] = stamp(env!("CARGO_PKG_VERSION"));

/// [`MARKER`] followed by `version`, NUL-padded. Panics (at compile time, where it is used) when
/// `version` is longer than [`VERSION_FIELD`].
const fn stamp(version: &str) -> [u8; MARKER.len() + VERSION_FIELD] {
    let v = version.as_bytes();
    assert!(
        v.len() <= VERSION_FIELD,
        "the version does not fit the stamp"
    );
    let mut out = [0u8; MARKER.len() + VERSION_FIELD];
    let mut i = 0;
    while i < MARKER.len() {
        out[i] = MARKER[i];
        i += 1;
    }
    let mut j = 0;
    while j < v.len() {
        out[MARKER.len() + j] = v[j];
        j += 1;
    }
    out
}

/// tern's version as this binary's stamp holds it, e.g. `0.1.0`, or `0.1.0+upgrade` once
/// `cargo xtask image --version 0.1.0+upgrade` rewrote it: the field's bytes up to the first NUL.
/// A field that is not UTF-8 (only a hand-edited binary has one) reads as `invalid-stamp`.
pub fn version() -> &'static str {
    field_version(std::hint::black_box(&VERSION_STAMP))
}

/// The version in `stamp`'s field: its bytes up to the first NUL (module docs).
fn field_version(stamp: &[u8; MARKER.len() + VERSION_FIELD]) -> &str {
    let (_, field) = stamp.split_at(MARKER.len());
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    std::str::from_utf8(field.split_at(end).0).unwrap_or("invalid-stamp")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_stamp_holds_the_cargo_version() {
        assert!(VERSION_STAMP.starts_with(MARKER));
        assert_eq!(version(), env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn field_reads_up_to_the_first_nul_or_the_whole_field() {
        let mut s = stamp("1.2.3+upgrade");
        assert_eq!(field_version(&s), "1.2.3+upgrade");
        let full = "x".repeat(VERSION_FIELD);
        let mut long = [0u8; MARKER.len() + VERSION_FIELD];
        long[..MARKER.len()].copy_from_slice(MARKER);
        long[MARKER.len()..].copy_from_slice(full.as_bytes());
        assert_eq!(field_version(&long), full);
        s[MARKER.len()] = 0xff;
        assert_eq!(field_version(&s), "invalid-stamp");
    }
}

//! The version stamp (crates/node/src/version.rs) on the release binaries: each holds the marker
//! exactly once; `tern-xtask stamp-version`, the routine `tern-xtask image --version` runs on the
//! image's copies, rewrites it in a copy with no rebuild, changing only the stamp's version field;
//! the copy then reports the new version where the binary reports one (`--version`, and a
//! plugin's line without `CNI_COMMAND`), so the compiler did not fold the Cargo version into the
//! code. And the script refuses, changing nothing, a version that does not fit and a file whose
//! marker is not there exactly once.
//!
//! Needs the release binaries (`TERN_BIN_DIR`): gated with the root tests so that `cargo unit`
//! leaves it out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use tern_node::version::{BINARIES, MARKER, VERSION_FIELD};
use tern_testkit::exec::{bin_dir, output_text};

/// The version the test stamps: SemVer with build metadata, as the cluster tier's second image.
const STAMPED: &str = "0.1.0+stamp-test.7";

/// `tern-xtask stamp-version ARGS...`.
fn stamp(args: &[&Path], version: &str) -> Output {
    Command::new(bin_dir().join("tern-xtask"))
        .arg("stamp-version")
        .args(args)
        .arg(version)
        .output()
        .unwrap()
}

/// Byte offsets of every occurrence of [`MARKER`] in `bytes`.
fn markers(bytes: &[u8]) -> Vec<usize> {
    bytes
        .windows(MARKER.len())
        .enumerate()
        .filter(|(_, w)| *w == MARKER)
        .map(|(i, _)| i)
        .collect()
}

/// The first line `bin --version` prints on stdout.
fn version_line(bin: &Path) -> String {
    let out = Command::new(bin)
        .arg("--version")
        .env_clear()
        .output()
        .unwrap();
    assert!(out.status.success(), "{bin:?} --version: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().next().unwrap_or_default().to_owned()
}

/// Whether `line` is what binary `b` prints first for version `v`: `b v` or `b v: about`.
fn reports(line: &str, b: &str, v: &str) -> bool {
    line == format!("{b} {v}") || line.starts_with(&format!("{b} {v}: "))
}

#[test]
fn a_rewritten_stamp_is_what_every_binary_reports() {
    if tern_testkit::root::skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let copies: Vec<_> = BINARIES.iter().map(|b| dir.path().join(b)).collect();
    for (b, copy) in BINARIES.iter().zip(&copies) {
        std::fs::copy(bin_dir().join(b), copy).unwrap();
    }
    let refs: Vec<&Path> = copies.iter().map(|p| p.as_path()).collect();
    let out = stamp(&refs, STAMPED);
    assert!(out.status.success(), "stamp-version: {}", output_text(&out));
    for (b, copy) in BINARIES.iter().zip(&copies) {
        let before = std::fs::read(bin_dir().join(b)).unwrap();
        let after = std::fs::read(copy).unwrap();
        let at = markers(&before);
        assert_eq!(at.len(), 1, "{b}: the marker at {at:?}, not once");
        // only the version field changed, to the new version NUL-padded
        assert_eq!(before.len(), after.len(), "{b}: length changed");
        let field = at[0] + MARKER.len()..at[0] + MARKER.len() + VERSION_FIELD;
        let changed: Vec<usize> = (0..before.len())
            .filter(|&i| before[i] != after[i])
            .collect();
        assert!(
            changed.iter().all(|i| field.contains(i)),
            "{b}: bytes outside the field changed: {changed:?}"
        );
        let mut want = STAMPED.as_bytes().to_vec();
        want.resize(VERSION_FIELD, 0);
        assert_eq!(&after[field], &want[..], "{b}: the field");
        // the original still reports the Cargo version, the copy the stamped one
        let cargo = env!("CARGO_PKG_VERSION");
        let line = version_line(&bin_dir().join(b));
        assert!(reports(&line, b, cargo), "{b} --version: {line:?}");
        let line = version_line(copy);
        assert!(
            reports(&line, b, STAMPED),
            "stamped {b} --version: {line:?}"
        );
    }
    // a plugin run by hand (no CNI_COMMAND) names its version on stderr
    for b in ["tern", "tern-tuning", "tern-ipam"] {
        let out = Command::new(dir.path().join(b))
            .env_clear()
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().next().unwrap_or_default();
        assert!(reports(first, b, STAMPED), "stamped {b} alone: {err:?}");
    }
}

#[test]
fn the_stamp_script_refuses_what_it_cannot_stamp() {
    if tern_testkit::root::skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tern = dir.path().join("tern");
    std::fs::copy(bin_dir().join("tern"), &tern).unwrap();
    let original = std::fs::read(&tern).unwrap();
    // a version longer than the field, one with a character outside [0-9A-Za-z.+_-], an empty one
    for bad in ["1".repeat(VERSION_FIELD + 1).as_str(), "0.1.0 beta", ""] {
        let out = stamp(&[&tern], bad);
        assert_eq!(out.status.code(), Some(1), "{bad:?}: {out:?}");
        assert!(
            output_text(&out).contains("must be 1 to 64 characters"),
            "{bad:?}: {}",
            output_text(&out)
        );
        assert_eq!(
            std::fs::read(&tern).unwrap(),
            original,
            "{bad:?} changed it"
        );
    }
    // the longest version that fits is taken whole
    let longest = "9".repeat(VERSION_FIELD);
    let out = stamp(&[&tern], &longest);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(reports(&version_line(&tern), "tern", &longest));
    // a file with the marker twice (two binaries end to end) and one without it
    let twice = dir.path().join("twice");
    std::fs::write(&twice, [original.as_slice(), original.as_slice()].concat()).unwrap();
    let none = dir.path().join("none");
    std::fs::write(&none, b"#!/bin/sh\necho not tern\n").unwrap();
    for (file, times) in [(&twice, 2), (&none, 0)] {
        let before = std::fs::read(file).unwrap();
        let out = stamp(&[file], "0.1.0");
        assert_eq!(out.status.code(), Some(1), "{file:?}: {out:?}");
        assert!(
            output_text(&out).contains(&format!("occurs {times} times, not once")),
            "{file:?}: {}",
            output_text(&out)
        );
        assert_eq!(std::fs::read(file).unwrap(), before, "{file:?} changed");
    }
}

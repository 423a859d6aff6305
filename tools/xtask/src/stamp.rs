//! `stamp-version FILE... VERSION`: rewrites the version a built tern binary reports, in place,
//! with no rebuild (`image --version` runs it on the image's copies; tests/e2e's version_stamp on
//! copies of the release binaries).
//!
//! The stamp (`tern_node::version`) is [`MARKER`] followed by a [`VERSION_FIELD`]-byte field: the
//! version in ASCII, NUL-padded. The marker's one occurrence in a file is found and the field
//! overwritten with the version and NULs: the file keeps its length and every other byte. Refused,
//! changing nothing in that file: a version that is empty, longer than the field or not made of
//! `[0-9A-Za-z.+_-]` (SemVer with build metadata, e.g. `0.1.0+upgrade`), and a file where the
//! marker occurs other than exactly once (not a tern binary, or one built before the stamp).

use std::path::Path;

use tern_node::version::{MARKER, VERSION_FIELD};

use crate::{failed, usage, Args, Res};

pub(crate) fn main(args: Args) -> Res {
    let mut all: Vec<String> = args.0.collect();
    let Some(version) = all.pop().filter(|_| !all.is_empty()) else {
        return Err(usage("usage: tern-xtask stamp-version FILE... VERSION"));
    };
    check_version(&version)?;
    for file in &all {
        stamp_file(Path::new(file), &version)?;
    }
    Ok(())
}

/// Refuses a version the field cannot hold or a tool would misread.
fn check_version(version: &str) -> Res {
    let allowed = |c: char| c.is_ascii_alphanumeric() || ".+_-".contains(c);
    if version.is_empty() || version.len() > VERSION_FIELD || !version.chars().all(allowed) {
        return Err(failed(format!(
            "version '{version}' must be 1 to {VERSION_FIELD} characters of [0-9A-Za-z.+_-]"
        )));
    }
    Ok(())
}

/// Stamps `version` (checked by [`check_version`]) into `file`.
pub(crate) fn stamp_file(file: &Path, version: &str) -> Res {
    let shown = file.display();
    let mut bytes = std::fs::read(file).map_err(|e| failed(format!("{shown}: {e}")))?;
    stamp_bytes(&mut bytes, version).map_err(|m| failed(format!("{shown}: {m}")))?;
    std::fs::write(file, bytes).map_err(|e| failed(format!("{shown}: {e}")))
}

/// Overwrites the field after the one [`MARKER`] in `bytes` with `version`, NUL-padded.
fn stamp_bytes(bytes: &mut [u8], version: &str) -> Result<(), String> {
    let at: Vec<usize> = bytes
        .windows(MARKER.len())
        .enumerate()
        .filter(|(_, w)| *w == MARKER)
        .map(|(i, _)| i + MARKER.len())
        .collect();
    let field = match at[..] {
        [start] => bytes.get_mut(start..start + VERSION_FIELD),
        _ => None,
    };
    let Some(field) = field else {
        return Err(format!(
            "the version stamp's marker '{}' occurs {} times, not once (not a tern binary built with the stamp?)",
            String::from_utf8_lossy(MARKER),
            at.len()
        ));
    };
    field.fill(0);
    field[..version.len()].copy_from_slice(version.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file with the stamp of version `v` between other bytes.
    fn binary(v: &str) -> Vec<u8> {
        let mut b = b"head".to_vec();
        b.extend_from_slice(MARKER);
        let mut field = v.as_bytes().to_vec();
        field.resize(VERSION_FIELD, 0);
        b.extend_from_slice(&field);
        b.extend_from_slice(b"tail");
        b
    }

    #[test]
    fn the_field_alone_is_rewritten_nul_padded() {
        let mut b = binary("0.1.0+a.long.build");
        stamp_bytes(&mut b, "0.2.0").unwrap();
        assert_eq!(b, binary("0.2.0"));
    }

    #[test]
    fn a_file_without_the_marker_once_is_refused_unchanged() {
        for mut b in [
            b"no stamp here".to_vec(),
            [binary("1"), binary("1")].concat(),
        ] {
            let before = b.clone();
            let n = if b.len() > 20 { 2 } else { 0 };
            let e = stamp_bytes(&mut b, "0.2.0").unwrap_err();
            assert!(e.contains(&format!("occurs {n} times, not once")), "{e}");
            assert_eq!(b, before);
        }
    }

    #[test]
    fn a_marker_at_the_end_without_its_field_is_refused() {
        let mut b = MARKER.to_vec();
        assert!(stamp_bytes(&mut b, "1").is_err());
    }

    #[test]
    fn versions_outside_the_field_or_alphabet_are_refused() {
        for bad in ["", "0.1.0 beta", "0.1.0/x", &"9".repeat(VERSION_FIELD + 1)] {
            assert!(check_version(bad).is_err(), "{bad:?}");
        }
        for good in [
            "0.1.0",
            "0.1.0+upgrade",
            "1.2.3-rc_1",
            &"9".repeat(VERSION_FIELD),
        ] {
            assert!(check_version(good).is_ok(), "{good:?}");
        }
    }
}

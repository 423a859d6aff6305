//! The release tarball of `scripts/release`, as an operator receives it.
//!
//! What it proves: the tarball holds exactly one directory `tern-<version>-linux-<arch>/` with the
//! five static binaries (0755), the example conflists byte for byte as in the repository, INSTALL
//! and SHA256SUMS (0644); every entry is owned 0:0 with the commit's time as mtime, in name order;
//! `sha256sum -c SHA256SUMS` passes inside it and covers every other file; the `.sha256` beside
//! it is the tarball's sum; the binaries embed no path of this machine (neither CARGO_HOME nor the
//! clone: `--remap-path-prefix`) and answer as themselves; a second `scripts/release` of the same
//! tree gives the same bytes. The Rust build's own reproducibility (two builds into two empty
//! target dirs) is `bash scripts/release --verify`, not run here: it is two full fat-LTO builds
//! (docs/TESTING.md, "The release tarball", has the figures).
//!
//! Needs no root, but a release build (target/dist-build, minutes when cold): gated with the root
//! tests so that `cargo unit` leaves it out.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use tern_node::version::BINARIES;

use serde_json::Value;
use tern_testkit::exec::workspace_root;

use tern_testkit::exec::output_text as text;

fn ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `bash scripts/release --out DIR`: the tarball's path (its last line of stdout).
fn release(out: &Path) -> PathBuf {
    let stdout = ok(Command::new("bash")
        .arg(workspace_root().join("scripts/release"))
        .arg("--out")
        .arg(out)
        .env_remove("SOURCE_DATE_EPOCH"));
    PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
}

fn git(args: &[&str]) -> String {
    ok(Command::new("git")
        .arg("-C")
        .arg(workspace_root())
        .args(args))
    .trim()
    .to_owned()
}

/// `readelf --wide --file-header --section-headers PATH` (binutils): the ELF type (`EXEC`,
/// `DYN`) and whether a section of type `SYMTAB` is there. Panics when readelf fails.
fn elf_type_and_symtab(path: &Path) -> (String, bool) {
    let text = ok(Command::new("readelf")
        .args(["--wide", "--file-header", "--section-headers"])
        .arg(path));
    let elf_type = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("Type:"))
        .and_then(|t| t.split_whitespace().next())
        .unwrap_or_default()
        .to_owned();
    (elf_type, text.contains(" SYMTAB "))
}

#[test]
fn release_tarball_structure_sums_and_same_bytes_twice() {
    if tern_testkit::root::skip() {
        return;
    }
    let root = workspace_root();
    let tmp = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let tarball = release(&tmp.path().join("1"));
    let first = t0.elapsed();
    let t1 = Instant::now();
    let again = release(&tmp.path().join("2"));
    eprintln!(
        "scripts/release: {:.1}s, again (nothing to build) {:.1}s",
        first.as_secs_f64(),
        t1.elapsed().as_secs_f64()
    );
    let bytes = std::fs::read(&tarball).unwrap();
    assert!(
        bytes == std::fs::read(&again).unwrap(),
        "two scripts/release runs of one tree gave different tarballs: {} vs {}",
        tarball.display(),
        again.display()
    );

    // The name, and the .sha256 beside it.
    let file = tarball.file_name().unwrap().to_string_lossy().into_owned();
    let dir = file.strip_suffix(".tar.gz").unwrap().to_owned();
    assert!(
        dir.starts_with("tern-0.") && dir.contains("-linux-"),
        "tarball name {file}"
    );
    let sum = std::fs::read_to_string(tarball.with_file_name(format!("{file}.sha256"))).unwrap();
    let actual = ok(Command::new("sha256sum").arg(&tarball));
    assert_eq!(
        sum.split_whitespace().collect::<Vec<_>>(),
        vec![actual.split_whitespace().next().unwrap(), file.as_str()],
        "the .sha256 beside the tarball"
    );

    // Entries: exactly these, sorted, 0:0, the commit's time, fixed modes.
    let listing = ok(Command::new("tar")
        .args([
            "--list",
            "--verbose",
            "--numeric-owner",
            "--full-time",
            "-zf",
        ])
        .arg(&tarball)
        .env("TZ", "UTC"));
    let epoch = git(&["log", "-1", "--format=%ct"]);
    let when =
        ok(Command::new("date").args(["-u", "-d", &format!("@{epoch}"), "+%Y-%m-%d %H:%M:%S"]));
    let mut names = Vec::new();
    for line in listing.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 6, "tar listing line {line:?}");
        let (mode, owner, date, name) = (f[0], f[1], format!("{} {}", f[3], f[4]), f[5]);
        assert_eq!(owner, "0/0", "{line}");
        assert_eq!(
            date,
            when.trim(),
            "mtime of {name} is not the commit's ({epoch})"
        );
        let want = if name.ends_with('/') {
            "drwxr-xr-x"
        } else if name.contains("/bin/") {
            "-rwxr-xr-x"
        } else {
            "-rw-r--r--"
        };
        assert_eq!(mode, want, "{name}");
        names.push(name.to_owned());
    }
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "tar entries are not in name order");
    let mut want = vec![
        format!("{dir}/"),
        format!("{dir}/INSTALL"),
        format!("{dir}/SHA256SUMS"),
        format!("{dir}/bin/"),
        format!("{dir}/cni-conf-examples/"),
    ];
    want.extend(BINARIES.iter().map(|b| format!("{dir}/bin/{b}")));
    let examples: Vec<String> = std::fs::read_dir(root.join("cni-conf-examples"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    want.extend(
        examples
            .iter()
            .map(|e| format!("{dir}/cni-conf-examples/{e}")),
    );
    want.sort();
    assert_eq!(names, want, "the tarball's entries");

    // Unpacked: the sums check and cover every other file; the conflists are the repository's.
    ok(Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(tmp.path()));
    let top = tmp.path().join(&dir);
    ok(Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(&top));
    let sums = std::fs::read_to_string(top.join("SHA256SUMS")).unwrap();
    let mut covered: Vec<String> = sums
        .lines()
        .map(|l| l.split_once("  ").unwrap().1.to_owned())
        .collect();
    covered.sort();
    let mut files: Vec<String> = want
        .iter()
        .filter(|n| !n.ends_with('/') && !n.ends_with("/SHA256SUMS"))
        .map(|n| n.strip_prefix(&format!("{dir}/")).unwrap().to_owned())
        .collect();
    files.sort();
    assert_eq!(covered, files, "what SHA256SUMS covers");
    for e in &examples {
        assert_eq!(
            std::fs::read(top.join("cni-conf-examples").join(e)).unwrap(),
            std::fs::read(root.join("cni-conf-examples").join(e)).unwrap(),
            "cni-conf-examples/{e} differs from the repository's"
        );
    }
    let install = std::fs::read_to_string(top.join("INSTALL")).unwrap();
    let commit = git(&["rev-parse", "HEAD"]);
    for needle in [
        commit.as_str(),
        "/opt/cni/bin",
        "/etc/cni/net.d",
        "sha256sum -c SHA256SUMS",
    ] {
        assert!(
            install.contains(needle),
            "INSTALL lacks {needle:?}:\n{install}"
        );
    }

    // The binaries: static, no path of this machine inside, and they answer as themselves.
    let cargo_home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or("/root".into())).join(".cargo")
        });
    let machine_paths = [
        cargo_home.to_string_lossy().into_owned(),
        root.to_string_lossy().into_owned(),
    ];
    // The check can say yes: this test binary keeps its symbols in a dev build (a release one
    // is stripped by the profile).
    if cfg!(debug_assertions) {
        let own = elf_type_and_symtab(&std::env::current_exe().unwrap());
        assert!(
            own.1,
            "the symbol table check finds none in the test binary itself"
        );
    }
    for b in BINARIES {
        let path = top.join("bin").join(b);
        let ldd = Command::new("ldd").arg(&path).output().unwrap();
        let ldd_text = String::from_utf8_lossy(&ldd.stdout).into_owned()
            + &String::from_utf8_lossy(&ldd.stderr);
        assert!(
            ldd_text.contains("statically linked") || ldd_text.contains("not a dynamic"),
            "bin/{b} is not static: {ldd_text}"
        );
        let data = std::fs::read(&path).unwrap();
        // The plugins position-dependent (EXEC), tern-agent a static-pie (DYN; `ldd` above says
        // it loads nothing): docs/decisions/0021.
        let want = if b == "tern-agent" { "DYN" } else { "EXEC" };
        let (elf_type, symtab) = elf_type_and_symtab(&path);
        assert_eq!(elf_type, want, "bin/{b}: ELF type");
        assert!(
            !symtab,
            "bin/{b} keeps its symbol table (`strip = \"symbols\"` missing from its package's release override)"
        );
        for p in &machine_paths {
            assert!(
                !data.windows(p.len()).any(|w| w == p.as_bytes()),
                "bin/{b} embeds the path {p} (a --remap-path-prefix is missing)"
            );
        }
    }
    for plugin in ["tern", "tern-tuning", "tern-ipam"] {
        let out = ok(Command::new("sh").arg("-c").arg(format!(
            "echo '{{\"cniVersion\":\"1.0.0\"}}' | CNI_COMMAND=VERSION {}",
            top.join("bin").join(plugin).display()
        )));
        let v: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{plugin} VERSION: {e}: {out}"));
        assert!(
            v["supportedVersions"]
                .as_array()
                .is_some_and(|a| a.iter().any(|s| s == "1.1.0")),
            "{plugin} VERSION: {v}"
        );
    }
    let version = ok(Command::new(top.join("bin/tern-agent")).arg("--version"));
    assert!(
        dir.starts_with(&format!(
            "tern-{}-",
            version.trim().trim_start_matches("tern-agent ")
        )),
        "tern-agent --version {version:?} does not match {dir}"
    );
}

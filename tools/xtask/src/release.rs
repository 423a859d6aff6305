//! `release-pack --bins DIR [--out DIR]`: the release tarball of the binaries scripts/release
//! built (DIR), for this machine's architecture: OUT/tern-<version>-linux-<arch>.tar.gz and its
//! `.sha256` beside it (default OUT: target/dist); prints the tarball's path.
//!
//! The tarball holds one directory, tern-<version>-linux-<arch>/: bin/ with the five binaries
//! (0755), cni-conf-examples/* (0644), INSTALL (how to install on a node without Kubernetes, the
//! commit and rustc it came from) and SHA256SUMS (`sha256sum -c SHA256SUMS` inside the directory
//! checks every other file). The same inputs give the same bytes: every mtime SOURCE_DATE_EPOCH
//! (default: the commit's time), entries sorted by name, owner and group 0:0 by number, GNU
//! format, `gzip -n -9` (no name, no time in the header): GNU tar and gzip, whose bytes these
//! flags fix (docs/DESIGN.md, "The release tarball").

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tern_node::version::BINARIES;

use sha2::{Digest, Sha256};

use crate::{failed, usage, workspace_root, Args, Res};

pub(crate) fn main(mut args: Args) -> Res {
    let root = workspace_root();
    let (mut bins, mut out) = (None, root.join("target/dist"));
    while let Some(a) = args.0.next() {
        match a.as_str() {
            "--bins" => bins = Some(PathBuf::from(args.value(&a)?)),
            "--out" => out = PathBuf::from(args.value(&a)?),
            _ => return Err(usage(format!("release-pack: unknown argument {a}"))),
        }
    }
    let bins = bins.ok_or_else(|| usage("release-pack needs --bins DIR"))?;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let name = format!("tern-{}-linux-{arch}", env!("CARGO_PKG_VERSION"));
    let stage = tempfile::tempdir().map_err(|e| failed(format!("a temporary directory: {e}")))?;
    let dir = stage.path().join(&name);
    let mut files = Vec::new();
    for b in BINARIES {
        files.push((bins.join(b), format!("bin/{b}"), 0o755));
    }
    let examples = std::fs::read_dir(root.join("cni-conf-examples"))
        .map_err(|e| failed(format!("cni-conf-examples: {e}")))?;
    for e in examples.flatten() {
        files.push((
            e.path(),
            format!("cni-conf-examples/{}", e.file_name().to_string_lossy()),
            0o644,
        ));
    }
    for (src, rel, mode) in &files {
        let bytes = std::fs::read(src).map_err(|e| failed(format!("{}: {e}", src.display())))?;
        put(&dir.join(rel), &bytes, *mode)?;
    }
    put(
        &dir.join("INSTALL"),
        install_text(&root, arch)?.as_bytes(),
        0o644,
    )?;
    put(&dir.join("SHA256SUMS"), sums(&dir)?.as_bytes(), 0o644)?;
    std::fs::create_dir_all(&out).map_err(|e| failed(format!("{}: {e}", out.display())))?;
    let tarball = out.join(format!("{name}.tar.gz"));
    pack(stage.path(), &name, &tarball)?;
    let bytes =
        std::fs::read(&tarball).map_err(|e| failed(format!("{}: {e}", tarball.display())))?;
    let line = format!("{:x}  {name}.tar.gz\n", Sha256::digest(&bytes));
    std::fs::write(out.join(format!("{name}.tar.gz.sha256")), &line)
        .map_err(|e| failed(format!("{e}")))?;
    eprintln!(
        "[release] {} ({} bytes), sha256 {}",
        tarball.display(),
        bytes.len(),
        &line[..64]
    );
    println!("{}", tarball.display());
    Ok(())
}

/// `bytes` written to `path` with `mode`, its directories made 0755.
fn put(path: &Path, bytes: &[u8], mode: u32) -> Res {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| failed(format!("{}: {e}", d.display())))?;
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| failed(format!("{e}")))?;
    }
    std::fs::write(path, bytes).map_err(|e| failed(format!("{}: {e}", path.display())))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| failed(format!("{e}")))
}

/// A command's first line of output.
fn first_line(cmd: &mut Command) -> Res<String> {
    let out = cmd.output().map_err(|e| failed(format!("{cmd:?}: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.lines().next().unwrap_or_default().to_owned())
}

fn install_text(root: &Path, arch: &str) -> Res<String> {
    let commit = first_line(
        Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(root),
    )?;
    let rustc = first_line(Command::new("rustc").arg("--version"))?;
    let (version, host) = (
        env!("CARGO_PKG_VERSION"),
        format!("{}-unknown-linux-musl", std::env::consts::ARCH),
    );
    Ok(format!(
        "tern {version} for linux/{arch}: CNI plugins and the node agent
Built from commit {commit} by {rustc} ({host}).

Check the files (in this directory):
    sha256sum -c SHA256SUMS

Install on a node without Kubernetes (nerdctl, podman's CNI backend, containerd's CRI plugin,
any libcni runtime), as root:
    install -m 0755 bin/tern bin/tern-tuning bin/tern-ipam bin/tern-lookup /opt/cni/bin/
    install -m 0644 cni-conf-examples/10-tern.conflist /etc/cni/net.d/
The binaries are statically linked. 10-tern.conflist delegates IPAM to the reference host-local
plugin (10.99.0.0/24): have host-local in /opt/cni/bin (the CNI reference plugins, on Debian
/usr/lib/cni from containernetworking-plugins), or set \"ipam\": {{\"type\": \"tern-ipam\", ...}}, which
reads the same configuration. Change \"subnet\" to a range of this node. Then, e.g.:
    nerdctl run --net tern ...           (the network's \"name\" is tern)

tern-agent is the Kubernetes DaemonSet's node agent (deploy/ in the repository); without
Kubernetes it is not needed. Error codes, configuration keys: the repository's README.md.
"
    ))
}

/// `sha256sum`'s lines for every file under `dir`, by path in byte order.
fn sums(dir: &Path) -> Res<String> {
    let mut paths = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d)
            .map_err(|e| failed(format!("{}: {e}", d.display())))?
            .flatten()
        {
            let p = e.path();
            if p.is_dir() {
                todo.push(p)
            } else {
                paths.push(p)
            }
        }
    }
    let mut rel: Vec<String> = paths
        .iter()
        .filter_map(|p| p.strip_prefix(dir).ok())
        .map(|p| p.display().to_string())
        .collect();
    rel.sort();
    let mut out = String::new();
    for r in rel {
        let bytes = std::fs::read(dir.join(&r)).map_err(|e| failed(format!("{r}: {e}")))?;
        let _ = writeln!(out, "{:x}  {r}", Sha256::digest(&bytes));
    }
    Ok(out)
}

/// GNU tar of `stage/name`, gzip'd with no name or time, into `tarball`.
fn pack(stage: &Path, name: &str, tarball: &Path) -> Res {
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(e) => e,
        Err(_) => first_line(
            Command::new("git")
                .args(["log", "-1", "--format=%ct"])
                .current_dir(workspace_root()),
        )?,
    };
    let tmp = PathBuf::from(format!("{}.tmp", tarball.display()));
    let file =
        std::fs::File::create(&tmp).map_err(|e| failed(format!("{}: {e}", tmp.display())))?;
    let mut tar = Command::new("tar")
        .args([
            "--sort=name",
            "--format=gnu",
            &format!("--mtime=@{epoch}"),
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-C",
        ])
        .arg(stage)
        .args(["-cf", "-", name])
        .env("LC_ALL", "C")
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("tar: {e}")))?;
    let pipe = tar.stdout.take().ok_or_else(|| failed("tar's output"))?;
    let gzip = Command::new("gzip")
        .args(["-n", "-9"])
        .stdin(pipe)
        .stdout(file)
        .status();
    let tar = tar.wait();
    match (tar, gzip) {
        (Ok(t), Ok(g)) if t.success() && g.success() => {
            std::fs::rename(&tmp, tarball).map_err(|e| failed(format!("{e}")))
        }
        other => Err(failed(format!("tar | gzip -n -9: {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_are_sha256sums_lines_in_path_order() {
        let d = tempfile::tempdir().unwrap();
        put(&d.path().join("b/x"), b"abc", 0o644).unwrap();
        put(&d.path().join("INSTALL"), b"", 0o644).unwrap();
        let s = sums(d.path()).unwrap();
        assert_eq!(
            s,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  INSTALL\n\
             ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  b/x\n"
        );
    }
}

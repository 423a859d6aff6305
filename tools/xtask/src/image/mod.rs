//! `image`: an OCI image-layout archive with no registry and no container engine.
//!
//! - `image [--name NAME] [--out FILE] [--version V] [--bins DIR]`: tern's image (default name
//!   ghcr.io/tern-cni/tern:0.1.0, the DaemonSet's; default out target/tern-image.oci.tar):
//!   /opt/tern/bin/{tern,tern-tuning,tern-ipam,tern-lookup} (what `tern-agent install` copies to
//!   the node) from DIR (default: the release build, target/<arch>-unknown-linux-musl/release),
//!   the reference plugins /opt/tern/bin/{portmap,bandwidth} (the release pinned in
//!   tools/go/plugins/go.mod, built by scripts/build-go into $TERN_GO_CACHE/bin/plugins: deploy/'s
//!   chain runs them after tern-tuning), /usr/local/bin/tern-agent, and /usr/sbin/nft with the
//!   shared libraries it loads (the agent's egress NAT runs it). A missing file fails, naming the
//!   command that makes it. `--version V`: the five tern binaries report V (e.g. 0.1.0+upgrade):
//!   the stamp of the image's copies rewritten ([`crate::stamp`]), the release build unchanged.
//! - `image --busybox [--name NAME] --out FILE`: busybox-static whose entrypoint sleeps forever,
//!   the tests' pause and pod image (default name localhost/tern-pause:test);
//!   `--webserver --name NAME --out FILE`: the same busybox running `httpd -f -p 80` over a
//!   one-line index.html (critest's web server image);
//!   `--rootfs DIR --entrypoint JSON [--cmd JSON] --name NAME --out FILE`: DIR as the one layer.
//!
//! One uncompressed layer, written by GNU tar (sorted, mtime 0, owner 0:0 by number): its bytes
//! are the image's identity, and GNU tar is what archives any root filesystem as it is (hard
//! links, devices, long names). The index entry carries `io.containerd.image.name`, so
//! `ctr -n k8s.io images import FILE` names it NAME; the archive itself is sorted with mtime 0
//! too, so the same inputs give the same bytes.

mod documents;
mod stage;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::{failed, usage, workspace_root, Args, Res};
use documents::Documents;
use stage::stage;

/// What the layer holds.
#[derive(Debug, PartialEq)]
enum Kind {
    Tern {
        bins: PathBuf,
        version: Option<String>,
    },
    Busybox,
    Webserver,
    Rootfs(PathBuf),
}

/// An image to build: its layer, its configuration and where it goes.
#[derive(Debug, PartialEq)]
struct Spec {
    kind: Kind,
    name: String,
    out: PathBuf,
    entrypoint: Option<String>,
    cmd: Option<String>,
}

pub(crate) fn main(args: Args) -> Res {
    let spec = parse(args)?;
    let work = tempfile::tempdir().map_err(|e| failed(format!("a temporary directory: {e}")))?;
    let (rootfs, entrypoint, env) = stage(&spec, work.path())?;
    let digest = archive(&spec, &rootfs, &entrypoint, &env, work.path())?;
    let size = std::fs::metadata(&spec.out).map_or(0, |m| m.len());
    println!(
        "{} -> {} ({size} bytes, {digest})",
        spec.name,
        spec.out.display()
    );
    Ok(())
}

fn parse(mut args: Args) -> Res<Spec> {
    let (mut kind, mut version, mut bins, mut rootfs) = ("tern", None, None, None);
    let (mut name, mut out, mut entrypoint, mut cmd) = (None, None, None, None);
    while let Some(a) = args.0.next() {
        match a.as_str() {
            "--busybox" => kind = "busybox",
            "--webserver" => kind = "webserver",
            "--rootfs" => (kind, rootfs) = ("rootfs", Some(args.value(&a)?)),
            "--entrypoint" => entrypoint = Some(args.value(&a)?),
            "--cmd" => cmd = Some(args.value(&a)?),
            "--name" => name = Some(args.value(&a)?),
            "--out" => out = Some(PathBuf::from(args.value(&a)?)),
            "--version" => version = Some(args.value(&a)?),
            "--bins" => bins = Some(PathBuf::from(args.value(&a)?)),
            _ => {
                return Err(usage(format!(
                    "image: unknown argument {a} (tools/xtask/src/image/mod.rs)"
                )))
            }
        }
    }
    if kind != "tern" && (version.is_some() || bins.is_some()) {
        return Err(usage(
            "image: --version and --bins are for tern's image only",
        ));
    }
    let kind = match kind {
        "tern" => Kind::Tern {
            bins: bins.unwrap_or_else(|| {
                let triple = format!("{}-unknown-linux-musl", std::env::consts::ARCH);
                workspace_root().join("target").join(triple).join("release")
            }),
            version,
        },
        "busybox" => Kind::Busybox,
        "webserver" => Kind::Webserver,
        _ => Kind::Rootfs(rootfs.map(PathBuf::from).unwrap_or_default()),
    };
    let (name, out) = match (&kind, name, out) {
        (Kind::Tern { .. }, n, o) => (
            n.unwrap_or_else(|| "ghcr.io/tern-cni/tern:0.1.0".into()),
            o.unwrap_or_else(|| workspace_root().join("target/tern-image.oci.tar")),
        ),
        (Kind::Busybox, n, Some(o)) => (n.unwrap_or_else(|| "localhost/tern-pause:test".into()), o),
        (Kind::Webserver, Some(n), Some(o)) => (n, o),
        (Kind::Rootfs(d), Some(n), Some(o)) if d.is_dir() && entrypoint.is_some() => (n, o),
        (Kind::Busybox, ..) => return Err(usage("image: --busybox needs --out FILE")),
        (Kind::Webserver, ..) => return Err(usage("image: --webserver needs --name and --out")),
        (Kind::Rootfs(_), ..) => {
            return Err(usage(
                "image: --rootfs needs a directory, --entrypoint, --name and --out",
            ))
        }
    };
    Ok(Spec {
        kind,
        name,
        out,
        entrypoint,
        cmd,
    })
}

/// An I/O error on `what` as a failure naming it.
pub(super) fn io(what: &Path) -> impl Fn(std::io::Error) -> crate::Failure + '_ {
    move |e| failed(format!("{}: {e}", what.display()))
}

/// A command's standard output; its failure names it.
pub(super) fn output(cmd: &mut Command) -> Res<String> {
    let out = cmd.output().map_err(|e| failed(format!("{cmd:?}: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(failed(format!("{cmd:?}: {}: {err}", out.status)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// GNU tar, sorted by name, every entry's mtime 0 and owner 0:0 by number: `tar ARGS`.
fn tar(args: &[&str]) -> Res {
    let mut c = Command::new("tar");
    c.args([
        "--numeric-owner",
        "--owner=0",
        "--group=0",
        "--sort=name",
        "--mtime=@0",
    ]);
    output(c.args(args).env("LC_ALL", "C")).map(drop)
}

/// Stores `bytes` as a blob of the layout: its descriptor's digest and size.
fn blob(layout: &Path, bytes: &[u8]) -> Res<(String, usize)> {
    let hex = format!("{:x}", Sha256::digest(bytes));
    let path = layout.join("blobs/sha256").join(&hex);
    std::fs::write(&path, bytes).map_err(io(&path))?;
    Ok((format!("sha256:{hex}"), bytes.len()))
}

/// The layer, configuration, manifest and index written as an image layout, archived to the
/// spec's `out`: the manifest's digest.
fn archive(spec: &Spec, rootfs: &Path, entrypoint: &str, env: &str, work: &Path) -> Res<String> {
    let layout = work.join("oci");
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).map_err(io(&blobs))?;
    let layer = work.join("layer.tar");
    tar(&[
        "-C",
        &rootfs.to_string_lossy(),
        "-cf",
        &layer.to_string_lossy(),
        ".",
    ])?;
    let layer = std::fs::read(&layer).map_err(io(&layer))?;
    let layer = blob(&layout, &layer)?;
    let docs = Documents::new(spec, entrypoint, env)?;
    let config = blob(&layout, docs.config(&layer.0).as_bytes())?;
    let manifest = blob(&layout, Documents::manifest(&config, &layer).as_bytes())?;
    let index = docs.index(&manifest);
    for (file, text) in [
        ("index.json", index.as_str()),
        ("oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}\n"),
    ] {
        std::fs::write(layout.join(file), text).map_err(io(&layout))?;
    }
    if let Some(dir) = spec.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let tmp = PathBuf::from(format!("{}.tmp", spec.out.display()));
    tar(&[
        "-C",
        &layout.to_string_lossy(),
        "-cf",
        &tmp.to_string_lossy(),
        "oci-layout",
        "index.json",
        "blobs",
    ])?;
    std::fs::rename(&tmp, &spec.out).map_err(io(&spec.out))?;
    std::io::stdout().flush().ok();
    Ok(manifest.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_needs_its_arguments() {
        // A directory no test or tool made (a stray `/nonexistent` on a host once passed).
        let gone =
            std::env::temp_dir().join(format!("tern-xtask-no-rootfs-{}", std::process::id()));
        assert!(!gone.exists(), "{}", gone.display());
        let gone = gone.to_string_lossy();
        for bad in [
            &["--busybox"][..],
            &["--webserver", "--out", "x"],
            &["--rootfs", "/", "--name", "n", "--out", "x"],
            &[
                "--rootfs",
                &gone,
                "--entrypoint",
                "[]",
                "--name",
                "n",
                "--out",
                "x",
            ],
            &["--busybox", "--out", "x", "--version", "1"],
            &["--frobnicate"],
        ] {
            let e = parse(Args::of(bad)).unwrap_err();
            assert_eq!(e.status, 2, "{bad:?}: {e:?}");
        }
        let tern = parse(Args::of(&["--version", "0.1.0+up"])).unwrap();
        assert_eq!(tern.name, "ghcr.io/tern-cni/tern:0.1.0");
        assert!(matches!(tern.kind, Kind::Tern { version: Some(ref v), .. } if v == "0.1.0+up"));
        let pause = parse(Args::of(&["--busybox", "--out", "p.tar"])).unwrap();
        assert_eq!(
            (pause.kind, pause.name.as_str()),
            (Kind::Busybox, "localhost/tern-pause:test")
        );
    }
}

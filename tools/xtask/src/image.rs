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

use std::io::Write;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::{failed, go_cache, usage, workspace_root, Args, Res};

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

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
                    "image: unknown argument {a} (tools/xtask/src/image.rs)"
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

fn io(what: &Path) -> impl Fn(std::io::Error) -> crate::Failure + '_ {
    move |e| failed(format!("{}: {e}", what.display()))
}

/// `install -D -m MODE src dst`: a copy with that mode, its directory made.
fn install(src: &Path, dst: &Path, mode: u32) -> Res {
    if let Some(dir) = dst.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    std::fs::copy(src, dst).map_err(io(src))?;
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(mode)).map_err(io(dst))
}

/// The layer's directory, its entrypoint and its environment (JSON arrays).
fn stage(spec: &Spec, work: &Path) -> Res<(PathBuf, String, String)> {
    let rootfs = work.join("rootfs");
    for d in ["bin", "dev", "proc", "sys", "etc", "tmp", "run"] {
        std::fs::create_dir_all(rootfs.join(d)).map_err(io(&rootfs))?;
    }
    let busybox_env = r#"["PATH=/bin"]"#.to_owned();
    match &spec.kind {
        Kind::Tern { bins, version } => {
            stage_tern(&rootfs, bins, version.as_deref())?;
            let ep = r#"["/usr/local/bin/tern-agent"]"#.to_owned();
            Ok((rootfs, ep, r#"["PATH=/usr/local/bin:/bin"]"#.to_owned()))
        }
        Kind::Rootfs(dir) => Ok((
            dir.clone(),
            spec.entrypoint.clone().unwrap_or_default(),
            r#"["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]"#.to_owned(),
        )),
        Kind::Busybox => {
            stage_busybox(&rootfs)?;
            Ok((
                rootfs,
                r#"["/bin/sleep","infinity"]"#.to_owned(),
                busybox_env,
            ))
        }
        Kind::Webserver => {
            stage_busybox(&rootfs)?;
            let www = rootfs.join("www");
            std::fs::create_dir_all(&www).map_err(io(&www))?;
            std::fs::write(www.join("index.html"), "tern critest web server\n")
                .map_err(io(&www))?;
            let ep = r#"["/bin/httpd","-f","-p","80","-h","/www"]"#.to_owned();
            Ok((rootfs, ep, busybox_env))
        }
    }
}

fn stage_tern(rootfs: &Path, bins: &Path, version: Option<&str>) -> Res {
    let mut ours = Vec::new();
    for b in [
        "tern",
        "tern-tuning",
        "tern-ipam",
        "tern-lookup",
        "tern-agent",
    ] {
        let src = bins.join(b);
        if !src.is_file() {
            let shown = src.display();
            return Err(failed(format!(
                "{shown} missing: cargo build --release --workspace"
            )));
        }
        let dir = if b == "tern-agent" {
            "usr/local/bin"
        } else {
            "opt/tern/bin"
        };
        let dst = rootfs.join(dir).join(b);
        install(&src, &dst, 0o755)?;
        ours.push(dst);
    }
    if let Some(v) = version {
        crate::stamp::main(Args(
            ours.iter()
                .map(|p| p.display().to_string())
                .chain([v.to_owned()])
                .collect::<Vec<_>>()
                .into_iter(),
        ))?;
    }
    let plugins = go_cache().join("bin/plugins");
    for b in ["portmap", "bandwidth"] {
        let src = plugins.join(b);
        if !src.is_file() {
            let shown = src.display();
            return Err(failed(format!(
                "{shown} missing (the reference {b} of tools/go/plugins/go.mod that deploy/'s chain runs): bash scripts/build-go plugins"
            )));
        }
        install(&src, &rootfs.join("opt/tern/bin").join(b), 0o755)?;
    }
    // the nft tool (Debian's nftables) and the shared libraries it loads, where the loader looks
    let nft = Path::new("/usr/sbin/nft");
    if !nft.is_file() {
        return Err(failed(
            "/usr/sbin/nft missing: apt-get install nftables (scripts/setup)",
        ));
    }
    install(nft, &rootfs.join("usr/sbin/nft"), 0o755)?;
    let ldd = output(Command::new("ldd").arg(nft))?;
    for lib in library_paths(&ldd) {
        let real = std::fs::canonicalize(&lib).map_err(io(Path::new(&lib)))?;
        install(&real, &rootfs.join(lib.trim_start_matches('/')), 0o755)?;
    }
    Ok(())
}

/// The paths in `ldd`'s report: each word's part from its first `/`.
fn library_paths(ldd: &str) -> Vec<String> {
    ldd.split_whitespace()
        .filter_map(|w| w.find('/').map(|i| w[i..].to_owned()))
        .collect()
}

fn stage_busybox(rootfs: &Path) -> Res {
    let busybox = Path::new("/bin/busybox");
    install(busybox, &rootfs.join("bin/busybox"), 0o755)?;
    let list = output(Command::new(busybox).arg("--list"))?;
    for applet in list.lines().filter(|a| !a.is_empty() && *a != "busybox") {
        symlink("busybox", rootfs.join("bin").join(applet)).map_err(io(rootfs))?;
    }
    Ok(())
}

/// A command's standard output; its failure names it.
fn output(cmd: &mut Command) -> Res<String> {
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

/// The image's JSON documents, each on one line ending in a newline.
struct Documents {
    arch: &'static str,
    name: String,
    entrypoint: Value,
    cmd: Value,
    env: Value,
}

impl Documents {
    fn new(spec: &Spec, entrypoint: &str, env: &str) -> Res<Self> {
        let parse = |what: &str, s: &str| {
            serde_json::from_str(s)
                .map_err(|e| usage(format!("image: {what} {s:?} is not JSON: {e}")))
        };
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        Ok(Self {
            arch,
            name: spec.name.clone(),
            entrypoint: parse("--entrypoint", entrypoint)?,
            cmd: parse("--cmd", spec.cmd.as_deref().unwrap_or("null"))?,
            env: parse("the environment", env)?,
        })
    }

    fn line(v: &Value) -> String {
        format!("{v}\n")
    }

    fn config(&self, layer: &str) -> String {
        let mut config = json!({"Entrypoint": self.entrypoint, "Env": self.env, "WorkingDir": "/"});
        if !matches!(self.cmd, Value::Null | Value::Bool(false)) {
            config["Cmd"] = self.cmd.clone();
        }
        Self::line(
            &json!({"architecture": self.arch, "os": "linux", "config": config,
            "rootfs": {"type": "layers", "diff_ids": [layer]}}),
        )
    }

    fn manifest(config: &(String, usize), layer: &(String, usize)) -> String {
        Self::line(&json!({"schemaVersion": 2, "mediaType": MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config.0, "size": config.1},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer.0, "size": layer.1}]}))
    }

    fn index(&self, manifest: &(String, usize)) -> String {
        // the reference's tag: what follows its last `:` (the whole name when it has none)
        let tag = self
            .name
            .rsplit_once(':')
            .map_or(self.name.as_str(), |(_, t)| t);
        Self::line(
            &json!({"schemaVersion": 2, "manifests": [{"mediaType": MANIFEST,
            "digest": manifest.0, "size": manifest.1, "platform": {"architecture": self.arch, "os": "linux"},
            "annotations": {"io.containerd.image.name": self.name, "org.opencontainers.image.ref.name": tag}}]}),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Args {
        Args(
            a.iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .into_iter(),
        )
    }

    #[test]
    fn each_kind_needs_its_arguments() {
        for bad in [
            &["--busybox"][..],
            &["--webserver", "--out", "x"],
            &["--rootfs", "/", "--name", "n", "--out", "x"],
            &[
                "--rootfs",
                "/nonexistent",
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
            let e = parse(args(bad)).unwrap_err();
            assert_eq!(e.status, 2, "{bad:?}: {e:?}");
        }
        let tern = parse(args(&["--version", "0.1.0+up"])).unwrap();
        assert_eq!(tern.name, "ghcr.io/tern-cni/tern:0.1.0");
        assert!(matches!(tern.kind, Kind::Tern { version: Some(ref v), .. } if v == "0.1.0+up"));
        let pause = parse(args(&["--busybox", "--out", "p.tar"])).unwrap();
        assert_eq!(
            (pause.kind, pause.name.as_str()),
            (Kind::Busybox, "localhost/tern-pause:test")
        );
    }

    #[test]
    fn the_documents_are_what_jq_wrote() {
        let spec = parse(args(&[
            "--rootfs",
            "/",
            "--entrypoint",
            r#"["/agnhost"]"#,
            "--cmd",
            r#"["pause"]"#,
            "--name",
            "registry.k8s.io/e2e-test-images/agnhost:2.56",
            "--out",
            "x",
        ]))
        .unwrap();
        let d = Documents::new(&spec, r#"["/agnhost"]"#, r#"["PATH=/bin"]"#).unwrap();
        assert_eq!(
            d.config("sha256:ab"),
            format!("{{\"architecture\":\"{}\",\"os\":\"linux\",\"config\":{{\"Entrypoint\":[\"/agnhost\"],\"Env\":[\"PATH=/bin\"],\"WorkingDir\":\"/\",\"Cmd\":[\"pause\"]}},\"rootfs\":{{\"type\":\"layers\",\"diff_ids\":[\"sha256:ab\"]}}}}\n", d.arch)
        );
        let index = d.index(&("sha256:cd".into(), 7));
        assert!(index.ends_with("\"annotations\":{\"io.containerd.image.name\":\"registry.k8s.io/e2e-test-images/agnhost:2.56\",\"org.opencontainers.image.ref.name\":\"2.56\"}}]}\n"), "{index}");
        let no_cmd = Documents {
            cmd: Value::Null,
            ..d
        };
        assert!(!no_cmd.config("sha256:ab").contains("Cmd"));
        assert!(Documents::manifest(&("sha256:c".into(), 1), &("sha256:l".into(), 2))
            .contains("\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"sha256:l\",\"size\":2}]"));
    }

    #[test]
    fn ldd_paths_are_each_words_part_from_its_first_slash() {
        let ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibnftables.so.1 => /lib/x86_64-linux-gnu/libnftables.so.1 (0x7f)\n\t/lib64/ld-linux-x86-64.so.2 (0x7f)\n";
        assert_eq!(
            library_paths(ldd),
            [
                "/lib/x86_64-linux-gnu/libnftables.so.1",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
    }
}

//! The sandbox ("pause") image, built here: there is no registry to pull from.
//!
//! An OCI image layout archive (`oci-layout`, `index.json`, `blobs/sha256/...`) with one
//! uncompressed layer holding busybox-static as `/bin/busybox` plus one symlink per applet, and
//! an entrypoint that sleeps forever (`/bin/sleep infinity`; StopPodSandbox kills it with
//! SIGKILL). The index entry carries `io.containerd.image.name`, which `ctr images import` uses as
//! the image name, so the CRI plugin finds it as its `sandbox_image`.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::CriError;

/// The name the image is imported under and the CRI plugin's `sandbox_image`.
pub const PAUSE_IMAGE: &str = "localhost/tern-pause:test";

/// Where busybox-static installs its binary.
const BUSYBOX: &str = "/bin/busybox";

/// The OCI architecture name of this machine (`amd64`, `arm64`, ...).
pub fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// Runs `cmd`, returns stdout; an error names the command and carries its stderr.
pub(crate) fn run(cmd: &mut Command) -> Result<String, CriError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.output().map_err(|source| CriError::Spawn {
        program: program.clone(),
        source,
    })?;
    if !out.status.success() {
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        return Err(CriError::Command {
            command: format!("{program} {}", args.join(" ")),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Writes `bytes` as a blob under `layout/blobs/sha256/`; returns its descriptor fields
/// (`digest`, `size`).
fn put_blob(layout: &Path, bytes: &[u8]) -> Result<(String, usize), CriError> {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = layout.join("blobs/sha256").join(&hex);
    std::fs::write(&path, bytes).map_err(CriError::io("write blob", &path))?;
    Ok((format!("sha256:{hex}"), bytes.len()))
}

/// Builds the pause image archive under `work` (created; scratch files stay there) and returns
/// the archive's path.
///
/// # Errors
/// [`CriError::Io`] for file operations, [`CriError::Spawn`]/[`CriError::Command`] when `tar`
/// or busybox fails (busybox-static missing: run scripts/setup).
pub fn build_pause_archive(work: &Path) -> Result<PathBuf, CriError> {
    let rootfs = work.join("rootfs");
    for sub in ["bin", "dev", "proc", "sys", "etc", "tmp"] {
        let d = rootfs.join(sub);
        std::fs::create_dir_all(&d).map_err(CriError::io("create dir", &d))?;
    }
    let bb = rootfs.join("bin/busybox");
    std::fs::copy(BUSYBOX, &bb).map_err(CriError::io("copy busybox-static to", &bb))?;
    for applet in run(Command::new(BUSYBOX).arg("--list"))?.lines() {
        if !applet.is_empty() && applet != "busybox" {
            let link = rootfs.join("bin").join(applet);
            symlink("busybox", &link).map_err(CriError::io("symlink", &link))?;
        }
    }
    let layer = work.join("layer.tar");
    run(Command::new("tar")
        .args(["--numeric-owner", "--owner=0", "--group=0", "-C"])
        .arg(&rootfs)
        .arg("-cf")
        .arg(&layer)
        .arg("."))?;
    let layer_bytes = std::fs::read(&layer).map_err(CriError::io("read", &layer))?;

    let layout = work.join("oci");
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).map_err(CriError::io("create dir", &blobs))?;
    let (layer_digest, layer_size) = put_blob(&layout, &layer_bytes)?;
    let config = json!({
        "architecture": oci_arch(),
        "os": "linux",
        "config": {
            "Entrypoint": ["/bin/sleep", "infinity"],
            "Env": ["PATH=/bin"],
            "WorkingDir": "/"
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]}
    });
    let (config_digest, config_size) = put_blob(&layout, &serde_json::to_vec(&config)?)?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": layer_digest,
            "size": layer_size
        }]
    });
    let (manifest_digest, manifest_size) = put_blob(&layout, &serde_json::to_vec(&manifest)?)?;
    let index = json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest_size,
            "platform": {"architecture": oci_arch(), "os": "linux"},
            "annotations": {
                "io.containerd.image.name": PAUSE_IMAGE,
                "org.opencontainers.image.ref.name": "test"
            }
        }]
    });
    write_json(&layout.join("index.json"), &index)?;
    write_json(
        &layout.join("oci-layout"),
        &json!({"imageLayoutVersion": "1.0.0"}),
    )?;
    let archive = work.join("pause.oci.tar");
    run(Command::new("tar")
        .args(["--numeric-owner", "--owner=0", "--group=0", "-C"])
        .arg(&layout)
        .arg("-cf")
        .arg(&archive)
        .args(["oci-layout", "index.json", "blobs"]))?;
    Ok(archive)
}

fn write_json(path: &Path, v: &Value) -> Result<(), CriError> {
    std::fs::write(path, serde_json::to_vec(v)?).map_err(CriError::io("write", path))
}

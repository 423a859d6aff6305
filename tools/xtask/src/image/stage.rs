//! The layer's root filesystem of each kind of image (module docs of [`super`]).

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{io, output, Kind, Spec};
use crate::{failed, go_cache, Args, Res};

/// `install -D -m MODE src dst`: a copy with that mode, its directory made.
fn install(src: &Path, dst: &Path, mode: u32) -> Res {
    if let Some(dir) = dst.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    std::fs::copy(src, dst).map_err(io(src))?;
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(mode)).map_err(io(dst))
}

/// The layer's directory, its entrypoint and its environment (JSON arrays).
pub(super) fn stage(spec: &Spec, work: &Path) -> Res<(PathBuf, String, String)> {
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

#[cfg(test)]
mod tests {
    use super::*;

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

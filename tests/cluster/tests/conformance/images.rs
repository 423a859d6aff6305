//! The images Kubernetes' e2e networking specs run, made here before bring-up under their exact
//! upstream names (no registry is reachable), as OCI archives (`tern-xtask image`) that node.sh's
//! `conformance_images` imports into the node's runtime from the list [`make`] writes.
//!
//! - agnhost:2.56 is a Debian 12 (bookworm) minbase root filesystem made by mmdebstrap, with the
//!   tools the specs exec inside it ([`AGNHOST_PACKAGES`]: curl, OpenBSD nc, dig, getent, ss,
//!   ping, iperf; wget, which upstream's Alpine has from busybox, for "Services should be able to
//!   up and down services"; conntrack, for the distroless-iptables tag), plus what upstream's
//!   Dockerfile adds at / (k8s.io/kubernetes@v1.34.4 test/images/agnhost/Dockerfile): the static
//!   /agnhost (`scripts/build-go e2e`), the /agnhost-2 link, porter's /localhost.crt and .key,
//!   /uploads, and /coredns ("DNS should support configurable pod resolv.conf" runs it; upstream's
//!   is CoreDNS 1.6.2, this one v1.12.1). Cached under `$TERN_GO_CACHE/images`, keyed by the
//!   package list and the agnhost and coredns build stamps (mmdebstrap takes about 70 s).
//! - jessie-dnsutils:1.7, nginx:1.14-4 and distroless-iptables:v0.7.14 are agnhost under those
//!   names: the DNS specs run `sh -c` with dig and getent in the first, the EndpointSlice spec
//!   only needs pods of the second, "KubeProxy should set TCP CLOSE_WAIT timeout" runs `sleep
//!   600` and `conntrack -L` in the third.
//! - pause:3.10.1 (pause *containers* of "Service endpoints latency") is the tier's busybox image
//!   whose entrypoint sleeps; busybox:1.37.0-1 ([sig-node] Sysctls run /bin/sysctl) is that same
//!   image (every applet is linked under /bin).
//! - regression-issue-74839:1.2 holds only its static server, built from the same module.
//! - coredns:v1.12.1 holds only /coredns, the static binary `scripts/build-go coredns` builds.
//! - with ClusterNetworkPolicy on, agnhost:2.45 (the suite's): [`cnp_agnhost_archive`].

use std::path::{Path, PathBuf};
use std::process::Command;

use tern_cluster::{fail, Node, Res};

/// The e2e specs' agnhost, the image every check's pods run.
pub const AGNHOST: &str = "registry.k8s.io/e2e-test-images/agnhost:2.56";
const AGNHOST_ALIASES: [&str; 3] = [
    "registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7",
    "registry.k8s.io/e2e-test-images/nginx:1.14-4",
    "registry.k8s.io/build-image/distroless-iptables:v0.7.14",
];
const E2E_PAUSE: &str = "registry.k8s.io/pause:3.10.1";
const BUSYBOX: &str = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1";
const BOOM: &str = "registry.k8s.io/e2e-test-images/regression-issue-74839:1.2";
/// Named in tests/conformance/coredns.yaml too (the Deployment's image).
const COREDNS: &str = "registry.k8s.io/coredns/coredns:v1.12.1";
/// The ClusterNetworkPolicy suite's pods (its conformance/base/manifests.yaml) name agnhost 2.45.
const CNP_AGNHOST: &str = "registry.k8s.io/e2e-test-images/agnhost:2.45";
/// agnhost's entrypoint and cmd, as upstream's.
const AGNHOST_ENTRY: [&str; 2] = [r#"["/agnhost"]"#, r#"["pause"]"#];
const AGNHOST_PACKAGES: &str =
    "curl,netcat-openbsd,bind9-dnsutils,iproute2,hostname,bash,iputils-ping,procps,iperf,wget,conntrack";

/// Makes every image the mode runs (`cnp`: the suite's agnhost too) and writes the import list,
/// one image a line: `ARCHIVE NAME [ALIAS ...]`, in import order. Returns the list's path.
///
/// # Errors
/// A build step failing (its command and stderr).
pub fn make(node: &Node, cnp: bool) -> Res<PathBuf> {
    let cache = go_cache(node).join("images");
    let work = cache.join("conformance");
    recreate(&work)?;
    let agnhost = agnhost_archive(node, &cache)?;
    let mut list = vec![format!(
        "{} {AGNHOST} {}",
        agnhost.display(),
        AGNHOST_ALIASES.join(" ")
    )];
    let pause = work.join("e2e-pause.oci.tar");
    image(node, &["--busybox", "--name", E2E_PAUSE], &pause)?;
    list.push(format!("{} {E2E_PAUSE} {BUSYBOX}", pause.display()));
    let boom_root = work.join("boom-root");
    let mut go = go_cmd(node, &["build", "-trimpath", "-ldflags", "-s -w", "-o"]);
    go.arg(boom_root.join("regression-issue-74839"))
        .arg("k8s.io/kubernetes/test/images/regression-issue-74839");
    node.run(&mut go, None)?;
    let boom = work.join("boom.oci.tar");
    rootfs_image(
        node,
        &boom_root,
        [r#"["/regression-issue-74839"]"#, "null"],
        BOOM,
        &boom,
    )?;
    list.push(format!("{} {BOOM}", boom.display()));
    let dns_root = work.join("coredns-root");
    for d in ["etc/coredns", "tmp"] {
        mkdir(&dns_root.join(d))?;
    }
    let coredns = Path::new(node.var("GOBIN_DIR")).join("coredns/coredns");
    install(node, "0755", &coredns, &dns_root.join("coredns"))?;
    let dns = work.join("coredns.oci.tar");
    rootfs_image(node, &dns_root, [r#"["/coredns"]"#, "null"], COREDNS, &dns)?;
    list.push(format!("{} {COREDNS}", dns.display()));
    if cnp {
        let a = cnp_agnhost_archive(node, &cache, &agnhost)?;
        list.push(format!("{} {CNP_AGNHOST}", a.display()));
    }
    let path = work.join("list");
    std::fs::write(&path, list.join("\n") + "\n")
        .map_err(|e| format!("write {}: {e}", path.display()))?;
    Ok(path)
}

/// The agnhost archive, built when its inputs changed (the cache key).
fn agnhost_archive(node: &Node, cache: &Path) -> Res<PathBuf> {
    let gobin = Path::new(node.var("GOBIN_DIR"));
    let stamp = |d: &str| -> Res<String> {
        let p = gobin.join(d).join(".stamp");
        let s = std::fs::read_to_string(&p).map_err(|e| format!("read {}: {e}", p.display()))?;
        Ok(s.trim_end_matches('\n').to_owned())
    };
    let inputs = format!("{AGNHOST_PACKAGES} {} {}", stamp("e2e")?, stamp("coredns")?);
    let sum = node.run(&mut Node::cmd("sha256sum", &[]), Some(&inputs))?;
    let out = cache.join(format!("agnhost-{}.oci.tar", sum.get(..16).unwrap_or(&sum)));
    if out.is_file() {
        return Ok(out);
    }
    // the older agnhost archives go, 2.45's made from them with them
    remove_matching(cache, "agnhost-")?;
    let work = cache.join("agnhost.work");
    recreate(&work)?;
    let made = agnhost_rootfs(node, &work.join("rootfs"))
        .and_then(|()| rootfs_image(node, &work.join("rootfs"), AGNHOST_ENTRY, AGNHOST, &out));
    let _ = std::fs::remove_dir_all(&work);
    made.map(|()| out)
}

/// agnhost's root filesystem at `rootfs`: Debian with [`AGNHOST_PACKAGES`], and upstream's files.
fn agnhost_rootfs(node: &Node, rootfs: &Path) -> Res {
    let include = format!("--include={AGNHOST_PACKAGES}");
    let mut debootstrap = Node::cmd("mmdebstrap", &["--quiet", "--variant=minbase", &include]);
    for dir in ["doc", "man", "locale", "info"] {
        debootstrap.arg(format!("--dpkgopt=path-exclude=/usr/share/{dir}/*"));
    }
    debootstrap
        .arg("bookworm")
        .arg(rootfs)
        .arg("http://deb.debian.org/debian");
    node.run(&mut debootstrap, None)?;
    let src = node.run(
        &mut go_cmd(node, &["list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes"]),
        None,
    )?;
    let porter = Path::new(src.trim()).join("test/images/agnhost/porter");
    let gobin = Path::new(node.var("GOBIN_DIR"));
    install(
        node,
        "0755",
        &gobin.join("e2e/agnhost"),
        &rootfs.join("agnhost"),
    )?;
    symlink("agnhost", &rootfs.join("agnhost-2"))?;
    for f in ["localhost.crt", "localhost.key"] {
        install(node, "0644", &porter.join(f), &rootfs.join(f))?;
    }
    install(
        node,
        "0755",
        &gobin.join("coredns/coredns"),
        &rootfs.join("coredns"),
    )?;
    mkdir(&rootfs.join("uploads"))?;
    remove_matching(&rootfs.join("var/cache/apt/archives"), ".deb")?;
    remove_matching(&rootfs.join("var/lib/apt/lists"), "")
}

/// The Go toolchain in the pinned e2e module (tools/go/e2e), offline, with the build cache.
fn go_cmd(node: &Node, args: &[&str]) -> std::process::Command {
    let cache = go_cache(node);
    let mut go = Node::cmd("/usr/local/go/bin/go", args);
    go.current_dir(node.root.join("tools/go/e2e"))
        .env("GOMODCACHE", cache.join("gomod"))
        .env("GOCACHE", cache.join("gocache"))
        .env("GOFLAGS", "-mod=readonly -buildvcs=false")
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0");
    go
}

/// `$TERN_GO_CACHE` (the directory above lib.sh's `GOBIN_DIR`).
fn go_cache(node: &Node) -> PathBuf {
    let gobin = Path::new(node.var("GOBIN_DIR"));
    gobin.parent().unwrap_or(gobin).to_owned()
}

/// `tern-xtask image ARGS --out OUT` (tools/xtask; `$TERN_BIN_DIR`, else the release build).
fn image(node: &Node, args: &[&str], out: &Path) -> Res {
    let bins = std::env::var_os("TERN_BIN_DIR").map_or_else(
        || {
            let triple = format!("{}-unknown-linux-musl", std::env::consts::ARCH);
            node.root.join("target").join(triple).join("release")
        },
        PathBuf::from,
    );
    let mut c = Command::new(bins.join("tern-xtask"));
    c.arg("image").args(args).arg("--out").arg(out);
    node.run(&mut c, None).map(drop)
}

/// `rootfs` as one layer with `entry` (an entrypoint, and a cmd or `null`), named `name`,
/// written to `out` (through `out.tmp`, so a failed build leaves no archive behind).
fn rootfs_image(node: &Node, rootfs: &Path, entry: [&str; 2], name: &str, out: &Path) -> Res {
    let tmp = out.with_extension("tmp");
    let root = rootfs.to_string_lossy();
    let [entrypoint, cmd] = entry;
    let args = [
        "--rootfs",
        &root,
        "--entrypoint",
        entrypoint,
        "--cmd",
        cmd,
        "--name",
        name,
    ];
    image(node, &args, &tmp)?;
    std::fs::rename(&tmp, out).map_err(|e| format!("rename {}: {e}", tmp.display()))
}

fn install(node: &Node, mode: &str, from: &Path, to: &Path) -> Res {
    let mut c = Node::cmd("install", &["-D", "-m", mode]);
    node.run(c.arg(from).arg(to), None).map(drop)
}

fn symlink(target: &str, link: &Path) -> Res {
    let _ = std::fs::remove_file(link);
    std::os::unix::fs::symlink(target, link)
        .map_err(|e| format!("ln -s {target} {}: {e}", link.display()))
}

fn mkdir(dir: &Path) -> Res {
    std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))
}

/// An empty directory `dir`.
fn recreate(dir: &Path) -> Res {
    let _ = std::fs::remove_dir_all(dir);
    mkdir(dir)
}

/// Removes the entries of `dir` whose names start with `prefix` ("agnhost-": archives) or, for
/// a prefix starting with '.', end with it (".deb"); a missing `dir` has none.
fn remove_matching(dir: &Path, prefix: &str) -> Res {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let hit = if prefix.starts_with('.') {
            name.ends_with(prefix)
        } else {
            name.starts_with(prefix)
        };
        if !hit {
            continue;
        }
        let p = e.path();
        let gone = if p.is_dir() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        gone.map_err(|e| format!("rm {}: {e}", p.display()))?;
    }
    Ok(())
}

/// /agnhost of the suite's agnhost:2.45, the binary moved to /agnhost.bin. This kernel has no
/// SCTP (CONFIG_IP_SCTP is not set: socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP) fails with
/// EPROTONOSUPPORT), so `agnhost porter` serving only SCTP ports exits at once (log.Fatal "Failed
/// to listen SCTP") and the suite's StatefulSets, each with two such containers, would never be
/// Ready: every test would fail at setup. The wrapper keeps such a porter running, saying why;
/// the SCTP tests then find nothing listening (README, "ClusterNetworkPolicy conformance").
const SCTP_WRAPPER: &str = r#"#!/bin/bash
# tern's conformance image (tests/cluster/tests/conformance/images.rs): agnhost, except that a
# porter serving only SCTP ports keeps running when the kernel has no SCTP (it would exit, and its
# pod never be Ready).
if [ "${1:-}" = porter ] && [ ! -d /proc/net/sctp ] && ! env | grep -q '^SERVE_\(PORT\|TLS_PORT\)_'; then
    echo "agnhost porter: this kernel has no SCTP (no /proc/net/sctp): not serving $(env | grep -o '^SERVE_SCTP_PORT_[0-9]*' | tr '\n' ' ')" >&2
    exec sleep infinity
fi
exec /agnhost.bin "$@"
"#;

/// The suite's agnhost:2.45: agnhost's archive `base` with /agnhost the [`SCTP_WRAPPER`],
/// rebuilt when `base` changed (its key in the name).
fn cnp_agnhost_archive(node: &Node, cache: &Path, base: &Path) -> Res<PathBuf> {
    let name = base
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let key = name
        .trim_start_matches("agnhost-")
        .trim_end_matches(".oci.tar");
    let out = cache.join(format!("agnhost-2.45-{key}.oci.tar"));
    if out.is_file() {
        return Ok(out);
    }
    remove_matching(cache, "agnhost-2.45-")?;
    let work = cache.join("cnp-agnhost.work");
    recreate(&work)?;
    let made = wrapped_rootfs(node, base, &work)
        .and_then(|()| rootfs_image(node, &work.join("rootfs"), AGNHOST_ENTRY, CNP_AGNHOST, &out));
    let _ = std::fs::remove_dir_all(&work);
    made.map(|()| out)
}

/// `base`'s one layer unpacked at `<work>/rootfs`, /agnhost wrapped.
fn wrapped_rootfs(node: &Node, base: &Path, work: &Path) -> Res {
    let (oci, rootfs) = (work.join("oci"), work.join("rootfs"));
    mkdir(&oci)?;
    mkdir(&rootfs)?;
    node.run(
        Node::cmd("tar", &["-xf"]).arg(base).arg("-C").arg(&oci),
        None,
    )?;
    let blob = |digest: &str| {
        let (algo, hex) = digest.split_once(':').unwrap_or(("sha256", digest));
        oci.join("blobs").join(algo).join(hex)
    };
    let json = |p: &Path| -> Res<serde_json::Value> {
        let text = std::fs::read_to_string(p).map_err(|e| format!("read {}: {e}", p.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
    };
    let index = json(&oci.join("index.json"))?;
    let Some(manifest) = index["manifests"][0]["digest"].as_str() else {
        return fail(format!("{}: no manifest in index.json", base.display()));
    };
    let manifest = json(&blob(manifest))?;
    let layer = match manifest["layers"].as_array().map(Vec::as_slice) {
        Some([one]) => one["digest"].as_str().unwrap_or_default().to_owned(),
        _ => return fail(format!("{}: not one layer", base.display())),
    };
    node.run(
        Node::cmd("tar", &["-xf"])
            .arg(blob(&layer))
            .arg("-C")
            .arg(&rootfs),
        None,
    )?;
    let (bin, wrapper) = (rootfs.join("agnhost.bin"), rootfs.join("agnhost"));
    std::fs::rename(&wrapper, &bin).map_err(|e| format!("mv {}: {e}", wrapper.display()))?;
    std::fs::write(&wrapper, SCTP_WRAPPER)
        .map_err(|e| format!("write {}: {e}", wrapper.display()))?;
    node.run(Node::cmd("chmod", &["0755"]).arg(&wrapper), None)?;
    symlink("agnhost.bin", &rootfs.join("agnhost-2"))
}

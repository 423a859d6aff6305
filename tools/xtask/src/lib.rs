//! `tern-xtask` (`cargo xtask`): the build steps of the repository that are neither product nor
//! test, in Rust rather than shell. Not shipped: the release tarball and the image take only
//! tern's own binaries.
//!
//! - `image [--name NAME] [--out FILE] [--version V] [--bins DIR]`: tern's container image as an
//!   OCI image-layout archive, from the release binaries, with no registry and no container
//!   engine; `image --busybox|--webserver|--rootfs DIR ...`: the tests' images ([`image`]).
//! - `stamp-version FILE... VERSION`: rewrites the version a built tern binary reports ([`stamp`]).
//! - `render-deploy [--out DIR] [--check]`: deploy/*.yaml from the Helm chart, or the check that
//!   they are its rendering ([`render`]).
//! - `release-pack --bins DIR [--out DIR]`: the release tarball of scripts/release's build
//!   ([`release`]).
//!
//! Exit status: 0 done, 1 failed (the reason on stderr), 2 a usage error. The binary is
//! src/main.rs; tests call [`run`] in process (tests/e2e's helm_chart: no binary to build first).

mod image;
mod release;
mod render;
mod stamp;

use std::path::{Path, PathBuf};

/// A failure: its message and the exit status it ends the run with.
#[derive(Debug)]
pub struct Failure {
    /// What failed, for stderr.
    pub message: String,
    /// 1: the task failed; 2: a usage error.
    pub status: u8,
}

type Res<T = ()> = Result<T, Failure>;

/// A failure of the task (exit status 1).
fn failed(message: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        status: 1,
    }
}

/// A usage error (exit status 2).
fn usage(message: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        status: 2,
    }
}

/// The repository's root: two levels above this crate's manifest (`tools/xtask`).
fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors().nth(2).unwrap_or(here).to_path_buf()
}

/// The cache of the pinned Go builds (`scripts/build-go`): `$TERN_GO_CACHE` or its default.
fn go_cache() -> PathBuf {
    std::env::var_os("TERN_GO_CACHE").map_or_else(|| "/var/cache/tern-build".into(), PathBuf::from)
}

/// `args` after the task's name: each flag's value taken by [`Args::value`].
struct Args(std::vec::IntoIter<String>);

impl Args {
    /// The value after `flag`.
    fn value(&mut self, flag: &str) -> Res<String> {
        self.0
            .next()
            .ok_or_else(|| usage(format!("{flag} needs a value")))
    }

    /// The arguments `a`, as a test passes them.
    #[cfg(test)]
    fn of(a: &[&str]) -> Args {
        Args(
            a.iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .into_iter(),
        )
    }
}

/// Runs the task `args` names (`image`, `stamp-version`, `render-deploy`, `release-pack`, then
/// its arguments).
///
/// # Errors
/// The task's failure, or a usage error.
pub fn run(args: Vec<String>) -> Res {
    let mut args = Args(args.into_iter());
    match args.0.next().as_deref() {
        Some("image") => image::main(args),
        Some("stamp-version") => stamp::main(args),
        Some("render-deploy") => render::main(args),
        Some("release-pack") => release::main(args),
        _ => Err(usage(
            "usage: tern-xtask image|stamp-version|render-deploy|release-pack ARGS (tools/xtask/src/lib.rs)",
        )),
    }
}

//! Where the binaries under test are: the workspace, the release bin dir (`TERN_BIN_DIR`), the reference plugins, the libcni driver; unique container IDs.

use super::*;

/// The workspace root: two levels above this crate's manifest (`crates/testkit`).
pub fn workspace_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or(here)
}

/// Directory holding the built tern binaries: `$TERN_BIN_DIR`, else the `release` directory
/// beside the running test's profile directory (`target/<triple>/release` when the build names
/// its target, as `.cargo/config.toml` does; `target/release` otherwise).
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TERN_BIN_DIR") {
        return PathBuf::from(d);
    }
    // A test binary lives in `<target dir>/<profile>/deps/`.
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join("release")))
        .filter(|d| d.is_dir())
        .unwrap_or_else(|| workspace_root().join("target/release"))
}

/// Directory holding the reference CNI plugins (host-local, ptp, tuning...):
/// `$TERN_REF_PLUGINS`, else Debian's `/usr/lib/cni`.
pub fn ref_plugin_dir() -> PathBuf {
    std::env::var_os("TERN_REF_PLUGINS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/cni"))
}

/// The libcni driver binary: `$TERN_CNITOOL`, else `<workspace>/tests/cnitool/cnitool`.
pub fn cnitool_path() -> PathBuf {
    std::env::var_os("TERN_CNITOOL")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("tests/cnitool/cnitool"))
}

/// The default `CNI_PATH` for tests: the tern bin dir, then the reference plugin dir.
pub fn default_cni_path() -> String {
    format!("{}:{}", bin_dir().display(), ref_plugin_dir().display())
}

/// Finds a plugin by name: in [`bin_dir`] first, then [`ref_plugin_dir`]. A name containing `/`
/// is returned as is. When found nowhere, returns the [`bin_dir`] path (the spawn then fails
/// with a clear [`ExecError::Spawn`]).
pub fn plugin_path(name: &str) -> PathBuf {
    if name.contains('/') {
        return PathBuf::from(name);
    }
    let ours = bin_dir().join(name);
    if ours.is_file() {
        return ours;
    }
    let reference = ref_plugin_dir().join(name);
    if reference.is_file() {
        return reference;
    }
    ours
}

/// Builds a conflist: `{"cniVersion": version, "name": name, "plugins": plugins}`.
pub fn conflist(name: &str, version: &str, plugins: Vec<Value>) -> Value {
    json!({ "cniVersion": version, "name": name, "plugins": plugins })
}

/// A container ID unique within this test process run: `tern-test-<pid>-<n>`.
pub fn unique_container_id() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "tern-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

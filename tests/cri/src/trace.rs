//! A tracer for CNI plugins under a runtime: what the runtime passes each call, as the plugin
//! sees it (the `CNI_*` environment and the netconf on stdin), one JSON line per call.
//!
//! Invariant: the traced plugin still gets the same arguments, environment and stdin; its exit
//! status and output are the runtime's to see (the script `exec`s it).

use std::path::{Path, PathBuf};

use crate::CriError;

/// The trace log of an instance directory: `<dir>/cni-trace.jsonl`.
pub fn log_path(dir: &Path) -> PathBuf {
    dir.join("cni-trace.jsonl")
}

/// Replaces each plugin `names` in CNI bin dir `bin` (a symlink to the real binary) by a script
/// that appends `{plugin, command, containerId, netns, ifname, args, path, conf}` to `log`
/// (with `jq`), then runs the real binary.
///
/// # Errors
/// [`CriError::Io`] when a plugin is not a symlink in `bin` or the script cannot be written.
pub fn wrap(bin: &Path, names: &[String], log: &Path) -> Result<(), CriError> {
    for name in names {
        let dst = bin.join(name);
        let real = std::fs::read_link(&dst).map_err(CriError::io("read link", &dst))?;
        std::fs::remove_file(&dst).map_err(CriError::io("remove", &dst))?;
        std::fs::write(&dst, tracer(name, &real, log))
            .map_err(CriError::io("write tracer", &dst))?;
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(&dst, mode).map_err(CriError::io("chmod", &dst))?;
    }
    Ok(())
}

/// The tracer script standing in for plugin `name`: appends one JSON line (the CNI environment
/// and the netconf read from stdin) to `log`, then runs `real` with the same stdin.
fn tracer(name: &str, real: &Path, log: &Path) -> String {
    format!(
        r#"#!/bin/sh
# Written by tern's CRI-O tier: records what the runtime passes to {name}, then runs it.
in=$(cat)
printf '%s' "$in" | jq -c --arg plugin '{name}' --arg command "${{CNI_COMMAND-}}" \
  --arg containerId "${{CNI_CONTAINERID-}}" --arg netns "${{CNI_NETNS-}}" \
  --arg ifname "${{CNI_IFNAME-}}" --arg args "${{CNI_ARGS-}}" --arg path "${{CNI_PATH-}}" \
  '{{plugin: $plugin, command: $command, containerId: $containerId, netns: $netns, ifname: $ifname, args: $args, path: $path, conf: .}}' >>'{log}'
printf '%s' "$in" | exec '{real}' "$@"
"#,
        log = log.display(),
        real = real.display()
    )
}

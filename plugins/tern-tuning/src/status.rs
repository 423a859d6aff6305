//! STATUS (CNI 1.1.0): whether an ADD of this configuration can succeed, checked without
//! touching anything: the allowlist loads, every configured sysctl and link attribute
//! validates against it, and `dataDir` is a directory or can be made one.
//!
//! Invariant: read-only (no file or directory is created, no netns entered).

use std::path::Path;

use tern_cni::{code, CniArgs, Error, StatusInput};
use tern_net::sysctl::Allowlist;

use crate::config::TuningConf;
use crate::TuningPlugin;

/// Stands in for `CNI_IFNAME` when `IFNAME` keys are validated: STATUS names no attachment, and
/// the rest of such a key is checked all the same.
const STATUS_IFNAME: &str = "eth0";

/// Runs STATUS.
///
/// # Errors
/// Code 6 or 7 for a configuration every ADD would refuse (a field of the wrong type, a
/// disallowed or invalid sysctl, a bad MAC or MTU); code 50 when the allowlist file cannot be
/// used (a directory, unreadable, an invalid pattern) or `dataDir` (or the nearest existing
/// directory above it) is not a directory.
pub fn status(plugin: &TuningPlugin, input: &StatusInput) -> Result<(), Error> {
    let conf = TuningConf::from_netconf(&input.config, &CniArgs::default())?;
    let not_available = |msg: String| Error::new(code::NOT_AVAILABLE, msg);
    let allowlist = Allowlist::load(&plugin.allowlist_path).map_err(|e| {
        not_available(format!("every ADD would fail: {e}"))
            .with_details("fix or remove the allowlist file")
    })?;
    let mut problems: Vec<String> = conf
        .problems(STATUS_IFNAME, Some(&allowlist))
        .iter()
        .map(ToString::to_string)
        .collect();
    problems.extend(conf.link_problems());
    if !problems.is_empty() {
        return Err(Error::invalid_config(problems.join("; "))
            .with_details("every ADD of this configuration would be refused"));
    }
    if let Some(bad) = not_a_dir(&conf.data_dir) {
        return Err(not_available(format!(
            "dataDir {}: {} is not a directory, so no backup can be written",
            conf.data_dir.display(),
            bad.display()
        )));
    }
    Ok(())
}

/// The first existing path among `dir` and its ancestors when it is not a directory (ADD would
/// fail creating `dir`); `None` when that path is a directory.
fn not_a_dir(dir: &Path) -> Option<&Path> {
    let existing = dir.ancestors().find(|p| p.symlink_metadata().is_ok())?;
    (!existing.is_dir()).then_some(existing)
}

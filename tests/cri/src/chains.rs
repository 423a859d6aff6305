//! The CNI chains the CRI tiers and their benchmarks give the runtimes, and the data dirs they name.
//!
//! - The default chain: `cni-conf-examples/10-tern.conflist` (tern + host-local, then
//!   tern-tuning with the TCP keepalive sysctls), with the instance's own range and data dirs.
//! - The reference chain: Debian's ptp + host-local, then the reference `tuning` plugin with the
//!   same sysctls (what an operator would run without tern).
//!
//! Invariant: every path a plugin writes to (host-local `dataDir`, tern `stateDir`, tuning
//! `dataDir`) is under the instance directory, so teardown removes it and tests can list it.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tern_testkit::exec::workspace_root;

use crate::CriError;

/// The plugins' data dirs every private runtime makes under its directory (see [`ipam_dir`],
/// [`tern_state_dir`], [`tuning_dir`]).
pub const DATA_DIRS: [&str; 3] = ["ipam", "tern-state", "tuning"];

/// host-local / tern-ipam `dataDir` for conflists (`<dir>/ipam`).
pub fn ipam_dir(dir: &Path) -> PathBuf {
    dir.join(DATA_DIRS[0])
}

/// tern's `stateDir` for conflists (`<dir>/tern-state`).
pub fn tern_state_dir(dir: &Path) -> PathBuf {
    dir.join(DATA_DIRS[1])
}

/// tern-tuning's / tuning's `dataDir` for conflists (`<dir>/tuning`).
pub fn tuning_dir(dir: &Path) -> PathBuf {
    dir.join(DATA_DIRS[2])
}

/// The example conflist the default chain is made from.
pub fn example_path() -> PathBuf {
    workspace_root().join("cni-conf-examples/10-tern.conflist")
}

/// The default chain: the example, renamed `name`, on `subnet`, with `dir`'s data dirs and,
/// when `kubeconfig` is given, tern's pod lookup against it.
///
/// # Errors
/// [`CriError::Io`]/[`CriError::Json`] reading the example; [`CriError::Shape`] when the example
/// no longer starts with tern followed by tern-tuning.
pub fn tern_chain(
    dir: &Path,
    name: &str,
    subnet: &str,
    kubeconfig: Option<&Path>,
) -> Result<Value, CriError> {
    let path = example_path();
    let bytes = std::fs::read(&path).map_err(CriError::io("read", &path))?;
    let mut conf: Value = serde_json::from_slice(&bytes)?;
    conf["name"] = json!(name);
    let Some(plugins) = conf["plugins"].as_array_mut() else {
        return Err(shape(&path, "no plugins array"));
    };
    if plugins.len() != 2 || plugins[0]["type"] != "tern" || plugins[1]["type"] != "tern-tuning" {
        return Err(shape(&path, "expected [tern, tern-tuning]"));
    }
    plugins[0]["stateDir"] = json!(tern_state_dir(dir));
    plugins[0]["ipam"]["ranges"] = json!([[{ "subnet": subnet }]]);
    plugins[0]["ipam"]["dataDir"] = json!(ipam_dir(dir));
    if let Some(k) = kubeconfig {
        plugins[0]["kubernetes"] = json!({ "kubeconfig": k, "lookupTimeoutSeconds": 5 });
    }
    plugins[1]["dataDir"] = json!(tuning_dir(dir));
    Ok(conf)
}

/// The sysctls (key → value) the default chain's tern-tuning sets.
pub fn tuning_sysctls(chain: &Value) -> Vec<(String, String)> {
    chain["plugins"]
        .as_array()
        .and_then(|p| {
            p.iter()
                .find(|p| p["type"] == "tern-tuning" || p["type"] == "tuning")
        })
        .and_then(|p| p["sysctl"].as_object())
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// The reference chain: ptp + host-local on `subnet`, then `tuning` with the same sysctls as
/// `tern` (the default chain), all data under `dir`.
pub fn reference_chain(dir: &Path, name: &str, subnet: &str, tern: &Value) -> Value {
    let sysctl: serde_json::Map<String, Value> = tuning_sysctls(tern)
        .into_iter()
        .map(|(k, v)| (k, json!(v)))
        .collect();
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": "ptp",
                "ipMasq": false,
                "mtu": 1500,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": subnet }]],
                    "dataDir": ipam_dir(dir)
                }
            },
            {
                "type": "tuning",
                "sysctl": sysctl,
                "dataDir": tuning_dir(dir)
            }
        ]
    })
}

fn shape(path: &Path, detail: &str) -> CriError {
    CriError::Shape {
        what: "cni-conf-examples/10-tern.conflist",
        detail: format!("{}: {detail}", path.display()),
    }
}

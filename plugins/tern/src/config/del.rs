//! What DEL reads of the netconf ([`DelConf`]), leniently: a value ADD would refuse never makes
//! DEL fail.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tern_cni::NetConf;

use super::{absolute, DEFAULT_STATE_DIR, SELF_TYPES};

/// What DEL needs of the netconf to find and release what ADD made, read leniently: DEL never
/// strands a sandbox (a runtime retries a failed DEL forever, and the kubelet keeps the sandbox
/// and its IP meanwhile), so nothing here is refused. A value ADD would refuse is `None` and the
/// step that needs it is skipped with a warning (ADD refused that config before making anything).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelConf {
    /// `stateDir` (default [`DEFAULT_STATE_DIR`]); `None` when not an absolute path string.
    pub state_dir: Option<PathBuf>,
    /// `ipam.type`; `None` when missing, not a plugin name, or tern itself.
    pub ipam_type: Option<String>,
    /// `ipMasq` when a boolean, else false (the attachment's state records what ADD did).
    pub ip_masq: bool,
    /// `draining` when a boolean, else false: `tern-agent uninstall` began on this node.
    pub draining: bool,
    /// The CNI conf dir as the host sees it: the directory of `kubernetes.kubeconfig` when that
    /// is an absolute path (tern-agent keeps the kubeconfig and the drain mark there).
    pub conf_dir: Option<PathBuf>,
}

impl DelConf {
    /// Reads `stateDir`, `ipam.type`, `ipMasq`, `draining` and `kubernetes.kubeconfig` from
    /// `conf`, logging what it cannot use.
    pub fn from_netconf(conf: &NetConf) -> DelConf {
        let mut raw = conf.raw.clone();
        tern_cni::netconf::normalize_keys(&mut raw, &["stateDir"]);
        let state_dir = match raw.get("stateDir") {
            None | Some(Value::Null) => Some(PathBuf::from(DEFAULT_STATE_DIR)),
            Some(Value::String(s)) if absolute("stateDir", s).is_ok() => Some(PathBuf::from(s)),
            Some(other) => {
                tracing::warn!(state_dir = %other, "DEL: stateDir unusable: no state to find (ADD refuses this config)");
                None
            }
        };
        let ipam_type = match conf.ipam_type() {
            Ok(t) if t != conf.plugin_type && !SELF_TYPES.contains(&t) => Some(t.to_owned()),
            Ok(t) => {
                tracing::warn!(ipam_type = %t, "DEL: ipam.type is not an IPAM plugin: no IPAM release");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "DEL: no usable ipam.type: no IPAM release");
                None
            }
        };
        let conf_dir = conf
            .raw
            .get("kubernetes")
            .and_then(|k| k.get("kubeconfig"))
            .and_then(Value::as_str)
            .filter(|p| p.starts_with('/'))
            .and_then(|p| Path::new(p).parent())
            .map(Path::to_path_buf);
        let flag = |key: &str| conf.raw.get(key).and_then(Value::as_bool).unwrap_or(false);
        DelConf {
            state_dir,
            ipam_type,
            ip_masq: flag("ipMasq"),
            draining: flag("draining"),
            conf_dir,
        }
    }
}

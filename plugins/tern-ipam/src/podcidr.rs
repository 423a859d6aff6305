//! `"subnet": "usePodCidr"`: the node's `spec.podCIDRs` (Kubernetes `core/v1` Node), read through
//! the kubeconfig of tern's netconf (`kubernetes.kubeconfig`) on the first ADD and cached in
//! `<dataDir>/<network>/pod_cidrs.json`, so later ADDs make no API call.
//!
//! Invariants: only ADD may call the API ([`Fetch::Allowed`]); CHECK and STATUS read the cache
//! only. The cache is written atomically and names the node it belongs to: a cache of another
//! node name is ignored. The node's name is `kubernetes.nodeName`, else the host name lower-cased
//! (kubelet's default node name). The cache file is not named by an address and holds no
//! container ID, so neither host-local nor tern-ipam takes it for a lease.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tern_cni::NetConf;
use tern_kube::helper::{self, Call, NodeCall, NodeReply};

use crate::config::StoreLocation;
use crate::error::IpamError;

/// The cache file's name inside the network directory.
pub const CACHE_FILE: &str = "pod_cidrs.json";

/// How long the node GET may take when `kubernetes.lookupTimeoutSeconds` is absent.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the API may be asked when the cache is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetch {
    /// ADD: read the node from the API when the cache is missing.
    Allowed,
    /// CHECK, STATUS: the cache or nothing.
    CacheOnly,
}

#[derive(Debug, Serialize, Deserialize)]
struct Cache {
    node: String,
    #[serde(rename = "podCIDRs")]
    pod_cidrs: Vec<String>,
}

/// The `kubernetes` settings of tern's netconf that usePodCidr needs.
#[derive(Clone, Debug, PartialEq)]
pub struct KubeSettings {
    /// `kubernetes.kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// `kubernetes.nodeName`, else the host name lower-cased.
    pub node_name: String,
    /// `kubernetes.lookupTimeoutSeconds`, else [`DEFAULT_TIMEOUT`].
    pub timeout: Duration,
}

impl KubeSettings {
    /// Reads the `kubernetes` object of `conf`.
    ///
    /// # Errors
    /// [`IpamError::Config`] for a non-positive timeout or no usable node name.
    pub fn load(conf: &NetConf) -> Result<KubeSettings, IpamError> {
        let k = conf.raw.get("kubernetes").and_then(Value::as_object);
        let get = |key: &str| k.and_then(|k| k.get(key));
        let kubeconfig = get("kubeconfig")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        let timeout = match get("lookupTimeoutSeconds").and_then(Value::as_f64) {
            None => DEFAULT_TIMEOUT,
            Some(s) if s > 0.0 && s.is_finite() => Duration::from_secs_f64(s),
            Some(s) => {
                return Err(IpamError::Config(format!(
                    "kubernetes.lookupTimeoutSeconds must be positive, got {s}"
                )))
            }
        };
        let node_name = match get("nodeName").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_owned(),
            _ => std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_lowercase())
                .ok()
                .filter(|h| !h.is_empty())
                .ok_or_else(|| {
                    IpamError::Config(
                        "usePodCidr: no kubernetes.nodeName and no host name to use".into(),
                    )
                })?,
        };
        Ok(KubeSettings {
            kubeconfig,
            node_name,
            timeout,
        })
    }
}

fn cache_path(loc: &StoreLocation) -> PathBuf {
    loc.data_dir.join(&loc.name).join(CACHE_FILE)
}

fn read_cache(path: &Path, node: &str) -> Option<Vec<String>> {
    let text = std::fs::read(path).ok()?;
    let c: Cache = serde_json::from_slice(&text).ok()?;
    (c.node == node && !c.pod_cidrs.is_empty()).then_some(c.pod_cidrs)
}

/// The node's pod CIDRs, as the API lists them (at most one per family).
///
/// # Errors
/// [`IpamError::PodCidr`] (code 11) when the API cannot be asked (through `tern-lookup` in
/// `cni_path`) or answers badly, when the node
/// has no podCIDRs yet, or with [`Fetch::CacheOnly`] when nothing is cached;
/// [`IpamError::Config`] when `kubernetes.kubeconfig` is missing.
pub fn resolve(
    conf: &NetConf,
    loc: &StoreLocation,
    fetch: Fetch,
    cni_path: &str,
) -> Result<Vec<String>, IpamError> {
    let k = KubeSettings::load(conf)?;
    let path = cache_path(loc);
    if let Some(cidrs) = read_cache(&path, &k.node_name) {
        return Ok(cidrs);
    }
    if fetch == Fetch::CacheOnly {
        return Err(IpamError::PodCidr(format!(
            "usePodCidr: the podCIDRs of node {} are not cached yet (the first ADD reads them)",
            k.node_name
        )));
    }
    let Some(kubeconfig) = &k.kubeconfig else {
        return Err(IpamError::Config(
            "usePodCidr needs kubernetes.kubeconfig in the network configuration".into(),
        ));
    };
    // The GET runs in tern-lookup: this library, linked into tern, carries no HTTP or TLS.
    let call = Call::Node(NodeCall {
        kubeconfig: kubeconfig.clone(),
        name: k.node_name.clone(),
        timeout_ms: u64::try_from(k.timeout.as_millis()).unwrap_or(u64::MAX),
    });
    let node: NodeReply = helper::call(cni_path, &call).map_err(|e| IpamError::Lookup {
        code: e.code,
        msg: format!("usePodCidr: get node {}: {}", k.node_name, e.msg),
    })?;
    if node.pod_cidrs.is_empty() {
        return Err(IpamError::PodCidr(format!(
            "usePodCidr: node {} has no spec.podCIDRs yet",
            k.node_name
        )));
    }
    let cache = Cache {
        node: k.node_name.clone(),
        pod_cidrs: node.pod_cidrs.clone(),
    };
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            let bytes = serde_json::to_vec(&cache).map_err(std::io::Error::other)?;
            tern_node::fs::write_atomic(&path, &bytes, 0o644)
        });
    if let Err(e) = written {
        // The ADD can go on; the next one asks the API again.
        tracing::warn!(path = %path.display(), error = %e, "cannot cache the node's podCIDRs");
    }
    Ok(node.pod_cidrs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(mut v: Value) -> NetConf {
        if v.get("type").is_none() {
            v["type"] = json!("tern-ipam"); // a netconf names its plugin
        }
        NetConf::parse(serde_json::to_vec(&v).unwrap()).unwrap()
    }

    #[test]
    fn settings_and_cache() {
        let c = conf(json!({"cniVersion": "1.1.0", "name": "n",
            "kubernetes": {"kubeconfig": "/k", "nodeName": "node-a", "lookupTimeoutSeconds": 0.5}}));
        let k = KubeSettings::load(&c).unwrap();
        assert_eq!(k.kubeconfig, Some(PathBuf::from("/k")));
        assert_eq!(k.node_name, "node-a");
        assert_eq!(k.timeout, Duration::from_millis(500));
        let bad = conf(json!({"cniVersion": "1.1.0", "name": "n",
            "kubernetes": {"lookupTimeoutSeconds": 0}}));
        assert!(KubeSettings::load(&bad).is_err());
        let host = KubeSettings::load(&conf(json!({"cniVersion": "1.1.0", "name": "n"}))).unwrap();
        assert_eq!(host.node_name, host.node_name.to_lowercase());
        assert_eq!(host.kubeconfig, None);

        let tmp = tempfile::tempdir().unwrap();
        let loc = StoreLocation {
            name: "n".into(),
            data_dir: tmp.path().into(),
        };
        let e = resolve(&c, &loc, Fetch::CacheOnly, "/nonexistent").unwrap_err();
        assert_eq!(e.to_cni().code, 11);
        std::fs::create_dir_all(tmp.path().join("n")).unwrap();
        std::fs::write(
            cache_path(&loc),
            r#"{"node": "node-a", "podCIDRs": ["10.1.0.0/24"]}"#,
        )
        .unwrap();
        assert_eq!(
            resolve(&c, &loc, Fetch::CacheOnly, "/nonexistent").unwrap(),
            ["10.1.0.0/24"]
        );
        let other =
            conf(json!({"cniVersion": "1.1.0", "name": "n", "kubernetes": {"nodeName": "node-b"}}));
        assert!(
            resolve(&other, &loc, Fetch::CacheOnly, "/nonexistent").is_err(),
            "a cache of another node is ignored"
        );
        let e = resolve(&other, &loc, Fetch::Allowed, "/nonexistent").unwrap_err();
        assert_eq!(e.to_cni().code, 7, "{e}");
    }
}

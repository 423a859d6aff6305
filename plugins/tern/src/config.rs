//! The `tern` netconf (DESIGN.md, "Main plugin netconf"): validated before anything changes.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tern_cni::{Dns, Error, NetConf};

mod del;
mod network_policy;

pub use del::DelConf;
pub use network_policy::{NetworkPolicyConf, DEFAULT_WAIT_SECONDS, MAX_WAIT_SECONDS};

/// Default MTU when `mtu` is absent or 0, in bytes.
pub const DEFAULT_MTU: u32 = 1500;
/// Smallest MTU the kernel accepts for IPv4 (RFC 791), in bytes.
pub const MIN_MTU: u32 = 68;
/// Largest MTU a veth accepts (`ETH_MAX_MTU`), in bytes.
pub const MAX_MTU: u32 = 65535;
/// Where per-attachment state lives unless `stateDir` says otherwise: a tmpfs, like the reference
/// tuning plugin's `/run/cni/tuning`. The state describes veths, which do not survive a reboot,
/// so it need not either (docs/decisions/0011).
pub const DEFAULT_STATE_DIR: &str = "/run/cni/tern";
/// The agent channel unless `agentSocket` says otherwise.
pub const DEFAULT_AGENT_SOCKET: &str = "/run/tern/agent.sock";
/// Default deadline for the whole pod lookup on ADD.
pub const DEFAULT_LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

const KNOWN_KEYS: &[&str] = &[
    "mtu",
    "kubernetes",
    "agentSocket",
    "stateDir",
    "ipMasqBackend",
    "draining",
    "networkPolicy",
];

/// The one `ipMasqBackend` tern implements (the reference ptp also takes `iptables`).
pub const IP_MASQ_BACKEND: &str = "nftables";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    #[serde(default)]
    mtu: Option<u32>,
    #[serde(default)]
    kubernetes: Option<WireKube>,
    #[serde(default)]
    agent_socket: Option<String>,
    #[serde(default)]
    state_dir: Option<String>,
    #[serde(default)]
    ip_masq_backend: Option<String>,
    #[serde(default)]
    draining: Option<bool>,
    #[serde(default)]
    network_policy: Option<network_policy::Wire>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireKube {
    #[serde(default)]
    kubeconfig: Option<String>,
    /// Whole-lookup deadline in seconds (may be fractional).
    #[serde(default)]
    lookup_timeout_seconds: Option<f64>,
}

/// Kubernetes pod lookup settings (`kubernetes` in the netconf).
#[derive(Clone, Debug, PartialEq)]
pub struct KubeConf {
    /// The kubeconfig tern-agent keeps fresh.
    pub kubeconfig: PathBuf,
    /// Deadline for the whole lookup, refresh and retry included.
    pub lookup_timeout: Duration,
}

/// The validated `tern` configuration.
#[derive(Clone, Debug)]
pub struct TernConf {
    /// MTU of both veth ends, in bytes (68–65535).
    pub mtu: u32,
    /// Pod lookup; `None` means tern never calls the API server.
    pub kubernetes: Option<KubeConf>,
    /// The agent channel's Unix socket.
    pub agent_socket: PathBuf,
    /// Per-attachment state directory (a subdirectory per network lives under it).
    pub state_dir: PathBuf,
    /// The `ipam.type` to delegate to.
    pub ipam_type: String,
    /// DNS from the netconf when any of its fields is set (then it replaces IPAM's, as ptp does).
    pub dns_override: Option<Dns>,
    /// `ipMasq`: masquerade the pod's addresses towards destinations outside their IPAM subnet
    /// (per-attachment nftables rules, `crate::masq`). Default false.
    pub ip_masq: bool,
    /// `draining`: tern is being uninstalled from this node (`tern-agent uninstall` writes it into
    /// the conflist): STATUS answers 50 and ADD is refused (108); DEL and GC work as ever.
    pub draining: bool,
    /// `networkPolicy`: ADD waits for tern-agent to admit the pod (`None`: it never asks).
    pub network_policy: Option<NetworkPolicyConf>,
}

impl TernConf {
    /// Reads tern's fields from the netconf and validates them.
    ///
    /// # Errors
    /// Code 6 for wrong types; code 7 for an MTU outside 68–65535, a missing `ipam.type`, an empty
    /// kubeconfig path, a non-positive lookup timeout or `networkPolicy.waitSeconds`.
    pub fn from_netconf(conf: &NetConf) -> Result<TernConf, Error> {
        let wire: Wire = conf.decode(KNOWN_KEYS)?;
        let mtu = match wire.mtu {
            None | Some(0) => DEFAULT_MTU,
            Some(m) if (MIN_MTU..=MAX_MTU).contains(&m) => m,
            Some(m) => {
                return Err(Error::invalid_config(format!(
                    "invalid mtu {m}: a veth MTU must be between {MIN_MTU} and {MAX_MTU} (0 or absent means {DEFAULT_MTU})"
                )))
            }
        };
        let kubernetes = match wire.kubernetes {
            None => None,
            Some(WireKube {
                kubeconfig: None, ..
            }) => None,
            Some(WireKube {
                kubeconfig: Some(path),
                lookup_timeout_seconds,
            }) => {
                absolute("kubernetes.kubeconfig", &path)?;
                let lookup_timeout = match lookup_timeout_seconds {
                    None => DEFAULT_LOOKUP_TIMEOUT,
                    Some(s) if s.is_finite() && s > 0.0 && s <= 300.0 => Duration::from_secs_f64(s),
                    Some(s) => {
                        return Err(Error::invalid_config(format!(
                            "invalid kubernetes.lookupTimeoutSeconds {s}: must be above 0 and at most 300"
                        )))
                    }
                };
                Some(KubeConf {
                    kubeconfig: PathBuf::from(path),
                    lookup_timeout,
                })
            }
        };
        let ipam_type = conf.ipam_type()?.to_owned();
        // tern as its own IPAM would exec itself with the same input, forever.
        if ipam_type == conf.plugin_type || SELF_TYPES.contains(&ipam_type.as_str()) {
            return Err(Error::invalid_config(format!(
                "ipam.type {ipam_type:?} is not an IPAM plugin: tern would delegate to itself"
            ))
            .with_details("use host-local, tern-ipam or another IPAM plugin"));
        }
        let agent_socket = wire
            .agent_socket
            .unwrap_or_else(|| DEFAULT_AGENT_SOCKET.into());
        absolute("agentSocket", &agent_socket)?;
        let state_dir = wire.state_dir.unwrap_or_else(|| DEFAULT_STATE_DIR.into());
        absolute("stateDir", &state_dir)?;
        match wire.ip_masq_backend.as_deref() {
            None | Some(IP_MASQ_BACKEND) => {}
            Some(other) => {
                return Err(Error::invalid_config(format!(
                "ipMasqBackend {other:?} is not implemented: tern masquerades with nftables only"
            ))
                .with_details("set \"ipMasqBackend\": \"nftables\" or leave it out"))
            }
        }
        Ok(TernConf {
            mtu,
            kubernetes,
            agent_socket: PathBuf::from(agent_socket),
            state_dir: PathBuf::from(state_dir),
            ipam_type,
            dns_override: dns_override(conf)?,
            // Its type (a boolean) is checked with the standard fields (`tern_cni::netconf::check`).
            ip_masq: conf
                .raw
                .get("ipMasq")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            draining: wire.draining.unwrap_or(false),
            network_policy: network_policy::validate(wire.network_policy)?,
        })
    }

    /// The error ADD gives while [`TernConf::draining`].
    pub fn draining_error() -> Error {
        Error::new(
            tern_cni::code::DRAINING,
            "tern is being uninstalled from this node (its conflist is draining): no new pod is wired here",
        )
        .with_details(
            "the node's pods are torn down as they go; once none is left the conflist is removed",
        )
    }
}

/// Plugin types that are not IPAM plugins and must never be delegated to.
const SELF_TYPES: &[&str] = &["tern", "tern-tuning"];

/// Refuses an empty or relative path: a plugin runs in the runtime's working directory, so a
/// relative path would land somewhere arbitrary.
fn absolute(key: &str, path: &str) -> Result<(), Error> {
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(Error::invalid_config(format!(
            "{key} {path:?} must be an absolute path"
        )))
    }
}

/// The netconf's `dns` when it "is set": any of `nameservers`, `search`, `options` present (even
/// empty) or a non-empty `domain` — the reference ptp's rule.
fn dns_override(conf: &NetConf) -> Result<Option<Dns>, Error> {
    let Some(Value::Object(raw)) = conf.raw.get("dns") else {
        return Ok(None);
    };
    let set = ["nameservers", "search", "options"]
        .iter()
        .any(|k| raw.get(*k).is_some_and(|v| !v.is_null()))
        || raw
            .get("domain")
            .and_then(Value::as_str)
            .is_some_and(|d| !d.is_empty());
    Ok(if set { conf.dns.clone() } else { None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(extra: Value) -> Result<TernConf, Error> {
        let mut v = json!({"cniVersion": "1.0.0", "name": "n", "type": "tern", "ipam": {"type": "host-local"}});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        TernConf::from_netconf(&NetConf::parse(serde_json::to_vec(&v).unwrap())?)
    }

    #[test]
    fn defaults() {
        let c = conf(json!({})).unwrap();
        assert_eq!(c.mtu, 1500);
        assert!(c.kubernetes.is_none());
        assert_eq!(c.agent_socket, PathBuf::from("/run/tern/agent.sock"));
        assert_eq!(c.state_dir, PathBuf::from("/run/cni/tern"));
        assert_eq!(conf(json!({"mtu": 0})).unwrap().mtu, 1500);
    }

    #[test]
    fn mtu_bounds() {
        for bad in [70000, 67, 65536] {
            let e = conf(json!({"mtu": bad})).unwrap_err();
            assert_eq!(e.code, 7, "{bad}");
            assert!(e.msg.contains(&bad.to_string()));
        }
        assert_eq!(conf(json!({"mtu": -1})).unwrap_err().code, 6);
        assert_eq!(conf(json!({"MTU": 9000})).unwrap().mtu, 9000);
    }

    #[test]
    fn paths_must_be_absolute_and_ipam_must_not_be_tern() {
        for bad in [
            json!({"stateDir": "rel/state"}),
            json!({"agentSocket": "agent.sock"}),
        ] {
            assert_eq!(conf(bad.clone()).unwrap_err().code, 7, "{bad}");
        }
        for t in ["tern", "tern-tuning"] {
            let e = conf(json!({"ipam": {"type": t}})).unwrap_err();
            assert_eq!(e.code, 7, "{t}");
            assert!(e.msg.contains("delegate to itself"), "{}", e.msg);
        }
    }

    #[test]
    fn ipam_is_required() {
        let v = json!({"cniVersion": "1.0.0", "name": "n", "type": "tern"});
        let nc = NetConf::parse(serde_json::to_vec(&v).unwrap()).unwrap();
        assert_eq!(TernConf::from_netconf(&nc).unwrap_err().code, 7);
    }

    #[test]
    fn kubernetes_settings() {
        let c =
            conf(json!({"kubernetes": {"kubeconfig": "/etc/cni/net.d/tern-kubeconfig"}})).unwrap();
        assert_eq!(c.kubernetes.unwrap().lookup_timeout, Duration::from_secs(5));
        let c =
            conf(json!({"kubernetes": {"kubeconfig": "/k", "lookupTimeoutSeconds": 0.5}})).unwrap();
        assert_eq!(
            c.kubernetes.unwrap().lookup_timeout,
            Duration::from_millis(500)
        );
        assert_eq!(
            conf(json!({"kubernetes": {"kubeconfig": ""}}))
                .unwrap_err()
                .code,
            7
        );
        assert_eq!(
            conf(json!({"kubernetes": {"kubeconfig": "/k", "lookupTimeoutSeconds": 0}}))
                .unwrap_err()
                .code,
            7
        );
    }

    #[test]
    fn network_policy_wait() {
        assert!(conf(json!({})).unwrap().network_policy.is_none());
        let wait =
            |v: Value| conf(json!({"networkPolicy": v})).map(|c| c.network_policy.unwrap().wait);
        assert_eq!(wait(json!({})).unwrap(), Duration::from_secs(10));
        assert_eq!(
            wait(json!({"waitSeconds": 2.5})).unwrap(),
            Duration::from_millis(2500)
        );
        for bad in [json!(0), json!(-1), json!(301)] {
            assert_eq!(
                wait(json!({"waitSeconds": bad})).unwrap_err().code,
                7,
                "{bad}"
            );
        }
        assert_eq!(wait(json!({"waitSecs": 1})).unwrap_err().code, 6);
        assert_eq!(wait(json!({"waitSeconds": "5"})).unwrap_err().code, 6);
    }

    #[test]
    fn ip_masq_and_its_backend() {
        assert!(!conf(json!({})).unwrap().ip_masq);
        assert!(conf(json!({"ipMasq": true})).unwrap().ip_masq);
        assert!(
            conf(json!({"ipMasq": true, "ipMasqBackend": "nftables"}))
                .unwrap()
                .ip_masq
        );
        for bad in ["iptables", "", "nft"] {
            let e = conf(json!({"ipMasq": true, "ipMasqBackend": bad})).unwrap_err();
            assert_eq!(e.code, 7, "{bad}");
            assert!(
                e.msg.contains("ipMasqBackend") && e.msg.contains(&format!("{bad:?}")),
                "{}",
                e.msg
            );
        }
        assert_eq!(conf(json!({"ipMasq": "yes"})).unwrap_err().code, 6);
        assert_eq!(conf(json!({"ipMasqBackend": 1})).unwrap_err().code, 6);
    }

    #[test]
    fn dns_override_only_when_set() {
        assert!(conf(json!({"dns": {}})).unwrap().dns_override.is_none());
        assert!(conf(json!({"dns": {"domain": ""}}))
            .unwrap()
            .dns_override
            .is_none());
        assert!(conf(json!({"dns": {"search": []}}))
            .unwrap()
            .dns_override
            .is_some());
        let c = conf(json!({"dns": {"nameservers": ["10.96.0.10"]}})).unwrap();
        assert_eq!(c.dns_override.unwrap().nameservers, vec!["10.96.0.10"]);
    }
}

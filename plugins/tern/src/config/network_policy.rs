//! `networkPolicy` in tern's netconf: ADD waits for tern-agent to admit the pod (DESIGN.md,
//! "NetworkPolicy in the agent"), so that a pod a policy selects never runs before its rules are
//! in the kernel. Absent: ADD never talks to the agent about policy (no wait, no socket).

use std::time::Duration;

use serde::Deserialize;
use tern_cni::Error;

/// The wait when `networkPolicy` is present without `waitSeconds` (seconds).
pub const DEFAULT_WAIT_SECONDS: f64 = 10.0;
/// The longest `waitSeconds` accepted (the kubelet's CNI call has its own deadline, minutes).
pub const MAX_WAIT_SECONDS: f64 = 300.0;

/// `networkPolicy` as written.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Wire {
    #[serde(default)]
    wait_seconds: Option<f64>,
}

/// The validated `networkPolicy`.
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkPolicyConf {
    /// How long ADD waits for the agent's admission (above 0, at most
    /// [`MAX_WAIT_SECONDS`]); ADD fails with code 11 when it passes.
    pub wait: Duration,
}

/// Validates `networkPolicy`.
///
/// # Errors
/// Code 7 for a `waitSeconds` that is not above 0 and at most [`MAX_WAIT_SECONDS`].
pub(super) fn validate(wire: Option<Wire>) -> Result<Option<NetworkPolicyConf>, Error> {
    let Some(w) = wire else {
        return Ok(None);
    };
    match w.wait_seconds.unwrap_or(DEFAULT_WAIT_SECONDS) {
        s if s.is_finite() && s > 0.0 && s <= MAX_WAIT_SECONDS => Ok(Some(NetworkPolicyConf {
            wait: Duration::from_secs_f64(s),
        })),
        s => Err(Error::invalid_config(format!(
            "invalid networkPolicy.waitSeconds {s}: must be above 0 and at most {MAX_WAIT_SECONDS}"
        ))),
    }
}

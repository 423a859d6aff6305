//! The agent's side of the watch layer (`tern-watch`): connections made with the agent's own
//! credentials, read again for each list and watch (`connect`), and the agent's retry policy
//! and stop flag (`AgentControl`): [`run_reflector`], with which the node routes and the
//! NetworkPolicy controller run their reflectors.
//!
//! Invariant: no reflector here has a retry policy, a deadline or a credential of its own.

use std::time::Duration;

use tern_kube::KubeError;
use tern_watch::{Api, ClientApi, Connect, Control, Deadlines};

use crate::mint::{in_cluster_client, ApiAccess, ControllerSettings};
use crate::schedule::Rng;
use crate::stop_signal::StopSignal;

/// Connections to `api` with `watch` as each watch's `timeoutSeconds` and `idle` as its longest
/// silence; each call reads the agent's token and CA again (the kubelet rotates the token).
fn connect(api: ApiAccess, watch: Duration, idle: Duration) -> Box<Connect> {
    Box::new(move || -> Result<Box<dyn Api>, KubeError> {
        let (client, _) = in_cluster_client(&api)?;
        Ok(Box::new(ClientApi {
            client,
            deadlines: Deadlines {
                request: api.request_timeout,
                watch,
                idle,
            },
        }))
    })
}

/// The agent's retry policy ([`ControllerSettings::api_failure`]) and a controller's stop flag;
/// `count` adds each failure's cause ([`KubeError::cause_label`]) to the controller's metrics.
struct AgentControl<'a> {
    /// The back-off policy.
    run: &'a ControllerSettings,
    /// The controller's stop flag.
    stop: &'a StopSignal,
    /// Jitter.
    rng: Rng,
    /// Counts one failure by cause.
    count: Box<dyn Fn(&'static str) + 'a>,
    /// What the controller leaves as it is while the API fails (`routes unchanged`), for the log.
    unchanged: &'static str,
}

impl Control for AgentControl<'_> {
    fn is_stopped(&self) -> bool {
        self.stop.is_stopped()
    }

    fn delay(&mut self, failures: &mut u32, e: &KubeError) -> Duration {
        // The policy counts into a map of its own; the controller's metrics get the cause.
        let mut by_cause = std::collections::BTreeMap::new();
        let d = self
            .run
            .api_failure(failures, &mut by_cause, e, &mut self.rng);
        (self.count)(e.cause_label());
        d
    }

    fn sleep(&self, d: Duration) -> bool {
        self.stop.sleep(d)
    }

    fn unchanged(&self) -> &str {
        self.unchanged
    }
}

/// Runs `reflector` until `stop`: connections with `run`'s credentials, each watch lasting
/// `watch` and silent at most `idle`, failures backed off by `run`'s policy and counted by cause
/// with `count`; `unchanged` says, in the log, what the controller leaves as it is meanwhile.
pub(crate) fn run_reflector<T: PartialEq + Send + Sync>(
    mut reflector: tern_watch::Reflector<T>,
    run: &ControllerSettings,
    stop: &StopSignal,
    (watch, idle): (Duration, Duration),
    count: Box<dyn Fn(&'static str) + '_>,
    unchanged: &'static str,
) {
    let connect = connect(run.api.clone(), watch, idle);
    let mut ctl = AgentControl {
        run,
        stop,
        rng: Rng::from_entropy(),
        count,
        unchanged,
    };
    reflector.run(&*connect, &mut ctl);
}

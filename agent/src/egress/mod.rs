//! `tern-agent run --egress-nat`: node-wide egress NAT. One thread keeps the table of
//! `ruleset.rs` (`inet tern_nat`) in the kernel: it learns this node's pod ranges (the flag, or
//! the Node's `spec.podCIDRs`), replaces the table at start, then every `--egress-nat-resync`
//! lists it and replaces it again when it differs from what was applied (someone flushed,
//! edited or deleted it). Applied and listed through the `nft` tool (`tern_net::nft`).
//!
//! Invariants: only `inet tern_nat` is ever written; stopping the agent leaves the table (pods
//! keep their egress across a restart); `tern-agent uninstall` removes it ([`remove`]).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use ipnetwork::IpNetwork;
use tern_net::nft::{Nft, NftError};
use tracing::{error, info, warn};

use crate::args::{parse_duration, Switch};
use crate::mint::ControllerSettings;
use crate::node_cidrs::NodeCidrs;

pub mod ruleset;

pub use ruleset::{inside, Ranges, FAMILY, TABLE};

/// The flags of `tern-agent run` for egress NAT.
#[derive(Debug, Clone, Args)]
pub struct EgressArgs {
    /// Masquerade traffic from this node's pod ranges to destinations outside --cluster-cidrs
    /// (an nftables table, inet tern_nat; true, false, 1 or 0)
    #[arg(
        long,
        value_name = "BOOL",
        default_value = "false",
        env = "TERN_EGRESS_NAT"
    )]
    pub egress_nat: Switch,
    /// Comma-separated CIDRs of the cluster (pod and service ranges, both families): traffic to
    /// them is never masqueraded; required by --egress-nat
    #[arg(
        long,
        value_name = "CIDRS",
        env = "TERN_CLUSTER_CIDRS",
        hide_env_values = true
    )]
    pub cluster_cidrs: Option<String>,
    /// This node's pod ranges, comma-separated [default: the Node's spec.podCIDRs, read with
    /// --node-name or NODE_NAME]
    #[arg(long, value_name = "CIDRS")]
    pub egress_nat_pod_cidrs: Option<String>,
    /// How often the table is compared with what was applied, and restored when it differs
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub egress_nat_resync: Duration,
}

/// Where the pod ranges come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodRanges {
    /// Given on the command line.
    Fixed(Vec<IpNetwork>),
    /// `spec.podCIDRs` of the Node of this name.
    FromNode(String),
}

/// Settings of the egress NAT controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressConfig {
    /// The cluster's ranges (never masqueraded as destinations).
    pub cluster: Vec<IpNetwork>,
    /// This node's pod ranges, or where to read them.
    pub pod: PodRanges,
    /// The resync period.
    pub resync: Duration,
}

/// Parses a comma-separated CIDR list: each `address/prefix` with no host bits set.
///
/// # Errors
/// A message quoting the flag and the entry that is not a network.
pub fn parse_cidrs(flag: &str, text: &str) -> anyhow::Result<Vec<IpNetwork>> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let net: IpNetwork = item
            .parse()
            .ok()
            .filter(|_| item.contains('/'))
            .with_context(|| {
                format!("{flag}: {item:?} is not a CIDR (address/prefix, e.g. 10.244.0.0/16 or fd00:10::/48)")
            })?;
        if net.network() != net.ip() {
            bail!(
                "{flag}: {item:?} has host bits set; the network is {}/{}",
                net.network(),
                net.prefix()
            );
        }
        out.push(net);
    }
    if out.is_empty() {
        bail!("{flag} is empty: give at least one CIDR");
    }
    Ok(out)
}

impl EgressConfig {
    /// The settings from the flags; `None` without `--egress-nat`.
    ///
    /// # Errors
    /// `--egress-nat` without `--cluster-cidrs`, a CIDR that does not parse or has host bits set,
    /// a pod range outside every cluster range, neither pod ranges nor a node name, a resync
    /// under 100 ms.
    pub fn from_args(a: &EgressArgs, node_name: Option<&str>) -> anyhow::Result<Option<Self>> {
        if !a.egress_nat.0 {
            return Ok(None);
        }
        let Some(cluster) = &a.cluster_cidrs else {
            bail!("--egress-nat needs --cluster-cidrs or TERN_CLUSTER_CIDRS (the cluster's pod and service ranges)");
        };
        let cluster = parse_cidrs("--cluster-cidrs", cluster)?;
        let pod = match (&a.egress_nat_pod_cidrs, node_name.filter(|n| !n.is_empty())) {
            (Some(p), _) => {
                let pod = parse_cidrs("--egress-nat-pod-cidrs", p)?;
                if let Some(out) = pod.iter().find(|p| !inside(p, &cluster)) {
                    bail!("--egress-nat-pod-cidrs: {out} is inside no --cluster-cidrs range: its pods' traffic to other nodes would be masqueraded");
                }
                PodRanges::Fixed(pod)
            }
            (None, Some(node)) => PodRanges::FromNode(node.to_owned()),
            (None, None) => bail!(
                "--egress-nat needs this node's pod ranges: --egress-nat-pod-cidrs, or --node-name / NODE_NAME to read them from the Node"
            ),
        };
        if a.egress_nat_resync < Duration::from_millis(100) {
            bail!("--egress-nat-resync must be at least 100ms");
        }
        Ok(Some(EgressConfig {
            cluster,
            pod,
            resync: a.egress_nat_resync,
        }))
    }
}

/// Applies the rule set and returns the listing it left (what later resyncs compare with).
fn apply(nft: &Nft, r: &Ranges) -> Result<Option<String>, NftError> {
    nft.apply(&ruleset::replace_script(r))?;
    nft.list_table(FAMILY, TABLE)
}

type Shared = crate::stop_signal::StopSignal;

/// The running egress NAT controller.
pub struct EgressNat {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl EgressNat {
    /// Finds the nft tool and starts the controller thread.
    ///
    /// # Errors
    /// The nft tool is missing (the agent then refuses to start), or the thread cannot start.
    ///
    /// With [`PodRanges::FromNode`], `own_cidrs` (this node's podCIDRs as the agent follows them,
    /// [`crate::node_cidrs`]) moves the pod ranges when the Node's change, at once.
    pub fn start(
        run: ControllerSettings,
        cfg: EgressConfig,
        own_cidrs: Option<Arc<NodeCidrs>>,
    ) -> anyhow::Result<EgressNat> {
        let nft = Nft::find().context("--egress-nat")?;
        let shared = Arc::new(Shared::default());
        let own_cidrs = own_cidrs.filter(|_| matches!(cfg.pod, PodRanges::FromNode(_)));
        if let Some(c) = &own_cidrs {
            c.listen(Arc::clone(&shared));
        }
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("egress-nat".into())
            .spawn(move || controller(&s, &run, &cfg, &nft, own_cidrs.as_deref()))?;
        Ok(EgressNat {
            shared,
            thread: Some(thread),
        })
    }

    /// Stops the thread; the table stays.
    pub fn stop(mut self) {
        self.shared.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The pod ranges, read from the Node until it has them (retrying with the agent's backoff).
fn pod_ranges(s: &Shared, run: &ControllerSettings, cfg: &EgressConfig) -> Option<Vec<IpNetwork>> {
    let node = match &cfg.pod {
        PodRanges::Fixed(p) => return Some(p.clone()),
        PodRanges::FromNode(n) => n,
    };
    let mut delay = run.policy.backoff_base;
    loop {
        let got = crate::mint::in_cluster_client(&run.api)
            .and_then(|(c, _)| c.get_node(node, run.api.request_timeout))
            .map_err(|e| e.to_string())
            .and_then(|n| {
                let nets: Vec<IpNetwork> =
                    n.pod_cidrs.iter().filter_map(|c| c.parse().ok()).collect();
                if nets.is_empty() {
                    Err(format!("node {node} has no spec.podCIDRs yet"))
                } else {
                    Ok(nets)
                }
            });
        match got {
            Ok(nets) => {
                log_outside_cluster(&nets, &cfg.cluster);
                return Some(nets);
            }
            Err(e) => {
                warn!(error = %e, retry_in = ?delay, "egress NAT: cannot read this node's pod ranges")
            }
        }
        if s.sleep(delay) {
            return None;
        }
        delay = (delay * 2).min(run.policy.backoff_cap);
    }
}

/// Logs each of this node's pod ranges (from its Node's spec.podCIDRs, at start or followed)
/// that lies inside no `cluster` range: its traffic is left unmasqueraded.
fn log_outside_cluster(pod: &[IpNetwork], cluster: &[IpNetwork]) {
    for out in pod.iter().filter(|p| !inside(p, cluster)) {
        error!(pod_cidr = %out, "egress NAT: this node's pod range (the Node's spec.podCIDRs) is inside no --cluster-cidrs (TERN_CLUSTER_CIDRS) range of its family: its traffic is NOT masqueraded (masquerading would hide its pods' traffic to other nodes' pods); fix --cluster-cidrs");
    }
}

/// The pod ranges in `cidrs` (a Node's podCIDRs), when they parse and differ from `now`.
fn moved_ranges(cidrs: &[String], now: &[IpNetwork]) -> Option<Vec<IpNetwork>> {
    let nets: Vec<IpNetwork> = cidrs.iter().filter_map(|c| c.parse().ok()).collect();
    (!nets.is_empty() && nets != now).then_some(nets)
}

fn controller(
    s: &Shared,
    run: &ControllerSettings,
    cfg: &EgressConfig,
    nft: &Nft,
    own_cidrs: Option<&NodeCidrs>,
) {
    let Some(pod) = pod_ranges(s, run, cfg) else {
        return;
    };
    let mut ranges = Ranges {
        pod,
        cluster: cfg.cluster.clone(),
    };
    let mut applied: Option<String> = None;
    let mut seen = 0;
    loop {
        if let Some(cell) = own_cidrs {
            let (generation, cidrs) = cell.current();
            if generation != seen {
                seen = generation;
                if let Some(pod) = moved_ranges(&cidrs, &ranges.pod) {
                    log_outside_cluster(&pod, &cfg.cluster);
                    info!(from = ?ranges.pod, to = ?pod, "egress NAT: this node's podCIDRs changed (its Node registered again); the rule set follows");
                    ranges.pod = pod;
                    applied = None;
                }
            }
        }
        if crate::uninstall::uninstalling(&run.kubeconfig) {
            info!(
                table = TABLE,
                "egress NAT: tern-agent uninstall began; the table is no longer kept"
            );
            return;
        }
        let now = match nft.list_table(FAMILY, TABLE) {
            Ok(t) => t,
            Err(e) => {
                warn!(error = %e, "egress NAT: cannot list the table");
                None
            }
        };
        if applied.is_none() || now != applied {
            if applied.is_some() {
                warn!(
                    table = TABLE,
                    "egress NAT: the table was changed by someone else; restoring it"
                );
            }
            match apply(nft, &ranges) {
                Ok(listing) => {
                    if applied.is_none() {
                        info!(pod = ?ranges.pod, cluster = ?ranges.cluster, table = TABLE, "egress NAT: rule set applied");
                    }
                    applied = listing;
                }
                Err(e) => warn!(error = %e, "egress NAT: cannot apply the rule set"),
            }
        }
        let woken = || own_cidrs.is_some_and(|c| c.generation() != seen);
        if s.sleep_unless(cfg.resync, woken) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> EgressArgs {
        #[derive(clap::Parser)]
        struct T {
            #[command(flatten)]
            a: EgressArgs,
        }
        let mut v = vec!["t"];
        v.extend_from_slice(extra);
        <T as clap::Parser>::try_parse_from(v).unwrap().a
    }

    #[test]
    fn off_by_default_and_strict_when_on() {
        assert_eq!(EgressConfig::from_args(&args(&[]), None).unwrap(), None);
        let on = |extra: &[&str], node: Option<&str>| {
            let mut v = vec!["--egress-nat", "true"];
            v.extend_from_slice(extra);
            EgressConfig::from_args(&args(&v), node)
        };
        let err = |extra: &[&str]| on(extra, Some("n1")).unwrap_err().to_string();
        assert!(err(&[]).contains("--cluster-cidrs"));
        assert!(
            err(&["--cluster-cidrs", "10.244.0.0/16,banana"]).contains("\"banana\" is not a CIDR")
        );
        assert!(err(&["--cluster-cidrs", "10.244.0.0"]).contains("is not a CIDR"));
        assert!(err(&["--cluster-cidrs", "10.244.0.1/16"]).contains("host bits"));
        assert!(err(&["--cluster-cidrs", " , "]).contains("is empty"));
        assert!(err(&[
            "--cluster-cidrs",
            "10.244.0.0/16",
            "--egress-nat-pod-cidrs",
            "10.245.1.0/24"
        ])
        .contains("inside no --cluster-cidrs"));
        assert!(on(&["--cluster-cidrs", "10.244.0.0/16"], None)
            .unwrap_err()
            .to_string()
            .contains("NODE_NAME"));
        let c = on(
            &["--cluster-cidrs", "10.244.0.0/16, fd00:10::/48"],
            Some("n1"),
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.pod, PodRanges::FromNode("n1".into()));
        assert_eq!(c.cluster.len(), 2);
        let c = on(
            &[
                "--cluster-cidrs",
                "10.244.0.0/16",
                "--egress-nat-pod-cidrs",
                "10.244.3.0/24",
            ],
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            c.pod,
            PodRanges::Fixed(vec!["10.244.3.0/24".parse().unwrap()])
        );
    }
}

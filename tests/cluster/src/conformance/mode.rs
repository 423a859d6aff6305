//! The conformance run's modes (TERN_CONFORMANCE_MODE, `scripts/conformance [MODE]`): which
//! upstream specs each selects, as ginkgo filter flags, and what it needs of the cluster.

/// The wider [sig-network] set leaves out what this cluster cannot have: specs of optional
/// features ([Feature:...], among them NetworkPolicy enforcement and dual stack, which has its
/// own mode), specs that disturb the node or other specs ([Serial], [Disruptive]), slow and flaky
/// ones, cloud load balancers, and SCTP (the kernel has no SCTP).
const NETWORK_SKIP: &str =
    r"\[Feature:|\[Serial\]|\[Disruptive\]|\[Slow\]|\[Flaky\]|LoadBalancer|SCTP|sctp";
/// The specs of the wider set that skip themselves below two nodes, NoSNAT, and the
/// NetworkPolicy specs (their pods then spread over both nodes).
const MULTINODE_FOCUS: &str = "Networking Granular Checks: Services|Conntrack|SNAT|source pod IP|[Tt]raffic[Pp]olicy|KubeProxy|Service CIDRs|PublishNotReadyAddresses|Netpol";
const MULTINODE_SKIP: &str =
    r"KubeProxyNFAcct|\[Serial\]|\[Disruptive\]|\[Slow\]|\[Flaky\]|LoadBalancer|SCTP|sctp";

/// A mode: what runs after the bring-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `Conformance && sig-network` (or TERN_CONFORMANCE_FOCUS/SKIP).
    Default,
    /// `[Feature:IPv6DualStack]`.
    DualStack,
    /// The NetworkPolicy specs (`Netpol`).
    Netpol,
    /// The wider single-node `[sig-network]` set.
    Network,
    /// Two nodes: the specs that need them, and Netpol.
    MultiNode,
    /// [sig-node] Sysctls, after `sysctl_precedence`.
    Sysctls,
    /// On the CRI-O node: Networking Granular Checks: Pods and HostPort, after
    /// `sysctl_precedence`.
    Crio,
    /// SIG Network's ClusterNetworkPolicy conformance suite (conformance.test), not ginkgo's.
    Cnp,
}

impl Mode {
    /// The mode named `name` (empty: the default).
    ///
    /// # Errors
    /// An unknown name: the usage line.
    pub fn parse(name: &str) -> Result<Self, String> {
        Ok(match name {
            "" => Self::Default,
            "dualstack" => Self::DualStack,
            "netpol" => Self::Netpol,
            "network" => Self::Network,
            "multinode" => Self::MultiNode,
            "sysctls" => Self::Sysctls,
            "crio" => Self::Crio,
            "cnp" => Self::Cnp,
            other => {
                return Err(format!(
                    "unknown mode {other:?}: scripts/conformance [dualstack|netpol|network|multinode|sysctls|crio|cnp]"
                ))
            }
        })
    }

    /// ginkgo's filter flags for this mode; `focus`/`skip` (TERN_CONFORMANCE_FOCUS/SKIP)
    /// replace the default mode's label filter.
    pub fn ginkgo_filter(self, focus: Option<&str>, skip: Option<&str>) -> Vec<String> {
        let pair = |f: &str, s: &str| vec![format!("--focus={f}"), format!("--skip={s}")];
        match self {
            Self::Default => match focus {
                Some(f) => {
                    let mut v = vec![format!("--focus={f}")];
                    v.extend(skip.map(|s| format!("--skip={s}")));
                    v
                }
                None => vec!["--label-filter=Conformance && sig-network".to_owned()],
            },
            Self::DualStack => pair(r"\[Feature:IPv6DualStack\]", "SCTP"),
            Self::Netpol => pair("Netpol", "SCTP"),
            Self::Network => pair(r"\[sig-network\]", NETWORK_SKIP),
            Self::MultiNode => pair(MULTINODE_FOCUS, MULTINODE_SKIP),
            Self::Sysctls => vec![r"--focus=\[sig-node\] Sysctls".to_owned()],
            Self::Crio => pair(
                r"\[sig-network\] (Networking Granular Checks: Pods|HostPort)",
                "SCTP|sctp",
            ),
            Self::Cnp => Vec::new(),
        }
    }

    /// Whether `sysctl_precedence` runs before the specs.
    pub fn checks_sysctls(self) -> bool {
        matches!(self, Self::Sysctls | Self::Crio)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_selects_its_specs() {
        assert_eq!(
            Mode::parse("").unwrap().ginkgo_filter(None, None),
            ["--label-filter=Conformance && sig-network"]
        );
        assert_eq!(
            Mode::parse("")
                .unwrap()
                .ginkgo_filter(Some("DNS"), Some("IPv6")),
            ["--focus=DNS", "--skip=IPv6"]
        );
        // the override is the default mode's only
        assert_eq!(
            Mode::parse("sysctls")
                .unwrap()
                .ginkgo_filter(Some("DNS"), None),
            [r"--focus=\[sig-node\] Sysctls"]
        );
        assert_eq!(
            Mode::parse("multinode").unwrap().ginkgo_filter(None, None)[1],
            format!("--skip={MULTINODE_SKIP}")
        );
        assert!(Mode::parse("crio").unwrap().checks_sysctls());
        assert!(Mode::parse("bogus").is_err());
    }
}

//! The peer sets of the table (pure): what a rule's peers are, as a definition that does not
//! change when pods come and go, named by a hash of that definition.
//!
//! A rule's peers resolve to addresses that change with every pod that joins or leaves its
//! selectors. The table keeps those addresses in named sets whose names come from the
//! definition ([`SetDef`]: the policy's namespace, the peers as written, and for an egress
//! rule's named ports the port names), never from their contents: a pod that joins a selector
//! is one element added to the sets it joins, and no chain that matches on those sets changes.
//! Rules with the same definition share one set.
//!
//! Invariant: a definition's [`SetId`] is a function of the definition alone (FNV-1a over a
//! canonical text), so a full compile and the incremental engine name every set alike.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use crate::addrs::AddrSet;
use crate::model::{Labels, Peer, Pod, Protocol};

/// The name stem of a set: `p4_<id>`, `p6_<id>`, `e4_<id>`, `e6_<id>` (16 hex digits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SetId(pub u64);

impl fmt::Display for SetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// What a set holds, by definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetDef {
    /// The addresses of a rule's peers: pods its selectors select (in `namespace` when a peer
    /// has no namespaceSelector) and its ipBlocks minus their `except`.
    Peers {
        /// The policy's namespace (`""` for a ClusterNetworkPolicy: its peers name theirs).
        namespace: String,
        /// The rule's `from`/`to`, as written (never empty).
        peers: Vec<Peer>,
    },
    /// An egress rule's named ports resolved: every (address, protocol, port) of a pod with a
    /// container port of one of `named`, whose address the peers hold (no peers: any pod).
    Endpoints {
        /// The policy's namespace.
        namespace: String,
        /// The rule's `to`, as written (empty: every pod).
        peers: Vec<Peer>,
        /// The port names with their protocols.
        named: Vec<(String, Protocol)>,
    },
}

/// One pod's part of a set: its addresses (a peer set) or its endpoints (an endpoint set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Member {
    /// The pod's addresses.
    Addrs(Vec<IpAddr>),
    /// The pod's (address, protocol, port) of the named ports.
    Endpoints(Vec<(IpAddr, Protocol, u16)>),
}

/// A namespace's labels; one not seen yet has only the label the API server always sets,
/// `kubernetes.io/metadata.name`.
pub fn namespace_labels(known: &BTreeMap<String, Labels>, name: &str) -> Labels {
    known.get(name).cloned().unwrap_or_else(|| {
        Labels::from([("kubernetes.io/metadata.name".to_owned(), name.to_owned())])
    })
}

/// FNV-1a, 64 bits: stable across processes and builds (what names in the kernel need).
pub(crate) fn fnv1a(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl SetDef {
    /// The set's id: a hash of the definition's canonical text.
    pub fn id(&self) -> SetId {
        SetId(fnv1a(&format!("{self:?}")))
    }

    /// The peers of the definition.
    pub fn peers(&self) -> &[Peer] {
        match self {
            SetDef::Peers { peers, .. } | SetDef::Endpoints { peers, .. } => peers,
        }
    }

    fn namespace(&self) -> &str {
        match self {
            SetDef::Peers { namespace, .. } | SetDef::Endpoints { namespace, .. } => namespace,
        }
    }

    /// Which pods may be members: `None` every pod (a namespaceSelector, an ipBlock of an
    /// endpoint set, no peers), else the pods of one namespace.
    pub fn scope(&self) -> Option<&str> {
        let narrow = match self {
            SetDef::Peers { peers, .. } => peers.iter().all(|p| {
                matches!(
                    p,
                    Peer::Pods {
                        namespaces: None,
                        ..
                    } | Peer::Block { .. }
                        | Peer::Nodes(_)
                )
            }),
            SetDef::Endpoints { peers, .. } => {
                !peers.is_empty()
                    && peers.iter().all(|p| {
                        matches!(
                            p,
                            Peer::Pods {
                                namespaces: None,
                                ..
                            }
                        )
                    })
            }
        };
        narrow.then(|| self.namespace())
    }

    /// Whether the pods of a namespace with `labels` may be members (`false`: none of them
    /// can be): a namespaceSelector that matches, a peer without one in the set's own
    /// namespace, or anything for an endpoint set of an ipBlock or of no peers.
    pub fn may_hold_namespace(&self, name: &str, labels: &Labels) -> bool {
        if matches!(self, SetDef::Endpoints { peers, .. } if peers.is_empty()) {
            return true;
        }
        self.peers().iter().any(|p| match p {
            Peer::Pods {
                namespaces: None, ..
            } => name == self.namespace(),
            Peer::Pods {
                namespaces: Some(sel),
                ..
            } => sel.matches(labels),
            Peer::Block { .. } => matches!(self, SetDef::Endpoints { .. }),
            Peer::Nodes(_) => false,
        })
    }

    /// Whether a namespace's labels can change the members (a peer with a namespaceSelector).
    pub fn reads_namespace_labels(&self) -> bool {
        self.peers().iter().any(|p| {
            matches!(
                p,
                Peer::Pods {
                    namespaces: Some(_),
                    ..
                }
            )
        })
    }

    /// Whether the definition has an ipBlock peer (its sets are interval sets).
    pub fn has_blocks(&self) -> bool {
        self.peers().iter().any(|p| matches!(p, Peer::Block { .. }))
    }

    /// The addresses of the ipBlocks (a peer set's part that no pod changes).
    pub fn blocks(&self) -> AddrSet {
        let mut set = AddrSet::default();
        if let SetDef::Peers { peers, .. } = self {
            for p in peers {
                if let Peer::Block { cidr, except } = p {
                    set.extend(&AddrSet::block(cidr, except));
                }
            }
        }
        set
    }

    /// Whether the definition has a `nodes` peer (its contents follow the Nodes).
    pub fn reads_nodes(&self) -> bool {
        matches!(self, SetDef::Peers { .. })
            && self.peers().iter().any(|p| matches!(p, Peer::Nodes(_)))
    }

    /// The addresses of `node` (with `labels`) a `nodes` peer of a peer set selects.
    pub fn node_addrs<'a>(&self, labels: &Labels, addrs: &'a [IpAddr]) -> &'a [IpAddr] {
        let selected = self.reads_nodes()
            && self
                .peers()
                .iter()
                .any(|p| matches!(p, Peer::Nodes(sel) if sel.matches(labels)));
        if selected {
            addrs
        } else {
            &[]
        }
    }

    /// Whether a peer selector of the definition selects `pod` (`ns_labels`: its namespace's).
    fn selects(&self, pod: &Pod, ns_labels: &Labels) -> bool {
        self.peers().iter().any(|peer| match peer {
            Peer::Pods { namespaces, pods } => {
                let in_ns = match namespaces {
                    None => pod.namespace == self.namespace(),
                    Some(sel) => sel.matches(ns_labels),
                };
                in_ns && pods.matches(&pod.labels)
            }
            Peer::Block { .. } | Peer::Nodes(_) => false,
        })
    }

    /// `pod`'s part of the set (`None`: not a member). A pod without addresses is no member.
    pub fn member(&self, pod: &Pod, ns_labels: &Labels) -> Option<Member> {
        if pod.ips.is_empty() {
            return None;
        }
        match self {
            SetDef::Peers { .. } => self
                .selects(pod, ns_labels)
                .then(|| Member::Addrs(pod.ips.clone())),
            SetDef::Endpoints { peers, named, .. } => {
                let selected = peers.is_empty() || self.selects(pod, ns_labels);
                let in_block = |ip: &IpAddr| {
                    peers.iter().any(|p| match p {
                        Peer::Block { cidr, except } => AddrSet::block(cidr, except).contains(*ip),
                        Peer::Pods { .. } | Peer::Nodes(_) => false,
                    })
                };
                let mut eps = Vec::new();
                for ip in pod.ips.iter().filter(|ip| selected || in_block(ip)) {
                    for cp in pod.ports.iter() {
                        if named
                            .iter()
                            .any(|(n, p)| cp.name == *n && cp.protocol == *p)
                        {
                            eps.push((*ip, cp.protocol, cp.port));
                        }
                    }
                }
                (!eps.is_empty()).then_some(Member::Endpoints(eps))
            }
        }
    }
}

/// What a set holds, once its members are gathered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Contents {
    /// A peer set's addresses (ipBlocks and members), per family.
    pub addrs: AddrSet,
    /// An endpoint set's (address, protocol, port), sorted.
    pub endpoints: Vec<(IpAddr, Protocol, u16)>,
}

/// The contents of `def` with `members` (any order).
pub fn contents<'a>(def: &SetDef, members: impl IntoIterator<Item = &'a Member>) -> Contents {
    let (mut ips, mut eps) = (Vec::new(), Vec::new());
    for m in members {
        match m {
            Member::Addrs(a) => ips.extend(a.iter().copied()),
            Member::Endpoints(e) => eps.extend(e.iter().copied()),
        }
    }
    contents_from(def, ips, eps)
}

/// The contents of `def` whose member pods have the addresses `ips` (a peer set) or the
/// endpoints `eps` (an endpoint set), any order, repeats allowed.
pub fn contents_from(
    def: &SetDef,
    ips: impl IntoIterator<Item = IpAddr>,
    eps: impl IntoIterator<Item = (IpAddr, Protocol, u16)>,
) -> Contents {
    let mut c = Contents {
        addrs: def.blocks(),
        endpoints: eps.into_iter().collect(),
    };
    let ips: Vec<IpAddr> = ips.into_iter().collect();
    if !ips.is_empty() {
        c.addrs.add_ips(ips);
    }
    c.endpoints.sort_unstable();
    c.endpoints.dedup();
    c
}

//! The NetworkPolicy table (pure): a compiled [`Plan`](crate::compile::Plan) as one nftables
//! table, `inet tern_netpol` (`render.rs`), the script that replaces it in one transaction (as
//! tern-agent's `egress/ruleset.rs` does for NAT), and the scripts that change only what a run
//! of changes touched (`journal.rs`).
//!
//! Shape:
//! - two base chains on the **forward** hook, so every packet routed to or from a pod's host
//!   veth is judged — pod to pod on this node, to and from other nodes, and to a Service after
//!   kube-proxy's DNAT (prerouting, priority -100, runs first: the chain sees the endpoint):
//!   `egress` (priority `filter`) looks the source up in `egress4`/`egress6`, `ingress`
//!   (priority `filter + 1`) the destination in `ingress4`/`ingress6`. An `accept` ends only
//!   its own base chain, so a packet between two isolated pods of this node passes both;
//! - both first accept `ct state established,related`: replies and related ICMP errors of a
//!   connection that was allowed when it began;
//! - the verdict maps are keyed by a local isolated pod's address and `jump` to that pod's
//!   chain (`in_<hash>`, `eg_<hash>` of its rules: pods with the same rules share one), which
//!   accepts what its rules allow and ends with `drop`; an address not in a map (a pod no policy
//!   isolates, the node, anything else) is not judged: default allow;
//! - with ClusterNetworkPolicies, a pod's chain first jumps to its Admin tier's chain
//!   (`ai_`/`ae_<hash>`: Accept `accept`, Deny `drop`, Pass `return`), then holds
//!   NetworkPolicy's allows and `drop`, or, when no NetworkPolicy isolates it, jumps to its
//!   Baseline tier's chain (`bi_`/`be_<hash>`) and accepts (`ruleset/rules.rs`);
//! - the peer addresses of each rule are a named set per family (`p4_<id>`, `p6_<id>`, both
//!   always, named by the rule's peers as written: `sets.rs`): a plain set of addresses when the
//!   peers are pods only, an interval set when they include an ipBlock (`except` already cut
//!   out: `addrs.rs`), since nft reads every interval set whole to change any element; an
//!   egress rule's named ports are a set of `address . protocol . port` (`e4_<id>`, `e6_<id>`).
//!   A pod joining or leaving a rule's peers changes elements only; a chain changes only when
//!   which policies select its pods, or their rules, change.
//!
//! Traffic between a pod and its own node's host network does not cross the forward hook and
//! NetworkPolicy never judges it: the API lets the node reach its pods ("traffic to and from the
//! node where a Pod is running is always allowed"), and the kubelet's probes need it. Only a
//! ClusterNetworkPolicy's egress rules judge what a pod sends to its own node (a `nodes` or
//! `networks` peer holds the node's addresses): a third base chain, `host`, on the input hook,
//! looks the source up in `host4`/`host6` and jumps to a `ho_<hash>` chain (the pod's egress
//! Admin chain, then accept when a NetworkPolicy isolates it for egress, else its egress
//! Baseline chain and accept); a pod no such rule applies to is not in those maps.
//!
//! Invariant: every script touches `inet tern_netpol` only, and replacing is one transaction
//! (`add table` + `delete table` + the new table).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use crate::addrs::{element, Range};
use crate::compile::Dir;
use crate::model::Protocol;
use crate::sets::{Contents, SetDef, SetId};

/// The table's family: one table for both IPv4 and IPv6.
pub const FAMILY: &str = "inet";
/// The table's name. The drain's finish removes the table by its own copy of the family and
/// name (`tern_net::drain::NETWORK_POLICY_FAMILY`, `NETWORK_POLICY_TABLE`: this crate depends on
/// nothing that does I/O); tern-agent fails to build when the two differ.
pub const TABLE: &str = "tern_netpol";

/// Sizes of a rendered table (the agent's gauges).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Size {
    /// Rules in the per-pod chains (base chains left out).
    pub rules: u64,
    /// Named sets.
    pub sets: u64,
    /// Elements of every named set and map.
    pub elements: u64,
    /// Per-pod chains.
    pub chains: u64,
    /// Isolated local pods.
    pub pods: u64,
}

/// The elements of one named set, in the kernel's own order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Elements {
    /// A peer set with ipBlocks: address ranges of one family, normalized (sorted, disjoint);
    /// an interval set in the kernel.
    Ranges(Vec<Range>),
    /// A peer set of pods only: single addresses (each range `(a, a)`), sorted; a plain set in
    /// the kernel. Why not an interval set: nft (1.0.6 here) fetches every element of every
    /// interval set of the table before it adds or deletes one element anywhere in it, about 2 s
    /// and 150 MB for 400,000 elements, where a plain set's element costs milliseconds.
    /// Each address once as its number (16 bytes an element, where a range of one took 32: a
    /// node's table holds hundreds of thousands at fleet scale).
    Addrs(Vec<u128>),
    /// An endpoint set: (address, protocol, port) of one family, sorted.
    Endpoints(Vec<(IpAddr, Protocol, u16)>),
}

impl Elements {
    fn len(&self) -> usize {
        match self {
            Elements::Ranges(r) => r.len(),
            Elements::Addrs(a) => a.len(),
            Elements::Endpoints(e) => e.len(),
        }
    }
}

/// One named set of the table (`p4_<id>`, `e6_<id>`...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedSet {
    /// IPv4 (else IPv6).
    pub v4: bool,
    /// Its elements.
    pub elements: Elements,
}

fn fam(v4: bool) -> (&'static str, &'static str) {
    if v4 {
        ("ip", "ipv4_addr")
    } else {
        ("ip6", "ipv6_addr")
    }
}

impl NamedSet {
    fn decl(&self) -> String {
        let (_, ty) = fam(self.v4);
        match self.elements {
            Elements::Ranges(_) => format!("type {ty}; flags interval; "),
            Elements::Addrs(_) => format!("type {ty}; "),
            Elements::Endpoints(_) => format!("type {ty} . inet_proto . inet_service; "),
        }
    }

    fn texts(&self) -> Vec<String> {
        match &self.elements {
            Elements::Ranges(r) => r.iter().map(|r| element(self.v4, *r)).collect(),
            Elements::Addrs(a) => a.iter().map(|a| element(self.v4, (*a, *a))).collect(),
            Elements::Endpoints(e) => e
                .iter()
                .map(|(ip, proto, port)| format!("{ip} . {} . {port}", proto.nft()))
                .collect(),
        }
    }

    /// The elements of `self` not in `other`, as nft writes them (both sorted: one merge).
    fn minus(&self, other: Option<&NamedSet>) -> Vec<String> {
        let gone = match (&self.elements, other.map(|o| &o.elements)) {
            (Elements::Ranges(a), Some(Elements::Ranges(b))) => {
                Elements::Ranges(sorted_minus(a, b))
            }
            (Elements::Addrs(a), Some(Elements::Addrs(b))) => Elements::Addrs(sorted_minus(a, b)),
            (Elements::Endpoints(a), Some(Elements::Endpoints(b))) => {
                Elements::Endpoints(sorted_minus(a, b))
            }
            (e, _) => e.clone(),
        };
        NamedSet {
            v4: self.v4,
            elements: gone,
        }
        .texts()
    }

    fn write(&self, name: &str, out: &mut String) {
        let _ = write!(out, "\tset {name} {{\n\t\t{}\n", self.decl());
        let items = self.texts();
        if !items.is_empty() {
            let _ = writeln!(out, "\t\telements = {{ {} }}", items.join(", "));
        }
        out.push_str("\t}\n");
    }
}

/// The table: named sets, per-pod chains and the two verdict maps, each keyed so that two
/// tables compare part by part ([`Journal`], [`update_script`]); [`Table::text`] is the nft
/// text. Names come from definitions (sets) and contents (chains), never from an order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    /// Peer and endpoint sets by name.
    pub sets: BTreeMap<String, NamedSet>,
    /// Per-pod chains by name: their rules, `drop` last.
    pub chains: BTreeMap<String, Vec<Rule>>,
    /// `ingress4`/`ingress6`: a local pod's address → the chain judging what it receives.
    pub ingress: BTreeMap<IpAddr, String>,
    /// `egress4`/`egress6`: a local pod's address → the chain judging what it sends.
    pub egress: BTreeMap<IpAddr, String>,
    /// Denied connections logged (the limit object; the chains' log rules): `None`, off.
    pub log: Option<LogDenied>,
    /// `host4`/`host6`: a local pod's address → the chain judging what it sends to its own
    /// node (the input hook), only where a ClusterNetworkPolicy egress rule applies.
    pub host: BTreeMap<IpAddr, String>,
}

/// One of the table's verdict maps (both families each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum VerdictMap {
    /// `ingress4`/`ingress6` (forward hook, by destination).
    Ingress,
    /// `egress4`/`egress6` (forward hook, by source).
    Egress,
    /// `host4`/`host6` (input hook, by source).
    Host,
}

impl VerdictMap {
    /// Every map, in the order the engine keeps them.
    pub const ALL: [VerdictMap; 3] = [VerdictMap::Ingress, VerdictMap::Egress, VerdictMap::Host];

    /// The forward hook's map of `dir`.
    pub fn of(dir: Dir) -> VerdictMap {
        match dir {
            Dir::Ingress => VerdictMap::Ingress,
            Dir::Egress => VerdictMap::Egress,
        }
    }
}

/// The names of a set's two families: `p4_<id>`/`p6_<id>` (peers) or `e4_..`/`e6_..`.
pub fn set_names(id: SetId, def: &SetDef) -> [String; 2] {
    let k = match def {
        SetDef::Peers { .. } => 'p',
        SetDef::Endpoints { .. } => 'e',
    };
    [format!("{k}4_{id}"), format!("{k}6_{id}")]
}

/// Each address of `ranges` as a range of its own (a pods-only set's ranges are runs of
/// neighbouring pod addresses, never wider than the pods).
fn singles(ranges: &[Range]) -> Vec<u128> {
    ranges.iter().flat_map(|&(lo, hi)| lo..=hi).collect()
}

/// The two named sets (IPv4, IPv6) of a set with `c`.
pub fn named_sets(id: SetId, def: &SetDef, c: &Contents) -> [(String, NamedSet); 2] {
    let [n4, n6] = set_names(id, def);
    let pods_only = !def.has_blocks();
    let one = |v4: bool| NamedSet {
        v4,
        elements: match def {
            SetDef::Peers { .. } => {
                let ranges = if v4 { &c.addrs.v4 } else { &c.addrs.v6 };
                if pods_only {
                    Elements::Addrs(singles(ranges))
                } else {
                    Elements::Ranges(ranges.clone())
                }
            }
            SetDef::Endpoints { .. } => Elements::Endpoints(
                c.endpoints
                    .iter()
                    .filter(|(ip, _, _)| ip.is_ipv4() == v4)
                    .copied()
                    .collect(),
            ),
        },
    };
    [(n4, one(true)), (n6, one(false))]
}

/// The items of `a` not in `b` (both sorted: one merge).
pub(crate) fn sorted_minus<T: Ord + Copy>(a: &[T], b: &[T]) -> Vec<T> {
    let (mut out, mut j) = (Vec::new(), 0);
    for x in a {
        while j < b.len() && b[j] < *x {
            j += 1;
        }
        if j >= b.len() || b[j] != *x {
            out.push(*x);
        }
    }
    out
}

fn write_chain(name: &str, rules: &[Rule], out: &mut String) {
    let _ = writeln!(out, "\tchain {name} {{");
    for r in rules {
        let _ = writeln!(out, "\t\t{r}");
    }
    out.push_str("\t}\n");
}

fn write_map(name: &str, v4: bool, entries: &BTreeMap<IpAddr, String>, out: &mut String) {
    let (_, ty) = fam(v4);
    let _ = write!(out, "\tmap {name} {{\n\t\ttype {ty} : verdict\n");
    let items: Vec<String> = entries
        .iter()
        .filter(|(ip, _)| ip.is_ipv4() == v4)
        .map(|(ip, chain)| format!("{ip} : jump {chain}"))
        .collect();
    if !items.is_empty() {
        let _ = writeln!(out, "\t\telements = {{ {} }}", items.join(", "));
    }
    out.push_str("\t}\n");
}

const BASE_CHAINS: &str = "\tchain egress {\n\
     \t\ttype filter hook forward priority filter; policy accept;\n\
     \t\tct state established,related accept\n\
     \t\tip saddr vmap @egress4\n\
     \t\tip6 saddr vmap @egress6\n\
     \t}\n\
     \tchain ingress {\n\
     \t\ttype filter hook forward priority filter + 1; policy accept;\n\
     \t\tct state established,related accept\n\
     \t\tip daddr vmap @ingress4\n\
     \t\tip6 daddr vmap @ingress6\n\
     \t}\n\
     \tchain host {\n\
     \t\ttype filter hook input priority filter; policy accept;\n\
     \t\tct state established,related accept\n\
     \t\tip saddr vmap @host4\n\
     \t\tip6 saddr vmap @host6\n\
     \t}\n";

impl Table {
    /// The table's nft text (`table inet tern_netpol { ... }`).
    pub fn text(&self) -> String {
        let mut s = format!("table {FAMILY} {TABLE} {{\n");
        if let Some(log) = self.log {
            log.write_limit(&mut s);
        }
        self.sets.iter().for_each(|(n, set)| set.write(n, &mut s));
        self.chains
            .iter()
            .for_each(|(n, r)| write_chain(n, r, &mut s));
        write_map("ingress4", true, &self.ingress, &mut s);
        write_map("ingress6", false, &self.ingress, &mut s);
        write_map("egress4", true, &self.egress, &mut s);
        write_map("egress6", false, &self.egress, &mut s);
        write_map("host4", true, &self.host, &mut s);
        write_map("host6", false, &self.host, &mut s);
        s.push_str(BASE_CHAINS);
        s.push_str("}\n");
        s
    }

    /// The script that replaces the table with this one in one transaction.
    pub fn replace_script(&self) -> String {
        format!(
            "add table {FAMILY} {TABLE}\ndelete table {FAMILY} {TABLE}\n{}",
            self.text()
        )
    }

    /// The table's size, `pods` isolated pods.
    pub fn size(&self, pods: usize) -> Size {
        let set_elements: usize = self.sets.values().map(|s| s.elements.len()).sum();
        Size {
            rules: self.chains.values().map(|r| r.len() as u64).sum(),
            sets: self.sets.len() as u64,
            elements: (set_elements + self.ingress.len() + self.egress.len() + self.host.len())
                as u64,
            chains: self.chains.len() as u64,
            pods: pods as u64,
        }
    }
}

/// The script that removes the table (nothing when it is absent).
pub fn remove_script() -> String {
    format!("add table {FAMILY} {TABLE}\ndelete table {FAMILY} {TABLE}\n")
}

mod elements;
mod journal;
mod log;
mod plan;
mod render;
mod rule;
mod rules;
pub use elements::{ElementPlan, SetElements};
pub use journal::{update_script, Journal};
pub use log::{
    direction_of_prefix, log_prefix, LogDenied, DEFAULT_LOG_GROUP, DEFAULT_LOG_RATE, LOG_LIMIT,
    LOG_PREFIX_STEM,
};
pub use plan::{IntervalSet, TablePlan};
pub use render::{render, render_logging, replace_script};
pub use rule::{Addr, Match, Rule, Verdict};
pub use rules::{chain, host_chains, pod_chains};

#[cfg(test)]
mod tests;

//! The NetworkPolicy table (pure): a compiled [`Plan`] as one nftables table, `inet tern_netpol`,
//! and the script that replaces it in one transaction (as tern-agent's `egress/ruleset.rs` does
//! for NAT).
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
//!   chain (`in_N`, `eg_N`; pods with the same rules share one), which accepts what its rules
//!   allow and ends with `drop`; an address not in a map (a pod no policy isolates, the node,
//!   anything else) is not judged: default allow;
//! - the peer addresses of each rule are a named interval set per family (`p4_N`, `p6_N`,
//!   shared by identical contents), `except` already cut out (`addrs.rs`); an egress rule's
//!   named ports are a set of `address . protocol . port` (`e4_N`, `e6_N`).
//!
//! Traffic between a pod and its own node's host network does not cross the forward hook and is
//! never judged: the API lets the node reach its pods ("traffic to and from the node where a Pod
//! is running is always allowed"), and the kubelet's probes need it.
//!
//! Invariant: every script touches `inet tern_netpol` only, and replacing is one transaction
//! (`add table` + `delete table` + the new table).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::addrs::{element, AddrSet, Range};
use crate::compile::{Allow, Plan, PortRange};

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

/// One named set or verdict map of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedSet {
    /// `set` or `map`.
    pub kind: &'static str,
    /// Its name (`p4_0`, `ingress4`...).
    pub name: String,
    /// Its declaration line (`type ipv4_addr; flags interval; `).
    pub decl: String,
    /// Its elements as nft writes them (`10.0.0.0/24`, `10.0.1.2 : jump in_0`), in table order.
    pub elements: Vec<String>,
}

/// The table of a [`Plan`], kept in parts so that two tables can be compared set by set
/// ([`update_script`]); [`Table::text`] is the nft text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    /// The peer and endpoint sets, in declaration order.
    pub sets: Vec<NamedSet>,
    /// The per-pod chains' text.
    pub chains: String,
    /// The verdict maps `ingress4`, `ingress6`, `egress4`, `egress6`.
    pub maps: Vec<NamedSet>,
}

#[derive(Default)]
struct Writer {
    sets: Vec<NamedSet>,
    chains: String,
    set_names: BTreeMap<(char, bool, String), String>,
    chain_names: BTreeMap<String, String>,
    size: Size,
}

fn fam(v4: bool) -> (&'static str, &'static str) {
    if v4 {
        ("ip", "ipv4_addr")
    } else {
        ("ip6", "ipv6_addr")
    }
}

/// `{ 80, 1000-2000 }` (ports merged), or `""` when every port.
fn ports_of(ranges: &[&PortRange]) -> String {
    let mut v: Vec<Range> = Vec::new();
    for r in ranges {
        match r.range {
            None => return String::new(),
            Some((lo, hi)) => v.push((u128::from(lo), u128::from(hi))),
        }
    }
    v.sort_unstable();
    let mut merged: Vec<Range> = Vec::new();
    for (lo, hi) in v {
        match merged.last_mut() {
            Some(last) if lo <= last.1 + 1 => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    let items: Vec<String> = merged
        .iter()
        .map(|&(lo, hi)| {
            if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            }
        })
        .collect();
    format!(" th dport {{ {} }}", items.join(", "))
}

impl Writer {
    /// The name of the set holding `elements` (created on first use).
    fn set(&mut self, kind: char, v4: bool, ty: &str, elements: Vec<String>) -> String {
        let body = elements.join(", ");
        let n = self.set_names.len();
        if let Some(name) = self.set_names.get(&(kind, v4, body.clone())) {
            return name.clone();
        }
        let name = format!("{kind}{}_{n}", if v4 { 4 } else { 6 });
        let flags = if kind == 'p' { "flags interval; " } else { "" };
        self.size.sets += 1;
        self.size.elements += elements.len() as u64;
        self.sets.push(NamedSet {
            kind: "set",
            name: name.clone(),
            decl: format!("type {ty}; {flags}"),
            elements,
        });
        self.set_names.insert((kind, v4, body), name.clone());
        name
    }

    /// The rules of one [`Allow`] (`addr` is `saddr` for ingress, `daddr` for egress).
    fn allow(&mut self, a: &Allow, addr: &str, out: &mut Vec<String>) {
        match a {
            Allow::Match { peers, ports } => {
                let port_parts: Vec<String> = match ports {
                    None => vec![String::new()],
                    Some(list) => {
                        let mut by_proto: BTreeMap<_, Vec<&PortRange>> = BTreeMap::new();
                        for p in list {
                            by_proto.entry(p.protocol).or_default().push(p);
                        }
                        by_proto
                            .iter()
                            .map(|(proto, rs)| {
                                format!(" meta l4proto {}{}", proto.nft(), ports_of(rs))
                            })
                            .collect()
                    }
                };
                let peer_parts = self.peer_parts(peers.as_ref(), addr);
                for peer in &peer_parts {
                    for port in &port_parts {
                        out.push(format!("{}{port} accept", peer).trim_start().to_owned());
                    }
                }
            }
            Allow::Endpoints(eps) => {
                for v4 in [true, false] {
                    let items: Vec<String> = eps
                        .iter()
                        .filter(|(ip, _, _)| ip.is_ipv4() == v4)
                        .map(|(ip, proto, port)| format!("{ip} . {} . {port}", proto.nft()))
                        .collect();
                    if items.is_empty() {
                        continue;
                    }
                    let (f, ty) = fam(v4);
                    let name =
                        self.set('e', v4, &format!("{ty} . inet_proto . inet_service"), items);
                    out.push(format!(
                        "{f} {addr} . meta l4proto . th dport @{name} accept"
                    ));
                }
            }
        }
    }

    /// `ip saddr @p4_0` per family with addresses, or one empty part for any address.
    fn peer_parts(&mut self, peers: Option<&AddrSet>, addr: &str) -> Vec<String> {
        let Some(set) = peers else {
            return vec![String::new()];
        };
        let mut parts = Vec::new();
        for (v4, ranges) in [(true, &set.v4), (false, &set.v6)] {
            if ranges.is_empty() {
                continue;
            }
            let (f, ty) = fam(v4);
            let items = ranges.iter().map(|r| element(v4, *r)).collect();
            let name = self.set('p', v4, ty, items);
            parts.push(format!("{f} {addr} @{name}"));
        }
        parts
    }

    /// The chain of one pod's rules in one direction (shared by identical bodies).
    fn chain(&mut self, prefix: &str, allows: &[Allow], addr: &str) -> String {
        let mut rules = Vec::new();
        for a in allows {
            self.allow(a, addr, &mut rules);
        }
        rules.push("drop".to_owned());
        let body: String = rules.iter().map(|r| format!("\t\t{r}\n")).collect();
        if let Some(name) = self.chain_names.get(&body) {
            return name.clone();
        }
        let name = format!("{prefix}_{}", self.chain_names.len());
        let _ = write!(self.chains, "\tchain {name} {{\n{body}\t}}\n");
        self.size.chains += 1;
        self.size.rules += rules.len() as u64;
        self.chain_names.insert(body, name.clone());
        name
    }
}

fn map(name: &str, v4: bool, entries: &BTreeMap<std::net::IpAddr, String>) -> NamedSet {
    let (_, ty) = fam(v4);
    NamedSet {
        kind: "map",
        name: name.to_owned(),
        decl: format!("type {ty} : verdict"),
        elements: entries
            .iter()
            .filter(|(ip, _)| ip.is_ipv4() == v4)
            .map(|(ip, chain)| format!("{ip} : jump {chain}"))
            .collect(),
    }
}

impl NamedSet {
    fn write(&self, out: &mut String) {
        let _ = write!(out, "\t{} {} {{\n\t\t{}\n", self.kind, self.name, self.decl);
        if !self.elements.is_empty() {
            let _ = writeln!(out, "\t\telements = {{ {} }}", self.elements.join(", "));
        }
        out.push_str("\t}\n");
    }

    /// An element's key: the element itself in a set, the part before ` : ` in a map (what
    /// `delete element` names).
    fn key<'a>(&self, element: &'a str) -> &'a str {
        if self.kind == "map" {
            element.split(" : ").next().unwrap_or(element)
        } else {
            element
        }
    }
}

impl Table {
    /// The table's nft text (`table inet tern_netpol { ... }`).
    pub fn text(&self) -> String {
        let mut s = format!("table {FAMILY} {TABLE} {{\n");
        self.sets.iter().for_each(|set| set.write(&mut s));
        s.push_str(&self.chains);
        self.maps.iter().for_each(|m| m.write(&mut s));
        s.push_str(
            "\tchain egress {\n\
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
             \t}\n}\n",
        );
        s
    }

    /// The script that replaces the table with this one in one transaction.
    pub fn replace_script(&self) -> String {
        format!(
            "add table {FAMILY} {TABLE}\ndelete table {FAMILY} {TABLE}\n{}",
            self.text()
        )
    }
}

/// The table of `plan`, and its size.
pub fn render(plan: &Plan) -> (Table, Size) {
    let mut w = Writer::default();
    // An address is keyed once: the first pod (in name order) holding it wins.
    let mut ingress = BTreeMap::new();
    let mut egress = BTreeMap::new();
    for p in &plan.pods {
        if let Some(a) = &p.ingress {
            let c = w.chain("in", a, "saddr");
            p.ips.iter().for_each(|ip| {
                ingress.entry(*ip).or_insert_with(|| c.clone());
            });
        }
        if let Some(a) = &p.egress {
            let c = w.chain("eg", a, "daddr");
            p.ips.iter().for_each(|ip| {
                egress.entry(*ip).or_insert_with(|| c.clone());
            });
        }
    }
    w.size.pods = plan.pods.len() as u64;
    w.size.elements += (ingress.len() + egress.len()) as u64;
    let maps = vec![
        map("ingress4", true, &ingress),
        map("ingress6", false, &ingress),
        map("egress4", true, &egress),
        map("egress6", false, &egress),
    ];
    let table = Table {
        sets: w.sets,
        chains: w.chains,
        maps,
    };
    (table, w.size)
}

/// The script that replaces the table with `plan`'s in one transaction, and the table's size.
pub fn replace_script(plan: &Plan) -> (String, Size) {
    let (t, size) = render(plan);
    (t.replace_script(), size)
}

/// The script that turns the kernel's table `old` into `new` by element changes alone, in one
/// transaction: every `delete element` first (an interval that grows or splits is deleted and
/// added again, so no added interval overlaps one still present), then every `add element`.
/// Empty when the two are equal; `None` when anything but elements differs (a set, map or
/// chain added, removed or renamed, a rule changed): then only a replace gives `new`.
pub fn update_script(old: &Table, new: &Table) -> Option<String> {
    if old.chains != new.chains || old.sets.len() != new.sets.len() {
        return None;
    }
    let pairs = old
        .sets
        .iter()
        .zip(&new.sets)
        .chain(old.maps.iter().zip(&new.maps));
    let (mut deletes, mut adds) = (String::new(), String::new());
    for (o, n) in pairs {
        if (o.kind, &o.name, &o.decl) != (n.kind, &n.name, &n.decl) {
            return None;
        }
        let (was, now): (BTreeSet<&str>, BTreeSet<&str>) = (
            o.elements.iter().map(String::as_str).collect(),
            n.elements.iter().map(String::as_str).collect(),
        );
        let gone: Vec<&str> = was.difference(&now).map(|e| o.key(e)).collect();
        let came: Vec<&str> = now.difference(&was).copied().collect();
        for (list, verb, out) in [(gone, "delete", &mut deletes), (came, "add", &mut adds)] {
            if !list.is_empty() {
                let _ = writeln!(
                    out,
                    "{verb} element {FAMILY} {TABLE} {} {{ {} }}",
                    o.name,
                    list.join(", ")
                );
            }
        }
    }
    Some(deletes + &adds)
}

/// The script that removes the table (nothing when it is absent).
pub fn remove_script() -> String {
    format!("add table {FAMILY} {TABLE}\ndelete table {FAMILY} {TABLE}\n")
}

#[cfg(test)]
mod tests;

//! `tern-agent trace`'s kernel check: after the model's answer, what the node's table holds for
//! the same connection, compared with the table the agent compiles from the same lists
//! (`tern_netpol::compile`, `ruleset::render_logging`). For each end that runs on this node —
//! the destination's ingress, the source's egress — the verdict-map element of its address (the
//! chain it jumps to), that chain's rules and the chains they jump to (the tiers'), and for
//! every peer set those rules name whether it holds the other end's address (an endpoint set:
//! address, protocol and port).
//!
//! Invariant: reads only those objects, each by name (`nft -j list map|set`, `nft -s list
//! chain`), never the whole table: at fleet scale a table's listing is 3 s and 250 MB
//! (docs/decisions/0031, 0048). Changes nothing.

use std::collections::BTreeSet;
use std::net::IpAddr;

use serde_json::Value;
use tern_net::nft::Nft;
use tern_netpol::model::Protocol;
use tern_netpol::ruleset::{Elements, Table, FAMILY, TABLE};

/// What the kernel table holds, read one object at a time.
pub trait TableReader {
    /// The chain the verdict map `map` (`ingress4`...) jumps to for `ip`; `None` when the map
    /// (or the table) holds no element for it.
    ///
    /// # Errors
    /// The table cannot be read.
    fn verdict(&self, map: &str, ip: IpAddr) -> anyhow::Result<Option<String>>;
    /// A chain's rules as nft prints them; `None` when there is no such chain.
    ///
    /// # Errors
    /// The table cannot be read.
    fn chain(&self, name: &str) -> anyhow::Result<Option<Vec<String>>>;
    /// Whether the set `set` holds `peer` (with `endpoint`, `peer . protocol . port`); `None`
    /// when there is no such set.
    ///
    /// # Errors
    /// The table cannot be read.
    fn holds(
        &self,
        set: &str,
        peer: IpAddr,
        endpoint: Option<(Protocol, u16)>,
    ) -> anyhow::Result<Option<bool>>;
}

/// The table of this netns, through the nft tool: a map or set as JSON (`nft -j list map|set`,
/// which reads that object alone), a chain as text (`nft -s list chain`: nft 1.0.6 fetches every
/// set's elements of the table first, 140 MB at 400,000 elements, so a chain is read once per
/// check). Not `nft get element` nor the limit object: nft 1.0.6 fetches every element for those
/// too.
#[derive(Clone, Debug)]
pub struct NftTable(pub Nft);

impl TableReader for NftTable {
    fn verdict(&self, map: &str, ip: IpAddr) -> anyhow::Result<Option<String>> {
        let Some(m) = self.0.list_json("map", FAMILY, TABLE, map)? else {
            return Ok(None);
        };
        // `"elem": [["10.0.1.5", {"jump": {"target": "in_0123"}}], ...]`
        let elems = m.get("elem").and_then(Value::as_array);
        Ok(elems.into_iter().flatten().find_map(|pair| {
            let key = pair.get(0)?.as_str()?.parse::<IpAddr>().ok()?;
            let target = pair.pointer("/1/jump/target")?.as_str()?;
            (key == ip).then(|| target.to_owned())
        }))
    }

    fn chain(&self, name: &str) -> anyhow::Result<Option<Vec<String>>> {
        let text = self.0.list_object("chain", FAMILY, TABLE, name)?;
        Ok(text.map(|t| chain_rules(&t)))
    }

    fn holds(
        &self,
        set: &str,
        peer: IpAddr,
        endpoint: Option<(Protocol, u16)>,
    ) -> anyhow::Result<Option<bool>> {
        let Some(s) = self.0.list_json("set", FAMILY, TABLE, set)? else {
            return Ok(None);
        };
        let elems = s.get("elem").and_then(Value::as_array);
        let held = elems
            .into_iter()
            .flatten()
            .any(|e| element_holds(e, peer, endpoint));
        Ok(Some(held))
    }
}

fn number(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// Whether one element of `nft -j list set` holds `peer` (an endpoint set's: `peer . protocol
/// . port`): an address, a `prefix`, a `range` or a `concat`.
pub fn element_holds(e: &Value, peer: IpAddr, endpoint: Option<(Protocol, u16)>) -> bool {
    let ip = |v: &Value| v.as_str().and_then(|s| s.parse::<IpAddr>().ok());
    let same = |a: IpAddr| a.is_ipv4() == peer.is_ipv4();
    if let Some((proto, port)) = endpoint {
        let c = e.get("concat").and_then(Value::as_array);
        return c.is_some_and(|c| {
            c.len() == 3
                && c.first().and_then(ip) == Some(peer)
                && c[1].as_str() == Some(proto.nft())
                && c[2].as_u64() == Some(u64::from(port))
        });
    }
    if let Some(a) = ip(e) {
        return a == peer;
    }
    if let Some(r) = e.get("range").and_then(Value::as_array) {
        return match (r.first().and_then(ip), r.get(1).and_then(ip)) {
            (Some(lo), Some(hi)) => {
                same(lo) && number(lo) <= number(peer) && number(peer) <= number(hi)
            }
            _ => false,
        };
    }
    let net = e.pointer("/prefix/addr").and_then(ip);
    let len = e.pointer("/prefix/len").and_then(Value::as_u64);
    let (Some(net), Some(len)) = (net, len) else {
        return false;
    };
    let bits: u32 = if net.is_ipv4() { 32 } else { 128 };
    let host = bits - u32::try_from(len).unwrap_or(bits).min(bits);
    let top = |a: IpAddr| number(a).checked_shr(host).unwrap_or(0);
    same(net) && top(net) == top(peer)
}

/// The rules of `nft -s list chain` output: the lines two tabs deep (the chain's own line and
/// the table's are one deep and none).
pub fn chain_rules(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("\t\t"))
        .map(|l| l.trim().to_owned())
        .collect()
}

/// A rule as tern writes it, as nft prints it back: `meta l4proto tcp th dport { 80 }` is
/// `tcp dport 80`, with more than one port `tcp dport { 80, 443 }` (nft 1.0.6, checked with
/// every form `ruleset/rules.rs` writes in `agent/tests/trace_kernel.rs`).
pub fn printed(rule: &str) -> String {
    let mut out = rule.to_owned();
    for proto in [Protocol::Tcp, Protocol::Udp, Protocol::Sctp] {
        let p = proto.nft();
        let written = format!("meta l4proto {p} th dport {{ ");
        while let Some(at) = out.find(&written) {
            let rest = &out[at + written.len()..];
            let Some(end) = rest.find(" }") else { break };
            let ports = &rest[..end];
            let ports = if ports.contains(',') {
                format!("{{ {ports} }}")
            } else {
                ports.to_owned()
            };
            out = format!("{}{p} dport {ports}{}", &out[..at], &rest[end + 2..]);
        }
    }
    out
}

/// One end of the connection whose table is on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct End {
    /// `ingress` (the destination) or `egress` (the source).
    pub direction: &'static str,
    /// The local pod's address: the verdict map's key.
    pub local: IpAddr,
    /// The other end's address: what the peer sets are asked about.
    pub peer: IpAddr,
    /// The protocol.
    pub protocol: Protocol,
    /// The destination port.
    pub port: u16,
}

impl End {
    fn map(&self) -> String {
        let family = if self.local.is_ipv4() { 4 } else { 6 };
        format!("{}{family}", self.direction)
    }
}

/// What the comparison found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Comparison {
    /// What was compared and agreed, one line per end.
    pub agreed: Vec<String>,
    /// Each difference, as a sentence.
    pub differences: Vec<String>,
}

/// Compares what `kernel` holds for each of `ends` with `expected`, the table the model
/// compiles for this node.
///
/// # Errors
/// The kernel's table cannot be read.
pub fn compare(
    expected: &Table,
    ends: &[End],
    kernel: &dyn TableReader,
) -> anyhow::Result<Comparison> {
    let (mut c, mut read) = (Comparison::default(), BTreeSet::new());
    for end in ends {
        let before = c.differences.len();
        let (map, want) = (end.map(), expected_verdict(expected, end));
        let got = kernel.verdict(&map, end.local)?;
        if got != want {
            c.differences.push(format!(
                "{map} {}: the kernel {}, the model {}",
                end.local,
                jumps(got.as_deref()),
                jumps(want.as_deref())
            ));
        }
        let Some(chain) = want else {
            if c.differences.len() == before {
                c.agreed.push(format!(
                    "{map} has no element for {} (not judged)",
                    end.local
                ));
            }
            continue;
        };
        let (chains, lookups) = compare_chains(expected, &chain, end, kernel, &mut read, &mut c)?;
        if c.differences.len() == before {
            c.agreed.push(format!(
                "{map} {} jumps to {chain}; {chains} chain(s) rule for rule; {lookups} peer set(s) agree on {}",
                end.local, end.peer
            ));
        }
    }
    Ok(c)
}

/// Which of `tables` (the same plan rendered without and with the denied-flow log) the kernel
/// holds: the first whose chain the kernel's verdict map names for one of `ends`; else the
/// first. Whether the agent logs is its flag, not the policies': the table itself says.
///
/// # Errors
/// The kernel's table cannot be read.
pub fn pick<'t>(
    tables: &[&'t Table],
    ends: &[End],
    kernel: &dyn TableReader,
) -> anyhow::Result<Option<&'t Table>> {
    for end in ends {
        let Some(got) = kernel.verdict(&end.map(), end.local)? else {
            continue;
        };
        if let Some(t) = tables
            .iter()
            .find(|t| expected_verdict(t, end).as_ref() == Some(&got))
        {
            return Ok(Some(*t));
        }
    }
    Ok(tables.first().copied())
}

fn expected_verdict(t: &Table, end: &End) -> Option<String> {
    let map = if end.direction == "ingress" {
        &t.ingress
    } else {
        &t.egress
    };
    map.get(&end.local).cloned()
}

fn jumps(chain: Option<&str>) -> String {
    chain.map_or("has no element (not judged)".into(), |c| {
        format!("jumps to {c}")
    })
}

/// Compares `first` and every chain it jumps to (each chain once per check: `read` holds those
/// read), and the peer sets their rules name; returns how many chains and set lookups it
/// reached.
fn compare_chains(
    expected: &Table,
    first: &str,
    end: &End,
    kernel: &dyn TableReader,
    read: &mut BTreeSet<String>,
    c: &mut Comparison,
) -> anyhow::Result<(usize, usize)> {
    let (mut todo, mut seen, mut sets) = (vec![first.to_owned()], BTreeSet::new(), BTreeSet::new());
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let want: Vec<String> = expected
            .chains
            .get(&name)
            .map(|r| r.iter().map(|r| printed(&r.to_string())).collect())
            .unwrap_or_default();
        for rule in &want {
            if let Some(target) = rule.strip_prefix("jump ") {
                todo.push(target.to_owned());
            }
            let named = rule.split_whitespace().filter_map(|w| w.strip_prefix('@'));
            sets.extend(named.map(str::to_owned));
        }
        if !read.insert(name.clone()) {
            continue; // compared for another end (both families share a pod's chains)
        }
        match kernel.chain(&name)? {
            None => c
                .differences
                .push(format!("chain {name}: not in the kernel")),
            Some(got) if got != want => c.differences.push(rule_difference(&name, &got, &want)),
            Some(_) => {}
        }
    }
    let mut lookups = 0;
    for set in &sets {
        let Some(element) = element_for(set, end) else {
            continue;
        };
        lookups += 1;
        let want = expected
            .sets
            .get(set)
            .is_some_and(|s| model_holds(&s.elements, end, &element));
        let endpoint = set.starts_with('e').then_some((end.protocol, end.port));
        match kernel.holds(set, end.peer, endpoint)? {
            None => c.differences.push(format!("set {set}: not in the kernel")),
            Some(got) if got != want => c.differences.push(format!(
                "set {set}: the kernel {} {element}, the model {}",
                if got { "holds" } else { "does not hold" },
                if want { "does" } else { "does not" }
            )),
            Some(_) => {}
        }
    }
    Ok((seen.len(), lookups))
}

/// The first rule where the kernel's chain and the model's differ, or their lengths.
fn rule_difference(name: &str, got: &[String], want: &[String]) -> String {
    for i in 0..got.len().max(want.len()) {
        let (g, w) = (got.get(i), want.get(i));
        if g != w {
            let show = |r: Option<&String>| r.map_or("nothing".into(), |r| format!("`{r}`"));
            return format!(
                "chain {name}: rule {i} is {} in the kernel, {} in the model ({} rules against {})",
                show(g),
                show(w),
                got.len(),
                want.len()
            );
        }
    }
    format!("chain {name}: differs")
}

/// What to ask the set `name` about for `end`: the peer's address (`p4_`/`p6_`), or address,
/// protocol and port (`e4_`/`e6_`); `None` for a set of the other family.
fn element_for(name: &str, end: &End) -> Option<String> {
    let family = if end.peer.is_ipv4() { '4' } else { '6' };
    let mut chars = name.chars();
    let (kind, fam) = (chars.next()?, chars.next()?);
    if fam != family {
        return None;
    }
    match kind {
        'p' => Some(end.peer.to_string()),
        'e' => Some(format!(
            "{} . {} . {}",
            end.peer,
            end.protocol.nft(),
            end.port
        )),
        _ => None,
    }
}

/// Whether the model's set holds what [`element_for`] asks it.
fn model_holds(elements: &Elements, end: &End, element: &str) -> bool {
    let addr = number(end.peer);
    match elements {
        Elements::Ranges(r) => r.iter().any(|&(lo, hi)| lo <= addr && addr <= hi),
        Elements::Addrs(a) => a.contains(&addr),
        Elements::Endpoints(e) => e
            .iter()
            .any(|(ip, proto, port)| format!("{ip} . {} . {port}", proto.nft()) == element),
    }
}

#[cfg(test)]
mod tests;

//! One rule of a per-pod or tier chain as data: what it matches and its verdict. Its text
//! ([`fmt::Display`]) is the nft rule the table's scripts carry, and a chain's name is the hash
//! of those texts (`rules.rs`); the same value is what tern-agent's nf_tables netlink writer
//! encodes (`tern_net::netlink::nftables`), so neither path re-parses the other's text.
//!
//! Invariant: the text of every rule is exactly what tern wrote before rules were data (the
//! chains' hash names do not change).

use std::fmt;

use super::LogDenied;
use crate::compile::Dir;
use crate::model::Protocol;

/// Which address of the packet a rule looks up: the source (ingress rules: who may connect)
/// or the destination (egress rules: where to).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Addr {
    /// `saddr`.
    Source,
    /// `daddr`.
    Destination,
}

impl Addr {
    /// The address an allow of `dir` names its peers by.
    pub fn of(dir: Dir) -> Addr {
        match dir {
            Dir::Ingress => Addr::Source,
            Dir::Egress => Addr::Destination,
        }
    }

    fn nft(self) -> &'static str {
        match self {
            Addr::Source => "saddr",
            Addr::Destination => "daddr",
        }
    }
}

/// One match of a rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Match {
    /// `ip saddr @p4_<id>` (`v4`) or `ip6 … @p6_<id>`: the address is in a peer set.
    Peer {
        /// IPv4 (else IPv6).
        v4: bool,
        /// Source or destination.
        addr: Addr,
        /// The set's name.
        set: String,
    },
    /// `ip saddr . meta l4proto . th dport @e4_<id>`: address, protocol and port in an endpoint
    /// set.
    Endpoint {
        /// IPv4 (else IPv6).
        v4: bool,
        /// Source or destination.
        addr: Addr,
        /// The set's name.
        set: String,
    },
    /// `meta l4proto tcp`.
    Protocol(Protocol),
    /// `th dport { 80, 1000-2000 }`: inclusive ranges, sorted, merged (never empty).
    Ports(Vec<(u16, u16)>),
}

/// What a rule does with a packet it matches.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// `accept`.
    Accept,
    /// `drop`.
    Drop,
    /// `return` (to the chain that jumped here).
    Return,
    /// `jump <chain>`.
    Jump(String),
}

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// Its matches (none: every packet) and verdict.
    Match {
        /// The matches, all of which must hold, in their order in the rule.
        matches: Vec<Match>,
        /// The verdict.
        verdict: Verdict,
    },
    /// The rule that logs a denied connection of a `dir` chain (`log.rs`), in front of `drop`.
    Log(LogDenied, Dir),
}

impl Rule {
    /// A rule of `matches` ending in `verdict`.
    pub fn new(matches: Vec<Match>, verdict: Verdict) -> Rule {
        Rule::Match { matches, verdict }
    }

    /// A rule of `verdict` alone (`accept`, `drop`, `jump x`).
    pub fn verdict(verdict: Verdict) -> Rule {
        Rule::new(Vec::new(), verdict)
    }
}

fn family(v4: bool) -> &'static str {
    if v4 {
        "ip"
    } else {
        "ip6"
    }
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Match::Peer { v4, addr, set } => {
                write!(f, "{} {} @{set}", family(*v4), addr.nft())
            }
            Match::Endpoint { v4, addr, set } => write!(
                f,
                "{} {} . meta l4proto . th dport @{set}",
                family(*v4),
                addr.nft()
            ),
            Match::Protocol(p) => write!(f, "meta l4proto {}", p.nft()),
            Match::Ports(ranges) => {
                f.write_str("th dport { ")?;
                for (i, (lo, hi)) in ranges.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    if lo == hi {
                        write!(f, "{lo}")?;
                    } else {
                        write!(f, "{lo}-{hi}")?;
                    }
                }
                f.write_str(" }")
            }
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Accept => f.write_str("accept"),
            Verdict::Drop => f.write_str("drop"),
            Verdict::Return => f.write_str("return"),
            Verdict::Jump(chain) => write!(f, "jump {chain}"),
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Match { matches, verdict } => {
                for m in matches {
                    write!(f, "{m} ")?;
                }
                write!(f, "{verdict}")
            }
            Rule::Log(log, dir) => f.write_str(&log.rule(*dir)),
        }
    }
}

/// The rules' texts joined by newlines: what a chain's name hashes.
pub(super) fn joined(rules: &[Rule]) -> String {
    let texts: Vec<String> = rules.iter().map(Rule::to_string).collect();
    texts.join("\n")
}

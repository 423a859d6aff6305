//! What changed in a [`Table`] and the script that carries it to the kernel: every change to
//! the table goes through [`Table::put_set`], [`Table::put_chain`] or [`Table::put_verdict`],
//! which note in a [`Journal`] what each part was before; the journal and the table after
//! give one nft transaction in proportion to what was touched.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use super::{write_chain, NamedSet, Rule, Table, VerdictMap, FAMILY, TABLE};

impl Table {
    /// Sets the set `name` (`None`: removes it), noting in `j` what it was.
    pub fn put_set(&mut self, j: &mut Journal, name: &str, set: Option<NamedSet>) {
        let before = match set {
            Some(s) => self.sets.insert(name.to_owned(), s),
            None => self.sets.remove(name),
        };
        j.sets.entry(name.to_owned()).or_insert(before);
    }

    /// Sets the chain `name` (`None`: removes it), noting in `j` what it was.
    pub fn put_chain(&mut self, j: &mut Journal, name: &str, rules: Option<Vec<Rule>>) {
        let before = match rules {
            Some(r) => self.chains.insert(name.to_owned(), r),
            None => self.chains.remove(name),
        };
        j.chains.entry(name.to_owned()).or_insert(before);
    }

    /// The verdict map `m`.
    pub fn map(&self, m: VerdictMap) -> &BTreeMap<IpAddr, String> {
        match m {
            VerdictMap::Ingress => &self.ingress,
            VerdictMap::Egress => &self.egress,
            VerdictMap::Host => &self.host,
        }
    }

    /// Sets the verdict of `ip` in map `m` (`None`: removes it), noting in `j` what it was.
    pub fn put_verdict(
        &mut self,
        j: &mut Journal,
        m: VerdictMap,
        ip: IpAddr,
        chain: Option<String>,
    ) {
        let map = match m {
            VerdictMap::Ingress => &mut self.ingress,
            VerdictMap::Egress => &mut self.egress,
            VerdictMap::Host => &mut self.host,
        };
        let log = &mut j.maps[m as usize];
        let before = match chain {
            Some(c) => map.insert(ip, c),
            None => map.remove(&ip),
        };
        log.entry(ip).or_insert(before);
    }
}

/// What parts of a [`Table`] were before a run of changes: each part touched, with its first
/// value (`None`: absent). With the table after the changes it gives the script that makes the
/// kernel's table follow ([`Journal::script`]), in proportion to what was touched.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Journal {
    pub(super) sets: BTreeMap<String, Option<NamedSet>>,
    pub(super) chains: BTreeMap<String, Option<Vec<Rule>>>,
    /// Per [`VerdictMap`], in its order.
    pub(super) maps: [BTreeMap<IpAddr, Option<String>>; 3],
}

/// The name of verdict map `m`'s IPv4 (`v4`) or IPv6 half.
pub(super) fn map_name(m: VerdictMap, v4: bool) -> &'static str {
    match (m, v4) {
        (VerdictMap::Ingress, true) => "ingress4",
        (VerdictMap::Ingress, false) => "ingress6",
        (VerdictMap::Egress, true) => "egress4",
        (VerdictMap::Egress, false) => "egress6",
        (VerdictMap::Host, true) => "host4",
        (VerdictMap::Host, false) => "host6",
    }
}

fn element_line(out: &mut String, verb: &str, set: &str, items: &[String]) {
    if !items.is_empty() {
        let _ = writeln!(
            out,
            "{verb} element {FAMILY} {TABLE} {set} {{ {} }}",
            items.join(", ")
        );
    }
}

impl Journal {
    /// Whether nothing was touched.
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty() && self.chains.is_empty() && self.maps.iter().all(BTreeMap::is_empty)
    }

    /// The script (one transaction) that turns the table as it was into `now`, empty when
    /// nothing differs. Order: new sets and chains (a chain names its sets); a changed chain
    /// flushed and filled again; every element delete of the sets and maps, then every add (an
    /// interval that grows or splits is deleted and added again, so no added interval overlaps
    /// one still present); the chains nothing jumps to any more (pod chains before the tier
    /// chains they jump to); the sets no chain names.
    pub fn script(&self, now: &Table) -> String {
        let (mut create, mut refill, mut deletes, mut adds, mut drop_sets) = (
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        );
        let mut gone_chains = Vec::new();
        for (name, before) in &self.sets {
            match (before, now.sets.get(name)) {
                (None, Some(set)) => set.write(name, &mut create),
                (Some(_), None) => {
                    let _ = writeln!(drop_sets, "delete set {FAMILY} {TABLE} {name}");
                }
                (Some(old), Some(set)) if old != set => {
                    element_line(&mut deletes, "delete", name, &old.minus(Some(set)));
                    element_line(&mut adds, "add", name, &set.minus(Some(old)));
                }
                _ => {}
            }
        }
        for (name, before) in &self.chains {
            match (before, now.chains.get(name)) {
                (None, Some(rules)) => write_chain(name, rules, &mut create),
                (Some(_), None) => gone_chains.push(name),
                (Some(old), Some(rules)) if old != rules => {
                    let _ = writeln!(refill, "flush chain {FAMILY} {TABLE} {name}");
                    for r in rules {
                        let _ = writeln!(refill, "add rule {FAMILY} {TABLE} {name} {r}");
                    }
                }
                _ => {}
            }
        }
        for m in VerdictMap::ALL {
            let (log, map) = (&self.maps[m as usize], now.map(m));
            let mut gone: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            let mut came: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for (ip, before) in log {
                let after = map.get(ip);
                if before.as_ref() == after {
                    continue;
                }
                if before.is_some() {
                    gone.entry(map_name(m, ip.is_ipv4()))
                        .or_default()
                        .push(ip.to_string());
                }
                if let Some(c) = after {
                    came.entry(map_name(m, ip.is_ipv4()))
                        .or_default()
                        .push(format!("{ip} : jump {c}"));
                }
            }
            gone.iter()
                .for_each(|(m, v)| element_line(&mut deletes, "delete", m, v));
            came.iter()
                .for_each(|(m, v)| element_line(&mut adds, "add", m, v));
        }
        // A pod's chain jumps to its tier chains, whose names (`a?_`, `b?_`) sort before the
        // pod chains' (`eg_`, `in_`): created in name order, deleted in reverse, no chain is
        // deleted while one still jumps to it.
        let mut drop_chains = String::new();
        for name in gone_chains.iter().rev() {
            let _ = writeln!(drop_chains, "delete chain {FAMILY} {TABLE} {name}");
        }
        let mut s = String::new();
        if !create.is_empty() {
            let _ = write!(s, "table {FAMILY} {TABLE} {{\n{create}}}\n");
        }
        s + &refill + &deletes + &adds + &drop_chains + &drop_sets
    }
}

/// The script that turns the kernel's table `old` into `new` in one transaction (see
/// [`Journal::script`]); empty when the two are equal.
pub fn update_script(old: &Table, new: &Table) -> String {
    let mut j = Journal::default();
    for name in old.sets.keys().chain(new.sets.keys()) {
        if old.sets.get(name) != new.sets.get(name) {
            j.sets.insert(name.clone(), old.sets.get(name).cloned());
        }
    }
    for name in old.chains.keys().chain(new.chains.keys()) {
        if old.chains.get(name) != new.chains.get(name) {
            j.chains.insert(name.clone(), old.chains.get(name).cloned());
        }
    }
    for m in VerdictMap::ALL {
        let (log, o, n) = (&mut j.maps[m as usize], old.map(m), new.map(m));
        for ip in o.keys().chain(n.keys()) {
            if o.get(ip) != n.get(ip) {
                log.insert(*ip, o.get(ip).cloned());
            }
        }
    }
    j.script(new)
}

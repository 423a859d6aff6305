//! A compiled [`Plan`] as a [`Table`]: its sets, each local pod's chains (NetworkPolicy's,
//! the ClusterNetworkPolicy tiers', the one judging its traffic to its own node) and the verdict
//! maps that send its addresses to them.

use super::{host_chains, named_sets, pod_chains, LogDenied, Size, Table, VerdictMap};
use crate::compile::{Dir, Plan};

/// The table of `plan`, and its size (denied connections not logged).
pub fn render(plan: &Plan) -> (Table, Size) {
    render_logging(plan, None)
}

/// The table of `plan` with denied connections logged as `log` says (`None`: not logged), and
/// its size.
pub fn render_logging(plan: &Plan, log: Option<LogDenied>) -> (Table, Size) {
    let mut t = Table {
        log,
        ..Table::default()
    };
    for (id, (def, c)) in &plan.sets {
        for (name, set) in named_sets(*id, def, c) {
            t.sets.insert(name, set);
        }
    }
    // An address is keyed once: the first pod (in name order) holding it wins.
    for p in &plan.pods {
        for (i, (dir, allows)) in [(Dir::Ingress, &p.ingress), (Dir::Egress, &p.egress)]
            .into_iter()
            .enumerate()
        {
            let mut chains = vec![(
                VerdictMap::of(dir),
                pod_chains(dir, allows.as_deref(), &p.tiers[i], log),
            )];
            if dir == Dir::Egress {
                chains.push((
                    VerdictMap::Host,
                    host_chains(allows.as_deref(), &p.tiers[i]),
                ));
            }
            for (m, chains) in chains {
                let Some(name) = chains.first().map(|(n, _)| n.clone()) else {
                    continue;
                };
                for (n, rules) in chains {
                    t.chains.entry(n).or_insert(rules);
                }
                let map = match m {
                    VerdictMap::Ingress => &mut t.ingress,
                    VerdictMap::Egress => &mut t.egress,
                    VerdictMap::Host => &mut t.host,
                };
                for ip in &p.ips {
                    map.entry(*ip).or_insert_with(|| name.clone());
                }
            }
        }
    }
    let size = t.size(plan.pods.len());
    (t, size)
}

/// The script that replaces the table with `plan`'s in one transaction, and the table's size.
pub fn replace_script(plan: &Plan) -> (String, Size) {
    let (t, size) = render(plan);
    (t.replace_script(), size)
}

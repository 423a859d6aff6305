//! The updates of `Engine::flush` given as a `Flush::plan` (element moves; sets and chains made
//! and removed with their rules: policies created, changed, deleted, new local pods) written
//! over netlink by tern's own nf_tables writer (`tern_net::netlink::nftables`) in a real
//! kernel: one netns gets the first table replaced through nft and then each flush's plan over
//! netlink when it has one, its nft script otherwise (as the agent's syncer does); another gets
//! each step's full render replaced whole through nft; after every step the two `nft list
//! table` outputs must be equal (`netpol_steps`: the same fixed changes as
//! `netpol_update_kernel.rs`, two seeds of 260 steps), and many steps must have made chains
//! and sets over netlink, interval sets of an ipBlock rule among them. And a batch the kernel refuses changes nothing and names the set and element; a
//! batch past the socket's default buffer goes whole.
//! Needs root and nft.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod netpol_steps;

use netpol_steps::{listing, step, Mirror};
use tern_net::netlink::nftables::{Element, ElementWriter, SetChange, Verb, NFPROTO_INET};
use tern_net::netns::NetNs;
use tern_net::nft::Nft;
use tern_netpol::ruleset::TABLE;
use tern_netpol::Engine;
use tern_testkit::netns::TestNetns;

/// Linux's errnos (asm-generic/errno-base.h).
const ENOENT: i32 = 2;
const EEXIST: i32 = 17;

/// What went over netlink in one seed's steps.
#[derive(Debug, Default)]
struct Counts {
    /// Flushes written over netlink.
    by_netlink: usize,
    /// Of those, ones that moved verdict-map entries.
    maps: usize,
    /// Of those, ones that made or removed chains or sets (a policy created, changed or
    /// deleted; a new local pod's chain).
    objects: usize,
    /// Chains made over netlink.
    chains_made: usize,
    /// Interval sets (a rule's peers with an ipBlock) made over netlink.
    interval_sets_made: usize,
    /// Flushes that went through nft (something the writer does not encode).
    by_nft: usize,
}

/// Steps of one seed.
fn run(seed: u64, steps: u64, stem: &str) -> Counts {
    let nft = Nft::find().unwrap();
    let (inc_ns, full_ns) = (
        TestNetns::new(&format!("{stem}-nl")),
        TestNetns::new(&format!("{stem}-full")),
    );
    let (inc, full) = (
        NetNs::open(inc_ns.path()).unwrap(),
        NetNs::open(full_ns.path()).unwrap(),
    );
    let writer = inc
        .run_in(|| ElementWriter::new(NFPROTO_INET, TABLE))
        .unwrap()
        .unwrap();
    let (mut m, mut e) = (Mirror::default(), Engine::new("n1"));
    e.flush();
    inc.run_in(|| nft.apply(&e.table().replace_script()))
        .unwrap()
        .unwrap();
    let mut n = Counts::default();
    for i in 0..steps {
        let what = step(seed * 1_000_003 + i, &mut m, &mut e);
        let f = e.flush();
        let want = m.full(None);
        match &f.plan {
            Some(plan) => {
                let ops = tern_agent::netpol::table_batch(plan).expect("a plan is encodable");
                writer.apply(&ops).unwrap_or_else(|err| {
                    panic!("step {i}: {what}: the kernel refused {plan:?}: {err}")
                });
                n.by_netlink += 1;
                let is_map = |set: &str| {
                    ["ingress", "egress", "host"]
                        .iter()
                        .any(|p| set.starts_with(p))
                };
                let moved = plan.elements.deletes.iter().chain(&plan.elements.adds);
                n.maps += usize::from(moved.clone().any(|s| is_map(&s.set)));
                n.objects += usize::from(plan.objects() > 0);
                n.chains_made += plan.new_chains.len();
                n.interval_sets_made += plan.new_interval_sets.len();
            }
            None if !f.script.is_empty() => {
                n.by_nft += 1;
                inc.run_in(|| nft.apply(&f.script))
                    .unwrap()
                    .unwrap_or_else(|err| {
                        panic!("step {i}: {what}: nft refused\n{}\n{err}", f.script)
                    })
            }
            None => {}
        }
        full.run_in(|| nft.apply(&want.replace_script()))
            .unwrap()
            .unwrap();
        assert_eq!(
            listing(&inc, &nft),
            listing(&full, &nft),
            "seed {seed} step {i}: {what}: the table kept over netlink differs; the plan was\n{:?}",
            f.plan
        );
    }
    n
}

#[test]
fn table_plans_over_netlink_list_as_the_full_render() {
    if tern_testkit::root::skip() {
        return;
    }
    for (seed, stem) in [(1, "nlk1"), (2, "nlk2")] {
        let n = run(seed, 260, stem);
        eprintln!("seed {seed}: {n:?}");
        // The run exercised what it claims: many updates over netlink, some of verdict maps,
        // some that made or removed chains and sets (policies, new local pods), interval sets
        // of ipBlock rules among them.
        assert!(
            n.by_netlink > 25
                && n.maps > 3
                && n.objects > 10
                && n.chains_made > 10
                && n.interval_sets_made > 10,
            "seed {seed}: {n:?}"
        );
    }
}

/// A batch with one element the kernel refuses (a delete of an element that is not there)
/// after one it would take: an error naming that set and element, and the table unchanged
/// (the add before it undone with it).
#[test]
fn a_refused_batch_changes_nothing_and_names_the_element() {
    if tern_testkit::root::skip() {
        return;
    }
    let nft = Nft::find().unwrap();
    let ns_guard = TestNetns::new("nlk-refused");
    let ns = NetNs::open(ns_guard.path()).unwrap();
    let table = "table inet tern_netpol {\n\tset p4_a {\n\t\ttype ipv4_addr\n\t\telements = { 10.0.0.1 }\n\t}\n\tset p6_a {\n\t\ttype ipv6_addr\n\t}\n}\n";
    ns.run_in(|| nft.apply(table)).unwrap().unwrap();
    let before = listing(&ns, &nft);
    let writer = ns
        .run_in(|| ElementWriter::new(NFPROTO_INET, TABLE))
        .unwrap()
        .unwrap();
    let el = |ip: &str| Element {
        key: ip.parse().unwrap(),
        jump: None,
    };
    let change = |verb, set: &str, elements| SetChange {
        verb,
        set: set.into(),
        elements,
    };
    let refused = writer
        .write(&[
            change(Verb::Add, "p4_a", vec![el("10.0.0.2"), el("10.0.0.3")]),
            change(Verb::Delete, "p6_a", vec![el("fd00::7")]),
        ])
        .unwrap_err();
    let text = refused.to_string();
    assert!(
        text.contains("fd00::7") && text.contains("p6_a") && refused.errno() == Some(ENOENT),
        "{text}"
    );
    assert_eq!(
        listing(&ns, &nft),
        before,
        "a refused batch changed the table"
    );
    // An add of an element already there is refused too (the kernel's table is not what the
    // engine thinks), and the batch then did nothing.
    let exists = writer
        .write(&[change(
            Verb::Add,
            "p4_a",
            vec![el("10.0.0.9"), el("10.0.0.1")],
        )])
        .unwrap_err();
    assert!(
        exists.to_string().contains("10.0.0.1 of set p4_a"),
        "{exists}"
    );
    assert_eq!(exists.errno(), Some(EEXIST));
    assert_eq!(listing(&ns, &nft), before);
    // And one it takes moves what it says.
    writer
        .write(&[change(Verb::Delete, "p4_a", vec![el("10.0.0.1")])])
        .unwrap();
    let after = listing(&ns, &nft);
    assert!(after.iter().all(|b| !b.contains("10.0.0.1")), "{after:?}");
}

/// A batch larger than the socket's default send buffer and than one attribute can hold (20,000
/// IPv6 keys, about 600 kB in several messages of one batch): all of it in the table, then all
/// of it gone.
#[test]
fn a_batch_of_many_elements_goes_whole() {
    if tern_testkit::root::skip() {
        return;
    }
    let nft = Nft::find().unwrap();
    let ns_guard = TestNetns::new("nlk-big");
    let ns = NetNs::open(ns_guard.path()).unwrap();
    let table = "table inet tern_netpol {\n\tset p6_a {\n\t\ttype ipv6_addr\n\t}\n}\n";
    ns.run_in(|| nft.apply(table)).unwrap().unwrap();
    let writer = ns
        .run_in(|| ElementWriter::new(NFPROTO_INET, TABLE))
        .unwrap()
        .unwrap();
    let keys: Vec<Element> = (0..20_000u128)
        .map(|i| Element {
            key: std::net::Ipv6Addr::from((0xfd00u128 << 112) | i).into(),
            jump: None,
        })
        .collect();
    let count = || {
        let listed = ns
            .run_in(|| nft.list_table("inet", "tern_netpol"))
            .unwrap()
            .unwrap()
            .unwrap();
        listed.matches("fd00::").count()
    };
    let set = |verb| SetChange {
        verb,
        set: "p6_a".into(),
        elements: keys.clone(),
    };
    writer.write(&[set(Verb::Add)]).unwrap();
    assert_eq!(count(), 20_000);
    writer.write(&[set(Verb::Delete)]).unwrap();
    assert_eq!(count(), 0);
}

/// A batch over thousands of sets (3,000, one element each: one message a set), as a relabel
/// at shape A touches: committed and answered as committed. Acked message by message, the
/// kernel's answers overflowed the receive buffer (ENOBUFS) after it had committed the batch.
#[test]
fn a_batch_over_thousands_of_sets_is_answered_as_committed() {
    if tern_testkit::root::skip() {
        return;
    }
    let nft = Nft::find().unwrap();
    let ns_guard = TestNetns::new("nlk-sets");
    let ns = NetNs::open(ns_guard.path()).unwrap();
    let sets: String = (0..3_000)
        .map(|i| format!("\tset p4_{i} {{\n\t\ttype ipv4_addr\n\t}}\n"))
        .collect();
    ns.run_in(|| nft.apply(&format!("table inet tern_netpol {{\n{sets}}}\n")))
        .unwrap()
        .unwrap();
    let writer = ns
        .run_in(|| ElementWriter::new(NFPROTO_INET, TABLE))
        .unwrap()
        .unwrap();
    let changes: Vec<SetChange> = (0..3_000u32)
        .map(|i| SetChange {
            verb: Verb::Add,
            set: format!("p4_{i}"),
            elements: vec![Element {
                key: std::net::Ipv4Addr::from(0x0a00_0000 | i).into(),
                jump: None,
            }],
        })
        .collect();
    writer.write(&changes).unwrap();
    let listed = ns
        .run_in(|| nft.list_table("inet", "tern_netpol"))
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(listed.matches("elements = {").count(), 3_000);
}

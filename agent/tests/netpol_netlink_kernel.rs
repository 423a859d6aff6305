//! The element-only updates of `Engine::flush` (`Flush::elements`) written over netlink by
//! tern's own nf_tables writer (`tern_net::netlink::nftables`) in a real kernel: one netns gets
//! the first table replaced through nft and then each flush's element plan over netlink when
//! it has one, its nft script otherwise (as the agent's syncer does); another gets each step's
//! full render replaced whole through nft; after every step the two `nft list table` outputs
//! must be equal (`netpol_steps`: the same fixed changes as `netpol_update_kernel.rs`, two
//! seeds). And a batch the kernel refuses changes nothing and names the set and element; a
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

/// Steps of one seed: how many went over netlink, and how many of those moved map entries.
fn run(seed: u64, steps: u64, stem: &str) -> (usize, usize) {
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
    let (mut by_netlink, mut maps) = (0, 0);
    for i in 0..steps {
        let what = step(seed * 1_000_003 + i, &mut m, &mut e);
        let f = e.flush();
        let want = m.full(None);
        match &f.elements {
            Some(plan) => {
                writer
                    .write(&tern_agent::netpol::element_batch(plan))
                    .unwrap_or_else(|err| {
                        panic!("step {i}: {what}: the kernel refused {plan:?}: {err}")
                    });
                by_netlink += 1;
                let is_map = |set: &str| {
                    ["ingress", "egress", "host"]
                        .iter()
                        .any(|p| set.starts_with(p))
                };
                maps += usize::from(
                    plan.deletes
                        .iter()
                        .chain(&plan.adds)
                        .any(|s| is_map(&s.set)),
                );
            }
            None if !f.script.is_empty() => inc
                .run_in(|| nft.apply(&f.script))
                .unwrap()
                .unwrap_or_else(|err| panic!("step {i}: {what}: nft refused\n{}\n{err}", f.script)),
            None => {}
        }
        full.run_in(|| nft.apply(&want.replace_script()))
            .unwrap()
            .unwrap();
        assert_eq!(
            listing(&inc, &nft),
            listing(&full, &nft),
            "seed {seed} step {i}: {what}: the table kept over netlink differs; the plan was\n{:?}",
            f.elements
        );
    }
    (by_netlink, maps)
}

#[test]
fn element_plans_over_netlink_list_as_the_full_render() {
    if tern_testkit::root::skip() {
        return;
    }
    for (seed, stem) in [(1, "nlk1"), (2, "nlk2")] {
        let (by_netlink, maps) = run(seed, 260, stem);
        // The run exercised what it claims: many element-only updates, some of verdict maps.
        assert!(
            by_netlink > 25 && maps > 3,
            "seed {seed}: {by_netlink} {maps}"
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

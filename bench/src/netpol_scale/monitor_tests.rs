use super::*;

fn el(set: &str, deleted: bool, addr: &str, end: bool) -> Event {
    let key = match addr.parse::<IpAddr>().unwrap() {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    Event::Elem {
        table: OURS.into(),
        set: set.into(),
        deleted,
        key,
        end,
    }
}

fn folded(evs: Vec<Event>) -> Vec<Tx> {
    let mut st = State::default();
    for (i, e) in evs.into_iter().enumerate() {
        fold(&mut st, i as f64, e);
    }
    st.txs
}

fn sorted(s: &HashSet<String>) -> Vec<&str> {
    let mut v: Vec<&str> = s.iter().map(String::as_str).collect();
    v.sort_unstable();
    v
}

#[test]
fn interval_pairs_become_ranges_and_plain_elements_addresses() {
    let txs = folded(vec![
        el("ipb", false, "0.0.0.0", true),
        el("ipb", false, "172.16.4.0", false),
        el("ipb", false, "172.16.5.0", true),
        el("ipb", false, "10.251.0.5", false),
        el("ipb", false, "10.251.0.10", true),
        el("peers", false, "10.251.3.7", false),
        el("peers", false, "10.251.3.8", false),
        el("peers", true, "10.202.0.9", false),
        Event::Gen,
    ]);
    assert_eq!(txs.len(), 1);
    let t = &txs[0];
    assert!(t.ours && !t.replace && !t.sets_deleted);
    assert_eq!(
        sorted(&t.added),
        [
            "10.251.0.5-10.251.0.9",
            "10.251.3.7",
            "10.251.3.8",
            "172.16.4.0/24"
        ]
    );
    assert_eq!(sorted(&t.deleted), ["10.202.0.9"]);
    assert_eq!(t.other_deleted, 0, "a marker's delete is not another's");
    assert!(t.added.iter().any(|e| holds(e, "10.251.0.7")));
    assert!(!t.added.iter().any(|e| holds(e, "10.251.0.10")));
}

#[test]
fn transactions_end_at_the_generation_and_other_tables_are_not_ours() {
    let txs = folded(vec![
        Event::Table {
            table: PROBE.into(),
            deleted: false,
        },
        Event::Gen,
        Event::Table {
            table: OURS.into(),
            deleted: false,
        },
        el("s", false, "10.251.1.1", false),
        Event::Gen,
        Event::Set {
            table: OURS.into(),
            set: "old".into(),
            deleted: true,
        },
        Event::Gen,
    ]);
    assert_eq!(txs.len(), 3);
    assert!(!txs[0].ours);
    assert!(txs[1].ours && txs[1].replace && txs[1].added.contains("10.251.1.1"));
    assert_eq!((txs[1].start, txs[1].gen), (2.0, 4.0));
    assert!(txs[2].sets_deleted && !txs[2].replace);
}

#[test]
fn a_delete_of_an_element_no_marker_names_is_counted_and_an_add_is_not() {
    let txs = folded(vec![
        el("peers", false, "10.64.0.2", false),
        el("peers", true, "10.64.0.3", false),
        el("ipb", true, "10.64.1.0", false),
        el("ipb", true, "10.64.2.0", true),
        el("peers", true, "10.251.1.4", false),
        el("map", true, "10.30.0.1", false),
        el("map", false, "10.30.0.1", false),
        Event::Gen,
    ]);
    let t = &txs[0];
    assert_eq!(
        t.other_deleted, 2,
        "an address and an interval; not an entry added back in the same transaction"
    );
    assert_eq!(t.other_sample, ["10.64.0.3", "10.64.1.0/24"]);
    assert_eq!(sorted(&t.deleted), ["10.251.1.4"]);
}

#[test]
fn holds_an_address_in_a_range_or_network() {
    assert!(holds("10.251.0.1-10.251.0.9", "10.251.0.9"));
    assert!(!holds("10.251.0.1-10.251.0.9", "10.251.0.10"));
    assert!(holds("10.251.0.0/24", "10.251.0.77"));
    assert!(!holds("10.251.0.0/24", "10.251.1.0"));
    assert!(holds("172.16.4.0/24", "172.16.4.0/24"));
}

/// The listener in a scratch netns sees `nft add element` with the right address: a key decoded
/// at the wrong offset or byte order would show another address (or none) and fail.
#[test]
fn the_listener_sees_an_added_element_with_its_address() {
    if tern_testkit::root::skip() {
        return;
    }
    let ns = tern_testkit::netns::TestNetns::new("tnps-mon");
    ns.exec_ok(&[
        "nft",
        "add table inet tern_netpol; \
         add set inet tern_netpol peers { type ipv4_addr; }; \
         add set inet tern_netpol blocks { type ipv4_addr; flags interval; }",
    ]);
    let m = Monitor::start(ns.name()).unwrap();
    let t0 = now();
    ns.exec_ok(&["nft", "add element inet tern_netpol peers { 10.251.7.9 }"]);
    ns.exec_ok(&[
        "nft",
        "add element inet tern_netpol blocks { 172.16.3.0/24 }",
    ]);
    ns.exec_ok(&[
        "nft",
        "delete element inet tern_netpol peers { 10.251.7.9 }",
    ]);
    let end = std::time::Instant::now() + Duration::from_secs(5);
    while m.since(t0).len() < 3 && std::time::Instant::now() < end {
        thread::sleep(Duration::from_millis(20));
    }
    let added = m.find(t0, "10.251.7.9", true).expect("the add seen");
    assert!(added.start >= t0 && added.gen >= added.start);
    assert_eq!(sorted(&added.added), ["10.251.7.9"]);
    assert!(m.find(t0, "10.251.7.8", true).is_none());
    assert!(m.find(t0, "172.16.3.0/24", true).is_some());
    let gone = m
        .find(added.gen, "10.251.7.9", false)
        .expect("the delete seen");
    assert_eq!(sorted(&gone.deleted), ["10.251.7.9"]);
    assert_eq!(m.overflows(), 0);
    drop(m);
}

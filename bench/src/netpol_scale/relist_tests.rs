use super::*;

const LOG: &str = "\
2026-12-06T20:32:23.913606Z  INFO tern_watch::reflector: listed kind=\"pods\" items=150000 changes=150000 resource_version=311326
2026-12-06T20:40:00.500000Z  INFO tern_watch::reflector: resourceVersion too old (410 Gone); listing again kind=\"namespaces\"
2026-12-06T20:40:00.600000Z  INFO tern_watch::reflector: listed kind=\"namespaces\" items=506 changes=0 resource_version=9
2026-12-06T20:40:01.250000Z  INFO tern_watch::reflector: resourceVersion too old (410 Gone); listing again kind=\"pods\"
2026-12-06T20:40:40.750000Z  INFO tern_watch::reflector: listed kind=\"pods\" items=150000 changes=1 resource_version=12
";

/// 2026-12-06T20:40:00Z in Unix seconds.
const AT_2040: f64 = 1_796_589_600.0;

#[test]
fn the_pods_relist_is_read_from_the_agents_log_after_the_restart_only() {
    assert_eq!(
        log_time("2026-12-06T20:40:00.500000Z  INFO x"),
        Some(AT_2040 + 0.5)
    );
    assert_eq!(log_time("no time here"), None);
    let (s, e) = pods_relist(LOG, AT_2040);
    assert_eq!(s, Some(AT_2040 + 1.25), "the Pods 410, not the Namespaces'");
    assert_eq!(
        e,
        Some(AT_2040 + 40.75),
        "the list after it, not the first sync's"
    );
    assert_eq!(pods_relist(LOG, AT_2040 + 50.0), (None, None));
    let unfinished: String = LOG.lines().take(4).map(|l| format!("{l}\n")).collect();
    assert_eq!(
        pods_relist(&unfinished, AT_2040),
        (Some(AT_2040 + 1.25), None)
    );
}

#[test]
fn losses_count_replaces_and_deletes_no_change_explains() {
    let ok = Tx {
        deleted: ["172.17.3.0/24".to_owned()].into(),
        ..Tx::default()
    };
    assert_eq!(losses(std::slice::from_ref(&ok)), Losses::default());
    let lost = Tx {
        other_deleted: 2,
        other_sample: vec!["10.64.0.2".into(), "10.64.0.3".into()],
        ..Tx::default()
    };
    let replaced = Tx {
        replace: true,
        ..Tx::default()
    };
    let l = losses(&[ok, lost, replaced]);
    assert_eq!((l.replaced, l.other_deleted), (1, 2));
    assert_eq!(l.sample, ["10.64.0.2", "10.64.0.3"]);
}

#[test]
fn a_change_counts_as_during_for_the_agents_still_relisting_only() {
    // Agent 0's list ended at 100 s, agent 1's at 200 s; a change written at 150 s landed 10 ms
    // later in both.
    let w = Written::at("polcreate", 150.0);
    let made = [Made {
        got: vec![Some(150.010), Some(150.010)],
        seen: Some(150.002),
        w,
    }];
    let (during, after) = split(&made, &[100.0, 200.0]);
    let d = &during.per_agent[0]["polcreate"];
    assert_eq!((d[0].len(), d[1].len()), (0, 1));
    let a = &after.per_agent[0]["polcreate"];
    assert_eq!((a[0].len(), a[1].len()), (1, 0));
    assert!(
        (during.all(0, "polcreate")[0] - 5.0).abs() < 1e-6,
        "from return"
    );
    assert!(
        (during.all(1, "polcreate")[0] - 10.0).abs() < 1e-6,
        "from start"
    );
    assert!(
        (during.all(2, "polcreate")[0] - 8.0).abs() < 1e-6,
        "from seen"
    );
    assert_eq!(during.missed["polcreate"] + after.missed["polcreate"], 0);
}

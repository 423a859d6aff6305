//! The drain plan, the release and the removal, in temp dirs.

#![allow(clippy::unwrap_used)]

use super::*;

fn plan() -> DrainPlan {
    DrainPlan {
        conflist: "10-tern.conflist".into(),
        kubeconfig: "tern-kubeconfig".into(),
        plugins: vec!["tern".into(), "tern-tuning".into()],
        remove_egress_nat: false,
        remove_node_routes: false,
        remove_network_policy: false,
    }
}

#[test]
fn a_mark_from_before_the_network_policy_table_still_reads() {
    let dir = tempfile::tempdir().unwrap();
    let old = r#"{"conflist":"10-tern.conflist","kubeconfig":"tern-kubeconfig","plugins":["tern"],"removeEgressNat":true,"removeNodeRoutes":true}"#;
    std::fs::write(dir.path().join(MARK), old).unwrap();
    let p = DrainPlan::read_mark(dir.path()).unwrap().unwrap();
    assert!(p.remove_egress_nat && !p.remove_network_policy);
}

#[test]
fn names_must_be_plain_file_names() {
    assert!(plan().validate().is_ok());
    for bad in ["", ".", "..", "../tern", "/opt/cni/bin/tern", "a/b"] {
        let mut p = plan();
        p.plugins.push(bad.into());
        assert!(p.validate().is_err(), "{bad:?} accepted");
        let mut p = plan();
        p.conflist = bad.into();
        assert!(p.validate().is_err(), "conflist {bad:?} accepted");
    }
}

#[test]
fn mark_round_trips_and_refuses_old_text_and_paths() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(DrainPlan::read_mark(dir.path()).unwrap(), None);
    plan().write_mark(dir.path()).unwrap();
    assert_eq!(DrainPlan::read_mark(dir.path()).unwrap(), Some(plan()));
    std::fs::write(dir.path().join(MARK), "tern-agent uninstall began\n").unwrap();
    assert!(DrainPlan::read_mark(dir.path()).is_err());
    let text = serde_json::to_string(&DrainPlan {
        kubeconfig: "../../etc/shadow".into(),
        ..plan()
    })
    .unwrap();
    std::fs::write(dir.path().join(MARK), text).unwrap();
    assert!(DrainPlan::read_mark(dir.path()).is_err());
}

#[test]
fn release_waits_for_the_last_attachment_and_keeps_what_a_del_needs() {
    let root = tempfile::tempdir().unwrap();
    let (conf, state) = (root.path().join("net.d"), root.path().join("state"));
    for d in [&conf, &state.join("k8s-pod-network")] {
        std::fs::create_dir_all(d).unwrap();
    }
    for f in ["10-tern.conflist", "tern-kubeconfig", "99-other.conflist"] {
        std::fs::write(conf.join(f), "{}").unwrap();
    }
    assert_eq!(
        release_if_idle(&conf, &state).unwrap(),
        Release::NotDraining
    );
    // An older agent's mark (a line of text, no plan): nothing is released.
    std::fs::write(conf.join(MARK), "tern-agent uninstall began\n").unwrap();
    assert!(release_if_idle(&conf, &state).is_err());
    assert!(conf.join("tern-kubeconfig").exists());
    plan().write_mark(&conf).unwrap();
    let pod = state.join("k8s-pod-network/c1_eth0.json");
    std::fs::write(&pod, "{}").unwrap();
    assert_eq!(release_if_idle(&conf, &state).unwrap(), Release::Waiting(1));
    assert!(conf.join("tern-kubeconfig").exists());
    std::fs::remove_file(&pod).unwrap();
    assert_eq!(release_if_idle(&conf, &state).unwrap(), Release::Released);
    let mut left: Vec<_> = std::fs::read_dir(&conf)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["10-tern.conflist", "99-other.conflist", MARK]);
    // A repeat DEL finds it released already.
    assert_eq!(release_if_idle(&conf, &state).unwrap(), Release::Released);
}

/// An install that holds the conf dir's lock (it writes a new kubeconfig and removes the mark)
/// while the last DEL of a drain releases: the release waits for it, then finds no mark and keeps
/// the new kubeconfig. Under the mark's own lock (before) it released at once and removed it.
#[test]
fn release_waits_for_an_install_and_keeps_its_kubeconfig() {
    let root = tempfile::tempdir().unwrap();
    let (conf, state) = (root.path().join("net.d"), root.path().join("state"));
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(conf.join("tern-kubeconfig"), "old").unwrap();
    plan().write_mark(&conf).unwrap();
    let install = lock_conf_dir(&conf).unwrap();
    std::thread::scope(|s| {
        let del = s.spawn(|| release_if_idle(&conf, &state).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            !del.is_finished(),
            "the release did not wait for the install"
        );
        std::fs::write(conf.join("tern-kubeconfig"), "new").unwrap();
        std::fs::remove_file(conf.join(MARK)).unwrap();
        drop(install);
        assert_eq!(del.join().unwrap(), Release::NotDraining);
    });
    assert_eq!(
        std::fs::read_to_string(conf.join("tern-kubeconfig")).unwrap(),
        "new"
    );
}

#[test]
fn remove_installed_removes_only_the_plan() {
    let root = tempfile::tempdir().unwrap();
    let (conf, bin) = (root.path().join("net.d"), root.path().join("bin"));
    for d in [&conf, &bin] {
        std::fs::create_dir_all(d).unwrap();
    }
    for f in ["10-tern.conflist", "tern-kubeconfig", "99-other.conflist"] {
        std::fs::write(conf.join(f), "{}").unwrap();
    }
    for f in ["tern", "tern-tuning", "bridge"] {
        std::fs::write(bin.join(f), "").unwrap();
    }
    remove_installed(&plan(), &conf, &bin).unwrap();
    let mut left: Vec<_> = std::fs::read_dir(&conf)
        .unwrap()
        .chain(std::fs::read_dir(&bin).unwrap())
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["99-other.conflist", "bridge"]);
    // Again: absent files are removed already.
    remove_installed(&plan(), &conf, &bin).unwrap();
}

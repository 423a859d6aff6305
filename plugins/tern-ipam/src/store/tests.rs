//! Unit tests of the lease store: host-local's file format, owners, temp sweeping, opening.

use super::*;

fn loc(dir: &Path) -> StoreLocation {
    StoreLocation {
        name: "net1".into(),
        data_dir: dir.to_path_buf(),
    }
}

#[test]
fn lease_files_are_host_locals_format() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(&loc(tmp.path())).unwrap();
    let ip: IpAddr = "10.1.2.3".parse().unwrap();
    assert!(s.reserve(ip, " c1 ", "eth0", 2).unwrap());
    let dir = tmp.path().join("net1");
    assert_eq!(fs::read(dir.join("10.1.2.3")).unwrap(), b"c1\r\neth0");
    assert_eq!(
        fs::read(dir.join("last_reserved_ip.2")).unwrap(),
        b"10.1.2.3"
    );
    assert!(dir.join("lock").is_file());
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(dir.join("10.1.2.3"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "lease is private: {mode:o}");
    assert!(!s.reserve(ip, "c2", "eth0", 2).unwrap(), "taken");
    assert_eq!(
        fs::read(dir.join("10.1.2.3")).unwrap(),
        b"c1\r\neth0",
        "not replaced"
    );
    let v6: IpAddr = "2001:db8::5".parse().unwrap();
    assert!(s.reserve(v6, "c1", "net1", 0).unwrap());
    assert!(dir.join("2001:db8::5").is_file());
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "10.1.2.3",
            "2001:db8::5",
            "last_reserved_ip.0",
            "last_reserved_ip.2",
            "lock"
        ],
        "no temp file left"
    );
    assert_eq!(s.last_reserved_ip(2), Some(ip));
    assert_eq!(s.last_reserved_ip(7), None);
}

#[test]
fn owners_and_legacy_lookup() {
    assert_eq!(
        Owner::parse("abc\r\neth0\n"),
        Owner::Attachment {
            id: "abc".into(),
            ifname: "eth0".into()
        }
    );
    assert_eq!(Owner::parse(" abc \n"), Owner::Legacy { id: "abc".into() });
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(&loc(tmp.path())).unwrap();
    let dir = s.dir().to_path_buf();
    fs::write(dir.join("10.0.0.2"), "c1\r\neth0").unwrap();
    fs::write(dir.join("10.0.0.3"), "c1\r\neth1").unwrap();
    fs::write(dir.join("10.0.0.4"), "c1").unwrap();
    fs::write(dir.join("10.0.0.5"), "c2").unwrap();
    fs::write(dir.join("not-an-ip"), "c1\r\neth0").unwrap();
    fs::write(dir.join("last_reserved_ip.0"), "c1").unwrap();
    let ips = |v: Vec<Lease>| v.into_iter().map(|l| l.file_name).collect::<Vec<_>>();
    assert_eq!(ips(s.leases_of("c1", "eth0").unwrap()), ["10.0.0.2"]);
    assert_eq!(
        ips(s.leases_of("c1", "eth9").unwrap()),
        ["10.0.0.4"],
        "legacy fallback"
    );
    assert_eq!(ips(s.leases_of("c2", "eth0").unwrap()), ["10.0.0.5"]);
    assert!(s.leases_of("c3", "eth0").unwrap().is_empty());
    assert_eq!(s.leases().unwrap().len(), 4);
}

#[test]
fn stale_temps_are_swept_and_never_leases() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(&loc(tmp.path())).unwrap();
    let stale = s.dir().join(".tern-lease.tmp-999999-0");
    fs::write(&stale, "c1\r\neth0").unwrap();
    assert!(s.leases().unwrap().is_empty());
    s.sweep_temps();
    assert!(!stale.exists());
    // The same in ADD's one walk, beside a lease that is kept.
    fs::write(&stale, "c1\r\neth0").unwrap();
    fs::write(s.dir().join("10.0.0.9"), "c9\r\neth0").unwrap();
    let leases = s.leases_swept().unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].file_name, "10.0.0.9");
    assert!(!stale.exists());
}

#[test]
fn a_lease_longer_than_the_buffer_is_read_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(&loc(tmp.path())).unwrap();
    let id = "c".repeat(10_000);
    fs::write(s.dir().join("10.0.0.7"), format!("{id}\r\neth0")).unwrap();
    let leases = s.leases().unwrap();
    assert!(leases[0].owner.is_attachment(&id, "eth0"));
}

#[test]
fn open_existing_does_not_create() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(Store::open_existing(&loc(tmp.path())).unwrap().is_none());
    assert!(!tmp.path().join("net1").exists());
    drop(Store::open(&loc(tmp.path())).unwrap());
    assert!(Store::open_existing(&loc(tmp.path())).unwrap().is_some());
}

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
fn both_ways_of_creating_a_lease_write_the_same_file() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(&loc(tmp.path())).unwrap();
    let dir = tmp.path().join("net1");
    // ext4 and tmpfs have O_TMPFILE: the unnamed file linked into place.
    assert!(matches!(
        s.create_unnamed("10.1.2.3", b"c1\r\neth0"),
        Some(Ok(true))
    ));
    assert!(matches!(
        s.create_unnamed("10.1.2.3", b"c2\r\neth0"),
        Some(Ok(false))
    ));
    // The fallback: a temp file renamed into place.
    assert!(s.create_through_temp("10.1.2.4", b"c1\r\neth1").unwrap());
    assert!(!s.create_through_temp("10.1.2.3", b"c3\r\neth0").unwrap());
    use std::os::unix::fs::PermissionsExt;
    for (name, content) in [("10.1.2.3", b"c1\r\neth0"), ("10.1.2.4", b"c1\r\neth1")] {
        assert_eq!(fs::read(dir.join(name)).unwrap(), content, "{name}");
        let mode = fs::metadata(dir.join(name)).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{name} is private: {mode:o}");
    }
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["10.1.2.3", "10.1.2.4", "lock"], "no temp file left");
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
    assert!(stale.exists(), "a plain listing removes nothing");
    // ADD's and GC's one walk sweeps it, beside a lease that is kept.
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

/// A lease that is not UTF-8 (garbage in a torn file, a tool's bytes) is still a lease, of an
/// owner no valid attachment is: listed, so GC releases it. It was skipped as unreadable, so
/// GC kept it and its address for good (host-local compares the bytes as they are).
#[test]
fn a_lease_not_utf8_is_a_lease_of_nobody_valid() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(&loc(tmp.path())).unwrap();
    fs::write(s.dir().join("10.0.0.8"), b"c\xff8\r\neth0").unwrap();
    fs::write(s.dir().join("10.0.0.9"), b"c9\r\neth0\xff").unwrap();
    let leases = s.leases_swept().unwrap();
    let names: Vec<&str> = leases.iter().map(|l| l.file_name.as_str()).collect();
    assert_eq!(names, ["10.0.0.8", "10.0.0.9"]);
    assert!(!leases[1].owner.is_attachment("c9", "eth0"));
    assert!(!leases[1].owner.is_legacy_of("c9"));
}

/// A FIFO where a lease or the cursor should be does not hang the store: open(2) of a FIFO
/// waited for a writer, so ADD, DEL and GC blocked for good with the lock held, and every later
/// ADD of the network waited behind them. It reads as empty, as an empty lease file does.
#[test]
fn a_fifo_for_a_lease_or_the_cursor_does_not_hang() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net1");
    fs::create_dir(&dir).unwrap();
    for name in ["10.0.0.2", "last_reserved_ip.0"] {
        nix::unistd::mkfifo(&dir.join(name), nix::sys::stat::Mode::S_IRWXU).unwrap();
    }
    fs::write(dir.join("10.0.0.3"), "c3\r\neth0").unwrap();
    let l = loc(tmp.path());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let s = Store::open(&l).unwrap();
        let names: Vec<String> = s
            .leases_swept()
            .unwrap()
            .into_iter()
            .map(|l| l.file_name)
            .collect();
        let cursor = s.last_reserved_ip(0);
        let taken = s.reserve("10.0.0.2".parse().unwrap(), "c1", "eth0", 0);
        let placed = s.reserve("10.0.0.4".parse().unwrap(), "c1", "eth0", 0);
        tx.send((names, cursor, taken.unwrap(), placed.unwrap()))
            .unwrap();
    });
    let (names, cursor, taken, placed) = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the store hung on a FIFO");
    assert_eq!(names, ["10.0.0.2", "10.0.0.3"]);
    assert_eq!(cursor, None);
    assert!(!taken, "the FIFO's address is not handed out");
    assert!(
        placed,
        "a cursor that cannot be written does not fail the lease"
    );
}

/// A lease that never ends (a symlink to `/dev/zero`) is skipped after 1 MiB: it was read until
/// memory ran out.
#[test]
fn a_lease_without_end_is_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Store::open(&loc(tmp.path())).unwrap();
    std::os::unix::fs::symlink("/dev/zero", s.dir().join("10.0.0.5")).unwrap();
    fs::write(s.dir().join("10.0.0.6"), "c6\r\neth0").unwrap();
    let leases = s.leases().unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].file_name, "10.0.0.6");
}

/// A FIFO where the network directory should be fails ADD's open at once: open(2) of it
/// waited for a writer, so ADD hung for good (host-local fails with "not a directory").
#[test]
fn a_fifo_for_the_network_directory_fails_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    nix::unistd::mkfifo(&tmp.path().join("net1"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let l = loc(tmp.path());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(Store::open(&l).map(drop)).unwrap());
    let opened = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("Store::open hung on a FIFO");
    assert!(matches!(opened, Err(IpamError::Store { .. })), "{opened:?}");
}

#[test]
fn open_existing_does_not_create() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(Store::open_existing(&loc(tmp.path())).unwrap().is_none());
    assert!(!tmp.path().join("net1").exists());
    drop(Store::open(&loc(tmp.path())).unwrap());
    assert!(Store::open_existing(&loc(tmp.path())).unwrap().is_some());
}

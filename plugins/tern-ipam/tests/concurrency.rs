//! tern-ipam under concurrency and crashes, run as a runtime runs it: 64 parallel ADDs, a killed
//! lock holder, an ADD killed at any point, a killed writer's temp file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{add, add_ok, addresses, del, Call, Ipam, Net};
use serde_json::{json, Value};

fn run(cmd: &str, id: &str, conf: &Value) -> tern_testkit::exec::RunOutput {
    Call::new(Ipam::Tern, cmd, id).run(conf)
}

#[test]
fn sixty_four_parallel_adds_get_sixty_four_addresses() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = Net::new();
    let c = n.conf(
        "1.1.0",
        json!({"ranges": [[{"subnet": "10.26.0.0/24"}], [{"subnet": "fd26::/64"}]]}),
    );
    let handles: Vec<_> = (0..64)
        .map(|i| {
            let id = format!("par{i}");
            let call = Call::new(Ipam::Tern, "ADD", &id).plugin_call(&c);
            thread::spawn(move || (id, call.run().expect("run")))
        })
        .collect();
    let mut seen = BTreeSet::new();
    for h in handles {
        let (id, o) = h.join().unwrap();
        assert!(o.success(), "{id}: {}", o.describe());
        let a = addresses(&o);
        assert_eq!(a.len(), 2, "{id}: one per range set");
        for a in a {
            assert!(seen.insert(a.clone()), "{a} handed out twice");
        }
    }
    assert_eq!(seen.len(), 128);
    assert_eq!(n.leases().len(), 128);
    assert!(
        n.files().iter().all(|f| !f.starts_with('.')),
        "no temp file left: {:?}",
        n.files()
    );
}

/// A process that holds the network's lock, as a plugin killed inside its critical section would.
fn hold_lock(n: &Net) -> std::process::Child {
    fs::create_dir_all(n.dir()).unwrap();
    let lock = n.dir().join("lock");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("exec 9>>\"$1\" && flock -x 9 && echo locked && exec sleep 60")
        .arg("sh")
        .arg(&lock)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked");
    child
}

#[test]
fn a_killed_lock_holder_does_not_block_the_next_add() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = Net::new();
    let c = n.conf("1.1.0", json!({"subnet": "10.27.0.0/24"}));
    let mut holder = hold_lock(&n);
    let call = Call::new(Ipam::Tern, "ADD", "c1").plugin_call(&c);
    let started = Instant::now();
    let adder = thread::spawn(move || call.run().expect("run"));
    thread::sleep(Duration::from_millis(400));
    assert!(!adder.is_finished(), "ADD must wait while the lock is held");
    assert!(n.leases().is_empty());
    holder.kill().unwrap(); // SIGKILL: no cleanup, the kernel drops the flock.
    holder.wait().unwrap();
    let o = adder.join().unwrap();
    assert!(o.success(), "{}", o.describe());
    assert_eq!(addresses(&o), ["10.27.0.2/24"]);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn an_add_killed_at_any_point_leaves_no_half_lease() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = Net::new();
    let c = n.conf("1.1.0", json!({"subnet": "10.28.0.0/24"}));
    let mut killed = Vec::new();
    for (i, delay_us) in [
        0u64, 50, 100, 200, 300, 400, 600, 800, 1000, 1300, 1600, 2000, 3000,
    ]
    .iter()
    .cycle()
    .take(39)
    .enumerate()
    {
        let id = format!("k{i}");
        let mut cmd = Call::new(Ipam::Tern, "ADD", &id).plugin_call(&c).command();
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd.process_group(0);
        let mut child = cmd.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        use std::io::Write;
        let _ = stdin.write_all(&serde_json::to_vec(&c).unwrap());
        drop(stdin);
        thread::sleep(Duration::from_micros(*delay_us));
        let _ = child.kill();
        child.wait().unwrap();
        killed.push(id);
        // Whatever the moment of death: every lease file is whole.
        for (name, content) in n.leases() {
            let owner = content
                .strip_suffix("\r\neth0")
                .unwrap_or_else(|| panic!("lease {name} is not whole: {content:?}"));
            assert!(
                killed.contains(&owner.to_owned()),
                "{name}: unknown owner {owner}"
            );
        }
    }
    eprintln!(
        "{} of {} killed ADDs had completed their lease; files: {:?}",
        n.leases().len(),
        killed.len(),
        n.files()
    );
    // The next ADD is not blocked, sweeps stale temp files, and gets a fresh address.
    let o = add(Ipam::Tern, "after", &c);
    assert!(o.success(), "{}", o.describe());
    let mine = addresses(&o)[0].trim_end_matches("/24").to_owned();
    assert!(
        n.files().iter().all(|f| !f.starts_with('.')),
        "temps swept: {:?}",
        n.files()
    );
    let ips: BTreeSet<String> = n.leases().into_iter().map(|(ip, _)| ip).collect();
    assert!(ips.contains(&mine));
    // DEL of every killed ADD succeeds and leaves only the survivor's lease.
    for id in &killed {
        let d = del(Ipam::Tern, id, &c);
        assert!(d.success(), "{id}: {}", d.describe());
    }
    assert_eq!(n.leases(), [(mine, "after\r\neth0".to_owned())]);
}

#[test]
fn stale_temp_file_of_a_killed_writer_is_never_a_lease() {
    if tern_testkit::root::skip() {
        return;
    }
    let n = Net::new();
    let c = n.conf("1.1.0", json!({"subnet": "10.29.0.0/24"}));
    fs::create_dir_all(n.dir()).unwrap();
    // What a writer killed between writing its temp file and renaming it leaves.
    fs::write(n.dir().join(".tern-lease.tmp-4242-0"), "ghost\r\neth0").unwrap();
    fs::write(n.dir().join(".last_reserved_ip.0.tmp-4242-1"), "10.29.0.9").unwrap();
    let check = run("CHECK", "ghost", &c);
    assert!(!check.success(), "a temp file is not a lease");
    assert_eq!(add_ok(Ipam::Tern, "c1", &c), ["10.29.0.2/24"]);
    assert_eq!(n.files(), ["10.29.0.2", "last_reserved_ip.0", "lock"]);
}

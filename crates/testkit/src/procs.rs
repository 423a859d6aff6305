//! Processes of one process group, read from `/proc`: what crash tests kill (a runtime's CNI
//! invocation, plugins and their IPAM children included) and wait out.
//!
//! Invariant: only reads `/proc` and sends signals to the pids it found in the given group.

use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// One live member of a process group: pid and `comm` (the kernel's 15-byte command name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The process ID.
    pub pid: i32,
    /// `/proc/<pid>/stat` field 2, without the parentheses (e.g. `host-local`).
    pub comm: String,
}

/// `(comm, state, pgrp)` from the text of `/proc/<pid>/stat` (proc(5): the comm may hold spaces
/// and parentheses, so the fields after it are found from the *last* `)`).
fn parse_stat(stat: &str) -> Option<(String, char, i32)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_owned();
    let mut rest = stat.get(close + 1..)?.split_ascii_whitespace();
    let state = rest.next()?.chars().next()?;
    let _ppid = rest.next()?;
    let pgrp = rest.next()?.parse().ok()?;
    Some((comm, state, pgrp))
}

/// The processes of group `pgid` that have not exited (zombies are left out: they can do
/// nothing more), in `/proc` order. Processes that vanish while the scan runs are skipped.
pub fn group_members(pgid: i32) -> Vec<Member> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (comm, state, pgrp) = parse_stat(&stat)?;
            (pgrp == pgid && state != 'Z' && state != 'X').then_some(Member { pid, comm })
        })
        .collect()
}

/// SIGKILLs every live member of group `pgid` but `spare` (e.g. the runtime standing in for
/// containerd, whose plugin call timed out); returns the `comm` of each process killed.
pub fn kill_members_except(pgid: i32, spare: i32) -> Vec<String> {
    group_members(pgid)
        .into_iter()
        .filter(|m| m.pid != spare)
        .filter(|m| kill(Pid::from_raw(m.pid), Signal::SIGKILL).is_ok())
        .map(|m| m.comm)
        .collect()
}

/// SIGKILLs every live member of group `pgid` whose `comm` is one of `names` (e.g. the plugins a
/// runtime exec'd, whose call timed out, sparing their own children); returns the `comm` of each
/// process killed.
pub fn kill_members_named(pgid: i32, names: &[&str]) -> Vec<String> {
    group_members(pgid)
        .into_iter()
        .filter(|m| names.contains(&m.comm.as_str()))
        .filter(|m| kill(Pid::from_raw(m.pid), Signal::SIGKILL).is_ok())
        .map(|m| m.comm)
        .collect()
}

/// Waits until no process of group `pgid` exists any more, zombies included (`kill(-pgid, 0)`
/// fails): after a SIGKILL, so that nothing of it still runs, or could still be reaped, when
/// the next step begins.
///
/// # Errors
/// The members still there when `limit` has passed.
pub fn wait_group_gone(pgid: i32, limit: Duration) -> Result<(), Vec<Member>> {
    let start = Instant::now();
    while killpg(Pid::from_raw(pgid), None).is_ok() {
        if start.elapsed() > limit {
            return Err(group_members(pgid));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Polls group `pgid` until a live member named `comm` appears, for at most `limit`; returns
/// its pid.
pub fn wait_for_member(pgid: i32, comm: &str, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(m) = group_members(pgid).into_iter().find(|m| m.comm == comm) {
            return Some(m.pid);
        }
        if killpg(Pid::from_raw(pgid), None).is_err() {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_comm() {
        let s = "4242 (a) b (c)) S 1 777 777 0 -1 4194560 0 0";
        assert_eq!(parse_stat(s), Some(("a) b (c)".to_owned(), 'S', 777)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn finds_and_kills_a_group() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30; wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = i32::try_from(child.id()).unwrap();
        assert!(wait_for_member(pgid, "sleep", Duration::from_secs(5)).is_some());
        let start = Instant::now();
        while group_members(pgid)
            .iter()
            .filter(|m| m.comm == "sleep")
            .count()
            < 2
        {
            assert!(start.elapsed() < Duration::from_secs(5), "no second sleep");
        }
        let killed = kill_members_except(pgid, pgid);
        assert_eq!(killed, ["sleep", "sleep"], "only the two sleeps, not sh");
        child.wait().unwrap(); // sh's wait returns once both are gone
        wait_group_gone(pgid, Duration::from_secs(5)).unwrap();
        assert!(group_members(pgid).is_empty());
    }
}

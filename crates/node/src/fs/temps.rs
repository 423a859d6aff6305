//! Temp files of the atomic writes: names that identify their writer (pid and start time) for
//! good, and the sweep that removes those whose writer was killed between create and rename.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::read_small;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh temp file name for a write of `name` in the same directory by this process:
/// `.<name>.tmp-<pid>-<start>-<n>`, `<start>` being this process's start time (`/proc/self/stat`
/// field 22, clock ticks since boot) and `<n>` a per-process counter. The start time makes the
/// writer identifiable for good: with pid alone a sweep would take a killed writer's temp for a
/// live one's whenever its pid has been reused (`pid_max` is 32768 on many nodes), and the temp
/// would outlive every DEL and GC.
pub fn temp_name(name: &str) -> String {
    format!(
        ".{name}.tmp-{}-{}-{}",
        std::process::id(),
        own_start_time(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// This process's start time in clock ticks since boot (0 when `/proc` cannot tell: such a temp
/// is then judged by its pid alone, as an old-style name is).
fn own_start_time() -> u64 {
    static START: OnceLock<u64> = OnceLock::new();
    *START.get_or_init(|| proc_start_time("self").map_or(0, |(_, start)| start))
}

/// `(state, start time)` of `/proc/<pid>/stat` (proc(5) fields 3 and 22; the comm, field 2, may
/// hold spaces and parentheses, so fields are counted from the last `)`).
fn proc_start_time(pid: &str) -> Option<(char, u64)> {
    // Under 1.2 kB: 52 numeric fields and a comm of at most 64 bytes.
    let mut buf = [0u8; 2048];
    let stat = read_small(&Path::new("/proc").join(pid).join("stat"), &mut buf).ok()?;
    let stat = std::str::from_utf8(stat).ok()?;
    let mut rest = stat.get(stat.rfind(')')? + 1..)?.split_ascii_whitespace();
    let state = rest.next()?.chars().next()?;
    // Field 3 is the first after the comm, so field 22 is 19 further on.
    let start = rest.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Whether the writer of a temp file (its name's pid and start time) may still rename it: the
/// pid runs, is not a zombie (a killed writer not yet reaped can write nothing more), and, when
/// the name carries a start time, started then (else the pid was reused).
fn writer_alive(pid: u32, start: Option<u64>) -> bool {
    match proc_start_time(&pid.to_string()) {
        None => false,
        Some(('Z' | 'X', _)) => false,
        Some((_, actual)) => start.is_none_or(|s| s == 0 || s == actual),
    }
}

/// Removes temp files left in `dir` by [`write_atomic`](super::write_atomic) calls of killed
/// processes: those whose writer (pid and start time, in the name) no longer runs. A live writer's
/// temp file is left alone, so a sweep never breaks a concurrent write. Best effort: errors are
/// ignored.
pub fn remove_stale_temps(dir: &Path) {
    sweep_temps(dir, None);
}

/// Removes the temp files of `path` left by [`write_atomic`](super::write_atomic) calls of killed
/// processes (same rule as [`remove_stale_temps`]), e.g. when the owner of `path` deletes it: a
/// writer killed between create and rename must not leave its half of the file behind. Best
/// effort.
pub fn remove_stale_temps_of(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    sweep_temps(dir, Some(&format!(".{}.tmp-", name.to_string_lossy())));
}

/// The writer of a temp file name: `(pid, Some(start))` from `.<name>.tmp-<pid>-<start>-<n>`,
/// `(pid, None)` from the older `.<name>.tmp-<pid>-<n>`.
fn temp_writer(name: &str) -> Option<(u32, Option<u64>)> {
    let (_, tail) = name.rsplit_once(".tmp-")?;
    let fields: Vec<&str> = tail.split('-').collect();
    let pid = fields.first()?.parse().ok()?;
    match fields.len() {
        3 => Some((pid, Some(fields[1].parse().ok()?))),
        _ => Some((pid, None)),
    }
}

fn sweep_temps(dir: &Path, prefix: Option<&str>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if prefix.is_none_or(|p| name.starts_with(p)) {
            remove_if_stale_temp(dir, &name);
        }
    }
}

/// Removes `dir/name` when `name` is a temp file of [`write_atomic`](super::write_atomic)'s form
/// whose writer no longer runs (the rule of [`remove_stale_temps`]), for a caller that lists `dir`
/// itself and sweeps in the same walk. Returns whether `name` has a temp file's form (removed or
/// not). Best effort: errors are ignored.
pub fn remove_if_stale_temp(dir: &Path, name: &str) -> bool {
    if !(name.starts_with('.') && name.contains(".tmp-")) {
        return false;
    }
    let alive = temp_writer(name).is_some_and(|(pid, start)| writer_alive(pid, start));
    if !alive {
        let _ = fs::remove_file(dir.join(name));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_temps_of_one_file() {
        let dir = std::env::temp_dir().join(format!("tern-fs-of-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let dead = |name: &str| dir.join(format!(".{name}.tmp-4194305-7"));
        fs::write(dead("a_eth0.json"), b"half").unwrap();
        fs::write(dead("b_eth0.json"), b"half").unwrap();
        remove_stale_temps_of(&dir.join("a_eth0.json"));
        assert!(
            !dead("a_eth0.json").exists(),
            "the file's stale temp was kept"
        );
        assert!(
            dead("b_eth0.json").exists(),
            "another file's temp was removed"
        );
        assert_eq!(temp_writer(".x.json.tmp-123-4"), Some((123, None)));
        assert_eq!(temp_writer(".x.json.tmp-123-99-4"), Some((123, Some(99))));
        assert_eq!(temp_writer("x.json"), None);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A killed writer whose pid was reused, or that is a zombie not yet reaped, is dead: its
    /// temp file goes. (By pid alone both were taken for live writers and the temp outlived
    /// every DEL and GC.)
    #[test]
    fn reused_pid_and_zombie_writers_are_dead() {
        let dir = std::env::temp_dir().join(format!("tern-fs-reuse-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let me = std::process::id();
        let (_, my_start) = proc_start_time("self").unwrap();
        assert_eq!(own_start_time(), my_start);
        let mine = temp_name("a.json");
        assert!(
            mine.starts_with(&format!(".a.json.tmp-{me}-{my_start}-")),
            "{mine}"
        );
        // Our pid with another start time: a dead writer whose pid we now hold.
        let reused = dir.join(format!(".a.json.tmp-{me}-{}-0", my_start + 1));
        let live = dir.join(&mine);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let zpid = child.id();
        // Not reaped yet: a zombie once it has exited.
        while proc_start_time(&zpid.to_string()).is_some_and(|(st, _)| st != 'Z') {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let (_, zstart) = proc_start_time(&zpid.to_string()).unwrap();
        let zombie = dir.join(format!(".a.json.tmp-{zpid}-{zstart}-0"));
        for p in [&reused, &live, &zombie] {
            fs::write(p, b"half").unwrap();
        }
        remove_stale_temps_of(&dir.join("a.json"));
        child.wait().unwrap();
        assert!(!reused.exists(), "a temp of a reused pid was kept");
        assert!(!zombie.exists(), "a zombie writer's temp was kept");
        assert!(live.exists(), "a live writer's temp was removed");
        fs::remove_dir_all(&dir).unwrap();
    }
}

//! Per-phase timing of one plugin invocation, for `tern-bench --breakdown`; off unless
//! `TERN_TRACE_PHASES` names a file.
//!
//! [`init`] reads the variable once, at the start of `main`; while it is unset every [`mark`] is
//! one relaxed atomic load and a branch (no clock read, no allocation, no lock). When it names a
//! file, each mark records `(name, CLOCK_MONOTONIC ns)`; [`finish`] appends one line per process
//! to the file with a single `write(2)` on an `O_APPEND` descriptor (lines of parallel plugins do
//! not interleave):
//!
//! `<program> <verb> pid=<pid> main=<ns> <phase>=<ns> ...`
//!
//! Every value is an absolute `CLOCK_MONOTONIC` time in ns (the clock `std::time::Instant` reads
//! on Linux, shared by every process), so a caller that read the clock before spawning the plugin
//! gets exec + start-up as `main - spawn`. A mark names the phase that *ends* there: a phase
//! lasts from the previous mark (or `main`) to its own. Names repeat (one `nl:RTM_NEWADDR` per
//! address); a reader sums them. Marks from helper threads join the same list.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The environment variable naming the trace file.
pub const ENV: &str = "TERN_TRACE_PHASES";

static ON: AtomicBool = AtomicBool::new(false);
static MARKS: Mutex<Vec<(&'static str, u64)>> = Mutex::new(Vec::new());
static PATH: Mutex<Option<std::ffi::OsString>> = Mutex::new(None);

fn now_ns() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(t) => (t.tv_sec() as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec() as u64),
        Err(_) => 0,
    }
}

/// Reads `TERN_TRACE_PHASES` (once per process; later calls do nothing) and, when it is set and
/// not empty, starts recording with a `main` mark.
pub fn init() {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, Ordering::Relaxed) {
        return;
    }
    let Some(path) = std::env::var_os(ENV).filter(|p| !p.is_empty()) else {
        return;
    };
    if let Ok(mut p) = PATH.lock() {
        *p = Some(path);
    }
    ON.store(true, Ordering::Relaxed);
    mark("main");
}

/// Whether phases are being recorded.
#[inline]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Ends phase `name` now (a no-op while tracing is off).
#[inline]
pub fn mark(name: &'static str) {
    if on() {
        record(name);
    }
}

#[cold]
fn record(name: &'static str) {
    let t = now_ns();
    if let Ok(mut m) = MARKS.lock() {
        m.push((name, t));
    }
}

/// Appends this process's line to the trace file (best effort: a trace never fails a verb);
/// `verb` is `CNI_COMMAND`. Does nothing while tracing is off.
pub fn finish(verb: &str) {
    if !on() {
        return;
    }
    let program = std::env::args_os()
        .next()
        .map(|a| {
            std::path::Path::new(&a)
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    let mut line = format!("{program} {verb} pid={}", std::process::id());
    if let Ok(m) = MARKS.lock() {
        for (name, t) in m.iter() {
            line.push_str(&format!(" {name}={t}"));
        }
    }
    line.push('\n');
    let path = PATH.lock().ok().and_then(|p| p.clone());
    if let Some(path) = path {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

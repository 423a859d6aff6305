//! Logging per DESIGN.md: `logLevel` and `logFile` from the netconf; never stdout (it carries the
//! result), never a token. Default: warnings and errors to stderr.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Mutex;

use tracing::level_filters::LevelFilter;

/// Installs the global subscriber once. `level` is `error`, `warn`, `info`, `debug` or `trace`
/// (anything else: `warn`); `file`, when set and openable (append, created 0600), receives the
/// logs, else stderr does. Safe to call more than once: later calls do nothing.
pub fn init(level: Option<&str>, file: Option<&str>) {
    let level = match level.map(str::to_ascii_lowercase).as_deref() {
        Some("error") => LevelFilter::ERROR,
        Some("info") => LevelFilter::INFO,
        Some("debug") => LevelFilter::DEBUG,
        Some("trace") => LevelFilter::TRACE,
        _ => LevelFilter::WARN,
    };
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_target(false);
    let opened = file.filter(|f| !f.is_empty()).and_then(|f| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(f)
            .ok()
    });
    let _ = match opened {
        Some(f) => builder.with_writer(Mutex::new(f)).try_init(),
        None => builder.with_writer(std::io::stderr).try_init(),
    };
}

//! Logging per DESIGN.md: `logLevel` and `logFile` from the netconf; never stdout (it carries the
//! result), never a token. Default: warnings and errors to stderr.
//!
//! A plugin runs once and exits, and its whole binary tends to end up resident, so this is a
//! small [`tracing::Subscriber`] of its own rather than `tracing-subscriber`'s (≈150 KB of code):
//! one line per event, `<UTC time> <LEVEL> <span>{<fields>}:…: <message> <field>=<value>…`,
//! written with one `write` call. Spans and events below the level are disabled at the call
//! site; spans are kept (their formatted fields) until the process ends — a plugin makes a few.

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// The default `logFileMaxBytes`: 10 MiB, so a node keeps at most about 20 MiB per log file
/// (the file and its one rotated copy).
pub const DEFAULT_LOG_FILE_MAX_BYTES: u64 = 10 << 20;

/// Installs the global subscriber once. `level` is `error`, `warn`, `info`, `debug` or `trace`
/// (anything else: `warn`); `file`, when set and openable (append, created 0600), receives the
/// logs, else stderr does. A regular `file` of `max_bytes` (default
/// [`DEFAULT_LOG_FILE_MAX_BYTES`]) or more is first renamed to `<file>.1` (replacing the previous
/// one), so the log and its one old copy stay bounded. Safe to call more than once: later calls
/// do nothing.
pub fn init(level: Option<&str>, file: Option<&str>, max_bytes: Option<u64>) {
    let max = match level.map(str::to_ascii_lowercase).as_deref() {
        Some("error") => Level::ERROR,
        Some("info") => Level::INFO,
        Some("debug") => Level::DEBUG,
        Some("trace") => Level::TRACE,
        _ => Level::WARN,
    };
    let cap = max_bytes.unwrap_or(DEFAULT_LOG_FILE_MAX_BYTES);
    let opened = file
        .filter(|f| !f.is_empty())
        .and_then(|f| open_rotated(f, cap));
    let out: Box<dyn Write + Send> = match opened {
        // Logs never go to stdout, which carries the result: a logFile that is our stdout
        // (`/dev/stdout`, `/proc/self/fd/1`) is replaced by stderr.
        Some(f) if !is_stdout(&f) => Box::new(f),
        _ => Box::new(std::io::stderr()),
    };
    let _ = tracing::subscriber::set_global_default(LineLogger::new(max, out));
}

/// Opens `path` for appending (created 0600); when it is a regular file of `cap` bytes or more,
/// renames it to `<path>.1` first and opens a new one. Concurrent plugins may both rotate: the
/// older copy is then lost, the bound holds.
fn open_rotated(path: &str, cap: u64) -> Option<std::fs::File> {
    let open = || {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .ok()
    };
    let f = open()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() || meta.len() < cap {
        return Some(f);
    }
    drop(f);
    let _ = std::fs::rename(path, format!("{path}.1"));
    open()
}

/// Whether `f` is the same open file as this process's stdout (same device and inode).
fn is_stdout(f: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(a), Ok(b)) = (f.metadata(), std::fs::metadata("/proc/self/fd/1")) else {
        return false;
    };
    a.dev() == b.dev() && a.ino() == b.ino()
}

/// The subscriber: events at or above `max` as single lines on `out`.
pub struct LineLogger {
    max: Level,
    out: Mutex<Box<dyn Write + Send>>,
    /// Formatted spans, `name{k=v …}`; span id n is entry n-1.
    spans: Mutex<Vec<String>>,
}

thread_local! {
    /// The spans this thread has entered, innermost last.
    static ENTERED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

impl LineLogger {
    /// A logger writing events at or above `max` to `out`.
    pub fn new(max: Level, out: Box<dyn Write + Send>) -> LineLogger {
        LineLogger {
            max,
            out: Mutex::new(out),
            spans: Mutex::new(Vec::new()),
        }
    }
}

/// Collects fields as ` k=v` (strings quoted as `Debug` does), the message bare and first.
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` for a time since the epoch (proleptic Gregorian, UTC). The
/// calendar is the `time` crate's; the line is formatted here, without its formatting feature.
fn utc(since_epoch: std::time::Duration) -> String {
    let t = time::OffsetDateTime::UNIX_EPOCH
        .saturating_add(time::Duration::try_from(since_epoch).unwrap_or(time::Duration::MAX));
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}

impl Subscriber for LineLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= self.max
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(self.max.into())
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut f = Fields::default();
        span.record(&mut f);
        let text = format!("{}{{{}}}", span.metadata().name(), f.rest.trim_start());
        let mut spans = self.spans.lock().unwrap_or_else(|e| e.into_inner());
        spans.push(text);
        Id::from_u64(spans.len() as u64)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut f = Fields::default();
        values.record(&mut f);
        let mut spans = self.spans.lock().unwrap_or_else(|e| e.into_inner());
        let idx = span.into_u64().saturating_sub(1) as usize;
        if let Some(s) = spans.get_mut(idx) {
            // Insert the new fields before the closing brace.
            s.pop();
            s.push_str(&f.rest);
            s.push('}');
        }
    }

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut line = format!("{} {:>5} ", utc(now), event.metadata().level());
        {
            let spans = self.spans.lock().unwrap_or_else(|e| e.into_inner());
            ENTERED.with(|entered| {
                for id in entered.borrow().iter() {
                    if let Some(s) = spans.get((*id as usize).saturating_sub(1)) {
                        line.push_str(s);
                        line.push_str(": ");
                    }
                }
            });
        }
        line.push_str(&f.message);
        line.push_str(&f.rest);
        line.push('\n');
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = out.write_all(line.as_bytes());
    }

    fn enter(&self, span: &Id) {
        ENTERED.with(|e| e.borrow_mut().push(span.into_u64()));
    }

    fn exit(&self, span: &Id) {
        ENTERED.with(|e| {
            let mut e = e.borrow_mut();
            if let Some(pos) = e.iter().rposition(|id| *id == span.into_u64()) {
                e.remove(pos);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn one_line_per_enabled_event_with_span_context() {
        let buf = Buf::default();
        let logger = LineLogger::new(Level::INFO, Box::new(buf.clone()));
        tracing::subscriber::with_default(logger, || {
            let span = tracing::info_span!("cni", command = "ADD", container_id = "c1");
            let _g = span.enter();
            tracing::warn!(link = "tern0", n = 3, "removing a stale veth");
            tracing::debug!("not at this level");
            let inner = tracing::info_span!("ipam", kind = "tern-ipam");
            inner.in_scope(|| tracing::info!("allocated"));
            tracing::error!("after the inner span");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].ends_with(
                r#" WARN cni{command="ADD" container_id="c1"}: removing a stale veth link="tern0" n=3"#
            ),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].ends_with(
                r#" INFO cni{command="ADD" container_id="c1"}: ipam{kind="tern-ipam"}: allocated"#
            ),
            "{}",
            lines[1]
        );
        assert!(
            lines[2]
                .ends_with(r#"ERROR cni{command="ADD" container_id="c1"}: after the inner span"#),
            "{}",
            lines[2]
        );
        assert_eq!(lines[0].as_bytes()[10], b'T', "{}", lines[0]);
    }

    #[test]
    fn utc_timestamps() {
        assert_eq!(utc(Duration::ZERO), "1970-01-01T00:00:00.000000Z");
        // 2024-02-29T12:34:56.5Z, a leap day.
        assert_eq!(
            utc(Duration::from_millis(1_709_210_096_500)),
            "2024-02-29T12:34:56.500000Z"
        );
        assert_eq!(
            utc(Duration::from_secs(4_102_444_799)),
            "2099-12-31T23:59:59.000000Z"
        );
    }
}

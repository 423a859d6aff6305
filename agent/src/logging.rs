//! The agent's log settings from its environment: `TERN_LOG` (level) and `TERN_LOG_FORMAT`
//! (`text` or `json`), checked at start; logs go to stderr and never carry a token.

use tracing::Level;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event (the default).
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields.message`, the event's fields,
    /// `target`, the spans), for log collectors.
    Json,
}

/// The agent's log settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSettings {
    /// Events at or above this level are written.
    pub level: Level,
    /// Text or JSON lines.
    pub format: LogFormat,
}

impl LogSettings {
    /// Reads `TERN_LOG` (`error`, `warn`, `info` (default), `debug` or `trace`) and
    /// `TERN_LOG_FORMAT` (`text` (default) or `json`) from `env`; an empty value is the default.
    ///
    /// # Errors
    /// Any other value, quoted, with the accepted ones.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, String> {
        let level = match env("TERN_LOG").unwrap_or_default().as_str() {
            "" | "info" => Level::INFO,
            "error" => Level::ERROR,
            "warn" => Level::WARN,
            "debug" => Level::DEBUG,
            "trace" => Level::TRACE,
            other => {
                return Err(format!(
                    "TERN_LOG {other:?} is not a log level: use error, warn, info, debug or trace"
                ))
            }
        };
        let format = match env("TERN_LOG_FORMAT").unwrap_or_default().as_str() {
            "" | "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => {
                return Err(format!(
                    "TERN_LOG_FORMAT {other:?} is not a log format: use text or json"
                ))
            }
        };
        Ok(LogSettings { level, format })
    }

    /// Installs the global subscriber (stderr, no colours).
    pub fn init(self) {
        let b = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_max_level(self.level);
        match self.format {
            LogFormat::Text => b.init(),
            LogFormat::Json => b.json().init(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(level: &str, format: &str) -> Result<LogSettings, String> {
        let (l, f) = (level.to_owned(), format.to_owned());
        LogSettings::from_env(&move |k| match k {
            "TERN_LOG" => Some(l.clone()),
            "TERN_LOG_FORMAT" => Some(f.clone()),
            _ => None,
        })
    }

    #[test]
    fn defaults_and_strict_values() {
        let d = LogSettings::from_env(&|_| None).unwrap();
        assert_eq!((d.level, d.format), (Level::INFO, LogFormat::Text));
        let j = settings("debug", "json").unwrap();
        assert_eq!((j.level, j.format), (Level::DEBUG, LogFormat::Json));
        let e = settings("loud", "").unwrap_err();
        assert!(
            e.contains("\"loud\"") && e.contains("error, warn, info"),
            "{e}"
        );
        let e = settings("", "xml").unwrap_err();
        assert!(e.contains("\"xml\"") && e.contains("text or json"), "{e}");
    }
}

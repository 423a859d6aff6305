//! The verb report: one datagram a plugin sends to tern-agent after each verb (which plugin, which
//! verb, the result code, how long the plugin's own work took), and its parser for the agent.
//!
//! Invariant: sending can never delay or fail the verb — one `sendto` on a fresh `SOCK_NONBLOCK`
//! socket, every error ignored (no agent, a stale socket, a full queue, no permission).
//!
//! Wire format: one Unix datagram of ASCII, at most [`MAX_REPORT`] bytes, five fields separated by
//! one space and no newline: `tern-verb/1 <plugin> <VERB> <code> <microseconds>`, e.g.
//! `tern-verb/1 tern ADD 0 4210`. `<plugin>` is one of [`PLUGINS`]; `<VERB>` is `CNI_COMMAND` as
//! spelled by the CNI spec ("Parameters"); `<code>` is 0 for success, else the error result's code
//! (CNI spec "Error", 0–999); `<microseconds>` is the time from the dispatcher's start to the
//! result written, at most [`MAX_MICROS`].

use std::path::Path;
use std::time::Duration;

/// Where the plugins send their reports: a Unix datagram socket that tern-agent binds in its run
/// directory (beside the agent channel, `/run/tern/agent.sock`). Fixed, so a plugin needs no
/// configuration to report; a plugin run where nothing is bound there reports nothing.
pub const REPORT_SOCKET: &str = "/run/tern/metrics.sock";

/// The first field of every report: the format and its version.
pub const MAGIC: &str = "tern-verb/1";

/// The plugins that report, as they appear in the `plugin` field.
pub const PLUGINS: [&str; 3] = ["tern", "tern-tuning", "tern-ipam"];

/// The verbs a report may name, as the `verb` field spells them: `CNI_COMMAND`'s values (CNI
/// spec "Parameters"; the same list as `tern_cni::Verb`, which this crate does not depend on).
pub const VERBS: [&str; 6] = ["ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION"];

/// Longest valid report (bytes).
pub const MAX_REPORT: usize = 64;

/// Largest duration a report may carry (µs): one hour. A longer one is malformed.
pub const MAX_MICROS: u64 = 3_600_000_000;

/// Largest result code a report may carry (CNI spec "Error": codes are 0–99 well-known, 100 and
/// up plugin-specific; runtimes and plugins use at most 999).
pub const MAX_CODE: u32 = 999;

/// One verb's report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerbReport {
    /// The plugin, one of [`PLUGINS`].
    pub plugin: &'static str,
    /// The verb, one of [`VERBS`] (`CNI_COMMAND` as the spec spells it).
    pub verb: &'static str,
    /// 0 for success, else the CNI error code (≤ [`MAX_CODE`]).
    pub code: u32,
    /// The plugin's own time for the verb (µs, ≤ [`MAX_MICROS`]).
    pub micros: u64,
}

impl VerbReport {
    /// A report of `verb` (one of [`VERBS`]) by `plugin` (one of [`PLUGINS`]) with `code`
    /// (clamped to [`MAX_CODE`]), taking `took` (clamped to [`MAX_MICROS`]).
    pub fn new(plugin: &'static str, verb: &'static str, code: u32, took: Duration) -> Self {
        let micros = u64::try_from(took.as_micros()).map_or(MAX_MICROS, |m| m.min(MAX_MICROS));
        VerbReport {
            plugin,
            verb,
            code: code.min(MAX_CODE),
            micros,
        }
    }

    /// The datagram's bytes.
    pub fn encode(&self) -> String {
        format!(
            "{MAGIC} {} {} {} {}",
            self.plugin, self.verb, self.code, self.micros
        )
    }

    /// Parses one received datagram; `None` for anything that is not exactly a valid report
    /// (wrong size, magic, field count, plugin, verb, a code or duration out of range or not in
    /// plain decimal). Never allocates on the datagram's say-so.
    pub fn parse(datagram: &[u8]) -> Option<VerbReport> {
        if datagram.len() > MAX_REPORT {
            return None;
        }
        let text = std::str::from_utf8(datagram).ok()?;
        let mut f = text.split(' ');
        if f.next()? != MAGIC {
            return None;
        }
        let plugin = f.next()?;
        let plugin = *PLUGINS.iter().find(|p| **p == plugin)?;
        let verb = f.next()?;
        let verb = *VERBS.iter().find(|v| **v == verb)?;
        let code = decimal(f.next()?).filter(|c| *c <= u64::from(MAX_CODE))?;
        let micros = decimal(f.next()?).filter(|m| *m <= MAX_MICROS)?;
        if f.next().is_some() {
            return None;
        }
        Some(VerbReport {
            plugin,
            verb,
            code: u32::try_from(code).ok()?,
            micros,
        })
    }

    /// Sends the report to `socket`, once, without blocking: a non-blocking datagram socket and
    /// one `sendto` with `MSG_DONTWAIT | MSG_NOSIGNAL`; every error is ignored (it only means
    /// the agent will not count this verb).
    pub fn send_to(&self, socket: &Path) {
        use nix::sys::socket::{self, AddressFamily, MsgFlags, SockFlag, SockType, UnixAddr};
        let Ok(addr) = UnixAddr::new(socket) else {
            return;
        };
        let Ok(fd) = socket::socket(
            AddressFamily::Unix,
            SockType::Datagram,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        ) else {
            return;
        };
        let _ = socket::sendto(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            self.encode().as_bytes(),
            &addr,
            MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
        );
    }
}

/// Plain decimal digits only (no sign, no spaces, at most 10 digits), as a number.
fn decimal(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_fits() {
        let r = VerbReport::new("tern-tuning", "CHECK", 106, Duration::from_micros(4210));
        assert_eq!(r.encode(), "tern-verb/1 tern-tuning CHECK 106 4210");
        assert_eq!(VerbReport::parse(r.encode().as_bytes()), Some(r));
        let longest = VerbReport::new("tern-tuning", "VERSION", 999, Duration::from_secs(7200));
        assert_eq!(longest.micros, MAX_MICROS);
        assert!(longest.encode().len() <= MAX_REPORT);
        assert_eq!(
            VerbReport::parse(longest.encode().as_bytes()),
            Some(longest)
        );
    }

    #[test]
    fn refuses_anything_else() {
        for bad in [
            "",
            "tern-verb/1",
            "tern-verb/2 tern ADD 0 1",
            "tern-verb/1 ptp ADD 0 1",
            "tern-verb/1 tern add 0 1",
            "tern-verb/1 tern ADD 1000 1",
            "tern-verb/1 tern ADD -1 1",
            "tern-verb/1 tern ADD +1 1",
            "tern-verb/1 tern ADD 0 3600000001",
            "tern-verb/1 tern ADD 0 99999999999",
            "tern-verb/1 tern ADD 0 1 x",
            "tern-verb/1 tern ADD 0 1\n",
            "tern-verb/1  tern ADD 0 1",
            "tern-verb/1 tern ADD 0x1 1",
            "tern-verb/1 tern ADD 0 ",
        ] {
            assert_eq!(VerbReport::parse(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(VerbReport::parse(&[0xff; 20]), None);
        let long = format!("tern-verb/1 tern ADD 0 1{}", " ".repeat(MAX_REPORT));
        assert_eq!(VerbReport::parse(long.as_bytes()), None);
    }

    #[test]
    fn sending_to_nothing_returns_at_once() {
        let dir = std::env::temp_dir().join(format!("tern-report-{}", std::process::id()));
        let r = VerbReport::new("tern", "ADD", 0, Duration::from_millis(3));
        let t = std::time::Instant::now();
        r.send_to(&dir.join("absent.sock"));
        r.send_to(Path::new(&"x".repeat(200)));
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_full_receiver_does_not_block_the_sender() {
        let dir = tempdir();
        let path = dir.join("m.sock");
        let rx = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        let r = VerbReport::new("tern", "DEL", 0, Duration::from_millis(1));
        // Far more than any receive queue holds (net.unix.max_dgram_qlen, 10 or 512).
        let t = std::time::Instant::now();
        for _ in 0..5_000 {
            r.send_to(&path);
        }
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        let mut buf = [0u8; 128];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(VerbReport::parse(&buf[..n]), Some(r));
        drop(rx);
        let _ = std::fs::remove_dir_all(dir);
    }

    fn tempdir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "tern-report-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}

//! libtest's `test result:` lines summed (scripts/test's last line, `tern-test-summary`):
//! `test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in
//! 0.52s`, the form cargo prints once per test binary.

/// The sum of every result line read.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Totals {
    /// How many result lines (test binaries) were summed.
    pub binaries: usize,
    /// Tests passed.
    pub passed: u64,
    /// Tests failed.
    pub failed: u64,
    /// Tests ignored (left out, or skipped by their suite).
    pub ignored: u64,
    /// Benchmarks measured.
    pub measured: u64,
    /// Tests a filter left out.
    pub filtered_out: u64,
    /// The binaries' own times summed, in seconds.
    pub seconds: f64,
    /// Result lines that said `FAILED` themselves (whatever their counts).
    pub failed_binaries: usize,
}

impl Totals {
    /// Sums every line of `text` that begins `test result: `; other lines are left alone.
    pub fn sum(text: &str) -> Self {
        let mut t = Self::default();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("test result: ") else {
                continue;
            };
            t.binaries += 1;
            if rest.starts_with("FAILED") {
                t.failed_binaries += 1;
            }
            // "ok. 3 passed; 0 failed; ...; finished in 0.52s": each count is the word before
            // its name
            let words: Vec<&str> = rest.split([' ', ';']).filter(|w| !w.is_empty()).collect();
            for pair in words.windows(2) {
                let n = pair[0].parse::<u64>().unwrap_or(0);
                match pair[1] {
                    "passed" => t.passed += n,
                    "failed" => t.failed += n,
                    "ignored" => t.ignored += n,
                    "measured" => t.measured += n,
                    "filtered" => t.filtered_out += n,
                    _ => {}
                }
            }
            if let Some(secs) = rest.rsplit_once("finished in ").map(|(_, s)| s) {
                t.seconds += secs
                    .trim()
                    .trim_end_matches('s')
                    .parse::<f64>()
                    .unwrap_or(0.0);
            }
        }
        t
    }

    /// The summed line; FAILED when `rc` is not 0, any test failed, any line said FAILED, or
    /// there was no line at all (nothing ran is not a pass).
    pub fn line(&self, rc: i32) -> String {
        let status =
            if rc == 0 && self.failed == 0 && self.failed_binaries == 0 && self.binaries > 0 {
                "ok"
            } else {
                "FAILED"
            };
        format!(
            "test result: {status}. {} passed; {} failed; {} ignored; {} measured; {} filtered out; finished in {:.2}s",
            self.passed, self.failed, self.ignored, self.measured, self.filtered_out, self.seconds
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_every_result_line_and_fails_on_a_failure_or_a_status() {
        let log = "running 2 tests\ntest a ... ok\n\
            test result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.50s\n\
            not a test result: 9 passed\n\
            test result: FAILED. 40 passed; 5 failed; 3 ignored; 1 measured; 2 filtered out; finished in 601.25s\n";
        let t = Totals::sum(log);
        assert_eq!((t.binaries, t.passed, t.failed, t.ignored), (2, 42, 5, 4));
        assert_eq!((t.measured, t.filtered_out), (1, 2));
        assert_eq!(
            t.line(0),
            "test result: FAILED. 42 passed; 5 failed; 4 ignored; 1 measured; 2 filtered out; finished in 601.75s"
        );
        let ok = Totals::sum("test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.00s");
        assert!(ok.line(0).starts_with("test result: ok. 1 passed"));
        assert!(ok.line(101).starts_with("test result: FAILED. 1 passed"));
        assert_eq!(Totals::sum("").line(0), "test result: FAILED. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s");
        let said = Totals::sum("test result: FAILED. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.10s");
        assert!(said.line(0).starts_with("test result: FAILED."));
    }
}
